//! A real `redis-server` for a test: on a free loopback port, no persistence, stopped by
//! its PID when dropped. Where Debian's `redis-server` is not installed the test says so
//! loudly and skips — unless `CI=true`, where it fails.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};

use crate::free_port;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    options: RedisOptions,
    /// The TLS port, when `options.tls` asks for one.
    tls_port: Option<u16>,
    /// Its working directory: whatever it writes (a replica's full sync) stays there.
    dir: tempfile::TempDir,
}

/// How a test's server differs from a plain one.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Also serve TLS, on a port of its own (the plain port stays, for the fixture).
    pub tls: Option<RedisTlsOptions>,
    /// More `redis-server` arguments (an ACL user, `--replicaof`, …).
    pub args: Vec<String>,
    /// Authenticate the fixture's own commands as this user and password.
    pub auth: Option<(String, String)>,
    /// The TLS port to use (default: a free one).
    pub tls_port: Option<u16>,
}

/// A TLS port's certificate, key and the CA client certificates must come from.
#[derive(Clone, Debug)]
pub struct RedisTlsOptions {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    /// Require client certificates from `ca` (`--tls-auth-clients yes`).
    pub client_certs: bool,
}

/// `redis-server`'s path, if installed (`REDIS_SERVER` overrides).
pub(crate) fn binary() -> Option<String> {
    if let Ok(path) = std::env::var("REDIS_SERVER") {
        return Some(path);
    }
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(str::to_owned)
}

impl RedisServer {
    /// Starts a server, or returns `None` after saying why the calling test skips.
    pub fn start(test: &str) -> Option<RedisServer> {
        RedisServer::start_with(test, RedisOptions::default())
    }

    /// Starts a server as `options` say, or returns `None` after saying why the test skips.
    pub fn start_with(test: &str, options: RedisOptions) -> Option<RedisServer> {
        let Some(binary) = binary() else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "redis-server is required under CI (apt-get install redis-server)"
            );
            eprintln!(
                "SKIPPED {test}: redis-server is not installed (apt-get install redis-server)"
            );
            return None;
        };
        let port = free_port();
        let tls_port = options
            .tls
            .as_ref()
            .map(|_| options.tls_port.unwrap_or_else(free_port));
        let mut server = RedisServer {
            child: None,
            port,
            options,
            tls_port,
            dir: tempfile::tempdir().expect("a temporary directory"),
        };
        server.spawn(&binary);
        Some(server)
    }

    fn spawn(&mut self, binary: &str) {
        let mut command = Command::new(binary);
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"]);
        if let (Some(tls), Some(port)) = (&self.options.tls, self.tls_port) {
            command
                .args(["--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args([
                    "--tls-auth-clients",
                    if tls.client_certs { "yes" } else { "no" },
                ]);
        }
        let child = command
            .args(&self.options.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.command("PING").as_deref() == Some("+PONG") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The plain port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, if the server has one.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The TLS port's URL (`rediss://localhost:PORT`), if the server has one.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port
            .map(|port| format!("rediss://localhost:{port}"))
    }

    /// Kills the server (SIGKILL, by PID), as an outage would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let binary = binary().expect("it ran before");
        self.spawn(&binary);
    }

    /// Sends one inline command and returns the first line of the reply.
    pub fn command(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut reply = [0u8; 4096];
        if let Some((user, password)) = &self.options.auth {
            stream
                .write_all(format!("AUTH {user} {password}\r\n").as_bytes())
                .ok()?;
            let _ = stream.read(&mut reply).ok()?;
        }
        stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        let n = stream.read(&mut reply).ok()?;
        let text = String::from_utf8_lossy(&reply[..n]);
        Some(text.lines().next().unwrap_or("").to_owned())
    }

    /// A field of `INFO commandstats`' line for `command` (e.g. `calls`).
    pub fn command_calls(&self, command: &str) -> u64 {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).unwrap();
        stream.write_all(b"INFO commandstats\r\n").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut text = String::new();
        let mut buffer = [0u8; 16384];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buffer[..n]));
            if text.ends_with("\r\n\r\n") || text.matches("\r\n").count() > 2 && n < buffer.len() {
                break;
            }
        }
        let prefix = format!("cmdstat_{command}:calls=");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
