//! The service's log as a log pipeline reads it: plain text when stderr is not a terminal,
//! one JSON object a line with `--log-format json` (or `TOLLGATE_LOG_FORMAT`, or the file's
//! `[gateway] log_format`), `--log-level` beside `RUST_LOG`, and secrets in neither.

use std::time::{Duration, Instant};

use crate::support::ServiceProcess;

const SECRET: &str = "hunter2-admin-token";

/// A config file with a secret in it, and `extra` in its `[gateway]` table.
fn config(dir: &tempfile::TempDir, extra: &str) -> String {
    let file = dir.path().join("gateway.toml");
    std::fs::write(
        &file,
        format!(
            "[limits]\n\"/\" = \"10/s\"\n[store]\nurl = \"redis://app:{SECRET}@127.0.0.1:1/0\"\n\
             [gateway]\nadmin_token = \"{SECRET}\"\n{extra}"
        ),
    )
    .unwrap();
    file.display().to_string()
}

/// Waits until the service's log has a line `wanted` accepts (at most 10 s).
fn wait_for_line(service: &ServiceProcess, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = service.log().lines().find(|line| wanted(line)) {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "not logged:\n{}", service.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every line of `log` as a JSON object with the fields a pipeline indexes.
fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not one JSON object ({error}): {line}"));
            for field in ["timestamp", "level", "target", "message"] {
                assert!(event[field].is_string(), "{field} in {line}");
            }
            event
        })
        .collect()
}

#[test]
fn text_to_a_pipe_has_no_colour_escapes_and_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, "");
    let service = ServiceProcess::start(&["--config", &file], &[]);
    wait_for_line(&service, |line| line.contains("gateway started"));
    let log = service.log();
    assert!(
        !log.contains('\u{1b}'),
        "no ANSI escapes when stderr is not a terminal:\n{log:?}"
    );
    assert!(!log.contains(SECRET), "{log}");
}

#[test]
fn json_lines_from_the_flag_the_environment_or_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, "");
    for (args, env) in [
        (vec!["--log-format", "json"], vec![]),
        (vec![], vec![("TOLLGATE_LOG_FORMAT", "json")]),
    ] {
        let mut all = vec!["--config", file.as_str()];
        all.extend(args);
        let service = ServiceProcess::start(&all, &env);
        wait_for_line(&service, |line| line.contains("gateway started"));
        // A refused reload is logged as a warning, a JSON object too.
        std::fs::write(
            dir.path().join("gateway.toml"),
            "[limits]\n\"/\" = \"ten\"\n",
        )
        .unwrap();
        let refused = wait_for_line(&service, |line| line.contains("\"WARN\""));
        assert!(refused.contains("gateway.toml"), "{refused}");
        let log = service.log();
        let events = json_lines(&log);
        assert!(
            events.iter().any(|e| e["message"] == "gateway started"
                && e["target"] == "tollgate_server::startup"
                && e["listen"].is_string()),
            "fields beside the message: {log}"
        );
        assert!(!log.contains(SECRET), "{log}");
        drop(service);
        // The good config back for the next round.
        config(&dir, "");
    }

    // From the file: every line after the config is read is JSON.
    let file = config(&dir, "log_format = \"json\"\n");
    let service = ServiceProcess::start(&["--config", &file], &[]);
    let log = service.log();
    let after = log
        .lines()
        .skip_while(|line| !line.contains("proxying http://"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!after.is_empty(), "{log}");
    json_lines(&after);
}

#[test]
fn the_log_level_flag_and_environment_filter_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(&dir, "");
    // warn: the start is not logged (info), the addresses still are (scripts read them).
    let service = ServiceProcess::start(
        &["--config", &file, "--log-format", "json"],
        &[("TOLLGATE_LOG_LEVEL", "warn")],
    );
    let log = service.log();
    assert!(!log.contains("gateway started"), "{log}");
    assert!(log.contains("admin page http://"), "{log}");
    drop(service);

    // The flag wins over RUST_LOG.
    let service = ServiceProcess::start(
        &["--config", &file, "--log-level", "warn"],
        &[("RUST_LOG", "info")],
    );
    assert!(
        !service.log().contains("gateway started"),
        "{}",
        service.log()
    );
    drop(service);
    // RUST_LOG wins over TOLLGATE_LOG_LEVEL.
    let service = ServiceProcess::start(
        &["--config", &file],
        &[("RUST_LOG", "info"), ("TOLLGATE_LOG_LEVEL", "error")],
    );
    wait_for_line(&service, |line| line.contains("gateway started"));
    drop(service);

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--config", &file, "--log-level", "loud", "--check"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("log level \"loud\""), "{stderr}");
}
