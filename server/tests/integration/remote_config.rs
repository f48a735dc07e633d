//! The service in its own process, configured from a shared repository: a start with the
//! repository down fails naming the URL, and credentials for a private repository come
//! from the environment and are never shown.

use std::process::Command;

use crate::support::repository::PrivateFleet;
use crate::support::{ServiceProcess, blocking_get};

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
    let (url, local) = (repository.url(), file.display().to_string());
    let service = ServiceProcess::start(
        &["--config", &url, "--config", &local],
        &[("TOLLGATE_TEST_CONFIG_AUTH", SECRET)],
    );
    let (_, config) = blocking_get(service.admin, "/config");
    let log = service.log();
    drop(service);
    assert!(config.contains("\"source\":\"http://"), "{config}");
    assert!(!config.contains("cannot fetch"), "{config}");
    assert!(!config.contains("s3cret"), "the secret is not on /config");
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
