//! The service as a process against a real `redis-server` whose only user is an ACL user:
//! the user and password come from the environment (`[store] username_env`,
//! `password_env`), or from the URL (still works, with a warning), and neither `/config`
//! nor the log ever shows the password.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_testkit::redis::{RedisOptions, RedisServer};

const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");
const PASSWORD: &str = "s3cret-acl-password";

/// A server whose default user is off: only `alice` with [`PASSWORD`] gets in.
fn acl_server(test: &str) -> Option<RedisServer> {
    RedisServer::start_with(
        test,
        RedisOptions {
            args: [
                "--user",
                "alice",
                "on",
                &format!(">{PASSWORD}"),
                "~*",
                "&*",
                "+@all",
                "--user",
                "default",
                "off",
            ]
            .map(str::to_owned)
            .to_vec(),
            auth: Some(("alice".into(), PASSWORD.into())),
            ..RedisOptions::default()
        },
    )
}

/// Starts the service on `config`, with `env`; its admin address and its log so far (and
/// from then on).
fn start(
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, String, Arc<Mutex<String>>) {
    let mut child = Command::new(TOLLGATE)
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let mut lines = std::io::BufReader::new(stderr).lines();
    let (mut proxy, mut admin) = (None, None);
    while admin.is_none() {
        let Some(Ok(line)) = lines.next() else {
            panic!("the service stopped: {}", log.lock().unwrap());
        };
        log.lock().unwrap().push_str(&line);
        log.lock().unwrap().push('\n');
        if let Some(rest) = line.split("proxying http://").nth(1) {
            proxy = rest.split_whitespace().next().map(str::to_owned);
        }
        if let Some(rest) = line.split("admin page http://").nth(1) {
            admin = Some(rest.trim_end_matches('/').to_owned());
        }
    }
    let collected = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut log = collected.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let _ = admin;
    (child, proxy.unwrap(), log)
}

fn http(address: &str, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn an_acl_user_from_the_environment_shares_the_budget_and_its_password_is_shown_nowhere() {
    let Some(server) = acl_server("an_acl_user_from_the_environment") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    let port = server.port();
    for (name, url, env) in [
        (
            "environment",
            format!("redis://127.0.0.1:{port}"),
            vec![
                ("TOLLGATE_TEST_REDIS_USER", "alice"),
                ("TOLLGATE_TEST_REDIS_PASSWORD", PASSWORD),
            ],
        ),
        (
            "url",
            format!("redis://alice:{PASSWORD}@127.0.0.1:{port}"),
            vec![],
        ),
    ] {
        let credentials = if env.is_empty() {
            String::new()
        } else {
            "username_env = \"TOLLGATE_TEST_REDIS_USER\"\npassword_env = \"TOLLGATE_TEST_REDIS_PASSWORD\"\n".into()
        };
        std::fs::write(
            &config,
            format!(
                "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{name}:\"\n\
                 on_backend_error = \"deny\"\ntimeout = \"500ms\"\n{credentials}\
                 [limits]\n\"/\" = \"2/h\"\n"
            ),
        )
        .unwrap();
        let (mut child, proxy, log) = start(&config, &env);
        let statuses: Vec<u16> = (0..3).map(|_| http(&proxy, "/hello").0).collect();
        let admin_config = {
            let text = log.lock().unwrap().clone();
            let admin = text
                .split("admin page http://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .unwrap()
                .to_owned();
            http(&admin, "/config").1
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            statuses,
            [200, 200, 429],
            "{name}: one budget of 2, decided in Redis"
        );
        assert_eq!(
            server
                .command(&format!("EXISTS {name}:{{/127.0.0.1}}c"))
                .as_deref(),
            Some(":1"),
            "{name}: the bucket is in Redis, written as alice"
        );
        let log = log.lock().unwrap().clone();
        assert!(!log.contains(PASSWORD), "{name}: not in the log:\n{log}");
        assert!(!admin_config.contains(PASSWORD), "{name}: not on /config");
        if name == "url" {
            assert!(
                log.contains("a Redis password is written in [store] url"),
                "a warning says where it belongs:\n{log}"
            );
        }
    }
}
