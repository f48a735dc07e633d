//! The service in its own process, configured from a shared repository: a start with the
//! repository down fails naming the URL, and credentials for a private repository come
//! from the environment and are never shown.

use std::process::Command;
use std::time::Duration;

use crate::support::repository::PrivateFleet;

/// The `tollgate` binary cargo built for these tests.
const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");

#[test]
fn a_start_with_the_repository_down_and_no_copy_fails_naming_the_url() {
    let url = format!("http://{}/fleet/limits.toml", closed_port());
    // It exits non-zero, naming the URL, with --check and without.
    for check in [true, false] {
        let mut command = Command::new(TOLLGATE);
        command.args([
            "--config",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ]);
        if check {
            command.arg("--check");
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("cannot fetch config {url}")),
            "{stderr}"
        );
    }
}

#[test]
fn credentials_come_from_the_environment_reach_one_host_and_are_never_shown() {
    const SECRET: &str = "Bearer s3cret-t0ken-value";
    let fleet = PrivateFleet::start(
        "[limits]\n\"/\" = \"10/s\"\napi = \"100/min\"\n",
        SECRET,
        "TOLLGATE_TEST_CONFIG_AUTH",
    );
    let (repository, file, cache) = (&fleet.repository, &fleet.local, &fleet.cache);
    // In a real service process: fetched, and the secret is nowhere to be seen.
    let mut child = Command::new(TOLLGATE)
        .args([
            "--config",
            &repository.url(),
            "--config",
            &file.display().to_string(),
        ])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .env("TOLLGATE_TEST_CONFIG_AUTH", SECRET)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (admin, log) = admin_address(&mut child);
    let config = http_get(admin, "/config");
    let _ = child.kill();
    let _ = child.wait();
    assert!(config.contains("\"source\":\"http://"), "{config}");
    assert!(!config.contains("cannot fetch"), "{config}");
    assert!(!config.contains("s3cret"), "the secret is not on /config");
    let log = log.lock().unwrap().clone();
    assert!(log.contains("gateway started"), "{log}");
    assert!(!log.contains("s3cret"), "nor in the log");
    for copy in std::fs::read_dir(cache).unwrap() {
        let text = std::fs::read_to_string(copy.unwrap().path()).unwrap();
        assert!(!text.contains("s3cret"), "nor in the cache");
    }
    assert_eq!(repository.served().credentials_seen, [SECRET]);
}

/// A loopback port nothing listens on.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Reads the child gateway's stderr until it says where its admin listener is; everything
/// it writes there, before and after, is collected in the returned log.
fn admin_address(
    child: &mut std::process::Child,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut lines = std::io::BufReader::new(stderr).lines();
    let address = loop {
        let line = lines.next().expect("the gateway started").unwrap();
        log.lock().unwrap().push_str(&line);
        if let Some(rest) = line.split("admin page http://").nth(1) {
            break rest.trim_end_matches('/').parse().unwrap();
        }
    };
    // Keep draining, so the child never blocks on a full pipe.
    let collected = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            collected.lock().unwrap().push_str(&line);
        }
    });
    (address, log)
}

/// A plain HTTP/1.1 GET over a fresh connection; the body.
fn http_get(address: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map_or(response.clone(), |(_, body)| body.to_owned())
}
