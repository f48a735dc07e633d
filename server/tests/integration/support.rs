//! Helpers of the service's tests: the shared kit (servers, HTTP client), and a gateway
//! started in this process on free loopback ports.

pub use tollgate_testkit::*;

/// Settings for `config`, listening and serving admin on free loopback ports.
pub fn loopback_options(config: impl Into<std::path::PathBuf>) -> tollgate_server::Settings {
    let mut options = tollgate_server::Settings::new([config]);
    options.listen = Some("127.0.0.1:0".parse().unwrap());
    options.admin = Some("127.0.0.1:0".parse().unwrap());
    options
}

/// A gateway started by a test, with the directory holding its config file.
pub struct RunningGateway {
    pub gateway: tollgate_server::Gateway,
    _dir: tempfile::TempDir,
}

impl RunningGateway {
    /// The config file it watches.
    pub fn config_file(&self) -> std::path::PathBuf {
        self._dir.path().join("gateway.toml")
    }
}

/// Starts the gateway with `config` written to a temporary file, listening and serving
/// admin on free loopback ports; `configure` adjusts the options first.
pub async fn start_gateway(
    config: &str,
    configure: impl FnOnce(&mut tollgate_server::Settings),
) -> RunningGateway {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let mut options = loopback_options(file);
    configure(&mut options);
    RunningGateway {
        gateway: tollgate_server::Gateway::start(options).await.unwrap(),
        _dir: dir,
    }
}

/// The `tollgate` binary in a process of its own (as operators run it), listening on free
/// loopback ports; killed on drop. Its stderr is collected as it goes.
pub struct ServiceProcess {
    child: std::process::Child,
    /// The proxy's address.
    pub proxy: std::net::SocketAddr,
    /// The admin listener's address.
    pub admin: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl ServiceProcess {
    /// Starts `tollgate` with `args` (its configs) and `env`, and waits until it says where
    /// it listens.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> ServiceProcess {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut lines = std::io::BufReader::new(stderr).lines();
        let (mut proxy, mut admin) = (None, None);
        while admin.is_none() {
            let Some(Ok(line)) = lines.next() else {
                panic!("the service stopped:\n{}", log.lock().unwrap());
            };
            log.lock().unwrap().push_str(&format!("{line}\n"));
            let after = |marker: &str| {
                let rest = line.split(marker).nth(1)?;
                rest.split([' ', '/']).next()?.parse().ok()
            };
            proxy = proxy.or_else(|| after("proxying http://"));
            admin = admin.or_else(|| after("admin page http://"));
        }
        // Keep draining, so the child never blocks on a full pipe.
        let collected = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                collected.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        ServiceProcess {
            child,
            proxy: proxy.expect("the proxy's address was printed"),
            admin: admin.expect("the admin address was printed"),
            log,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What it has written to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET over a fresh connection, blocking: the status and the body.
pub fn blocking_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_owned());
    (status, body)
}

/// The address the service's log names after `marker`, once it has (within 10 s).
pub async fn logged_address(service: &ServiceProcess, marker: &str) -> std::net::SocketAddr {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = service.log();
        let found = log
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split([' ', '\n']).next())
            .and_then(|address| address.parse().ok());
        if let Some(address) = found {
            return address;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {marker:?} in:\n{log}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
