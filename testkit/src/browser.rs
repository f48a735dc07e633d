//! Just enough of the Chrome DevTools Protocol to drive Debian's headless Chromium:
//! launch it on a loopback debugging port, open a page, evaluate JavaScript, type.
//!
//! Chromium is stopped by its PID when the [`Browser`] is dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::WebSocket;

/// Where Debian's package puts it (`CHROMIUM` overrides).
pub fn chromium_path() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("CHROMIUM").map(PathBuf::from),
        Some(PathBuf::from("/usr/bin/chromium")),
        Some(PathBuf::from("/usr/bin/chromium-browser")),
    ];
    candidates.into_iter().flatten().find(|p| p.exists())
}

pub struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn launch(binary: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1200,800",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        // It announces its port on stderr: "DevTools listening on ws://127.0.0.1:PORT/...".
        let stderr = child.stderr.take().unwrap();
        let (found, port) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let _ = found.send(port.parse::<u16>().unwrap());
                }
            }
        });
        let port = port
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium announced its DevTools port");
        Browser {
            child,
            port,
            _profile: profile,
        }
    }

    /// Opens a new tab and returns a connection to it.
    pub fn open(&self, url: &str) -> Page {
        let http = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        http.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            &http,
            "PUT /json/new?{url} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            self.port
        )
        .unwrap();
        // DevTools keeps the connection open: read the headers, then Content-Length bytes.
        let mut reader = BufReader::new(&http);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let target: Value = serde_json::from_slice(&body).unwrap();
        let ws = target["webSocketDebuggerUrl"].as_str().unwrap();
        let (socket, _) = tungstenite::connect(ws).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(stream) = socket.get_ref() {
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
        }
        Page { socket, next_id: 0 }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Page {
    socket: WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Page {
    /// Sends one command and waits for its answer (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({ "id": id, "method": method, "params": params }).to_string();
        self.socket
            .send(tungstenite::Message::text(message))
            .unwrap();
        loop {
            let message = self.socket.read().unwrap();
            let Ok(text) = message.to_text() else {
                continue;
            };
            let Ok(value) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            if value["id"] == id {
                assert!(value.get("error").is_none(), "{method}: {value}");
                return value["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        result["result"]["value"].clone()
    }

    /// Waits (bounded) until `expression` equals `expected`.
    pub fn wait_for(&mut self, what: &str, expression: &str, expected: &Value) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let value = self.eval(expression);
            if &value == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: last saw {value}, want {expected}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Focuses the element and types `text` into it, as a person would (input events fire).
    pub fn type_into(&mut self, selector: &str, text: &str) {
        self.eval(&format!("document.querySelector({selector:?}).focus()"));
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// Saves a PNG of the page.
    pub fn screenshot(&mut self, path: &Path) {
        let result = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let data = result["data"].as_str().unwrap();
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}
