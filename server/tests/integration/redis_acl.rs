//! The service as a process against a real `redis-server` whose only user is an ACL user:
//! the user and password come from the environment (`[store] username_env`,
//! `password_env`), or from the URL (still works, with a warning), and neither `/config`
//! nor the log ever shows the password. And Redis Sentinel with a password on the sentinel
//! and on the master (`sentinel_password_env`, `password_env`).

use tollgate_testkit::redis::{RedisOptions, RedisServer};
use tollgate_testkit::sentinel::{MASTER_NAME, SentinelSetup};

use crate::support::{ServiceProcess, blocking_get};

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
        let service = ServiceProcess::start(&["--config", config.to_str().unwrap()], &env);
        let statuses: Vec<u16> = (0..3)
            .map(|_| blocking_get(service.proxy, "/hello").0)
            .collect();
        let (_, admin_config) = blocking_get(service.admin, "/config");
        let log = service.log();
        drop(service);
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

#[test]
fn sentinels_asking_a_password_are_reached_with_the_one_the_environment_holds() {
    const SENTINEL_PASSWORD: &str = "s3cret-sentinel-password";
    let Some(setup) =
        SentinelSetup::start_with_password("sentinels_asking_a_password", SENTINEL_PASSWORD)
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    let env = [
        ("TOLLGATE_TEST_REDIS_PASSWORD", SENTINEL_PASSWORD),
        ("TOLLGATE_TEST_SENTINEL_PASSWORD", SENTINEL_PASSWORD),
    ];
    let write = |credentials: &str| {
        std::fs::write(
            &config,
            format!(
                "[store]\nbackend = \"redis-sentinel\"\nsentinels = [\"{}\"]\n\
                 master_name = \"{MASTER_NAME}\"\nkey_prefix = \"sentinel-auth:\"\n\
                 on_backend_error = \"deny\"\ntimeout = \"500ms\"\n{credentials}\
                 [limits]\n\"/\" = \"2/h\"\n",
                setup.sentinel_url()
            ),
        )
        .unwrap();
    };
    // Both passwords: one budget of 2, decided on the master the sentinel names.
    write(
        "password_env = \"TOLLGATE_TEST_REDIS_PASSWORD\"\n\
         sentinel_password_env = \"TOLLGATE_TEST_SENTINEL_PASSWORD\"\n",
    );
    let service = ServiceProcess::start(&["--config", config.to_str().unwrap()], &env);
    let ready = until_ready(&service, 10);
    let statuses: Vec<u16> = (0..3)
        .map(|_| blocking_get(service.proxy, "/hello").0)
        .collect();
    let log = service.log();
    drop(service);
    assert_eq!(ready, (200, true), "ready through the sentinel:\n{log}");
    assert_eq!(
        statuses,
        [200, 200, 429],
        "one budget of 2, in Redis:\n{log}"
    );
    assert_eq!(
        setup
            .master
            .command("EXISTS sentinel-auth:{/127.0.0.1}c")
            .as_deref(),
        Some(":1"),
        "the bucket is on the master"
    );
    assert!(!log.contains(SENTINEL_PASSWORD), "not in the log:\n{log}");

    // Without the sentinel's password the master cannot be found; without the master's,
    // it cannot be used: not ready either way (on_backend_error = "deny").
    for credentials in [
        "password_env = \"TOLLGATE_TEST_REDIS_PASSWORD\"\n",
        "sentinel_password_env = \"TOLLGATE_TEST_SENTINEL_PASSWORD\"\n",
    ] {
        write(credentials);
        let service = ServiceProcess::start(&["--config", config.to_str().unwrap()], &env);
        let ready = until_ready(&service, 3);
        let (_, body) = blocking_get(service.admin, "/readyz");
        assert_eq!(
            ready,
            (503, false),
            "{credentials}: {body}\n{}",
            service.log()
        );
        assert!(body.contains("not_ready"), "{credentials}: {body}");
    }
}

/// Polls `/readyz` for up to `seconds`: its last status, and whether it said `ready`.
fn until_ready(service: &ServiceProcess, seconds: u64) -> (u16, bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        let (status, body) = blocking_get(service.admin, "/readyz");
        let ready = body.contains("\"ready\"");
        if ready || std::time::Instant::now() > deadline {
            return (status, ready);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
