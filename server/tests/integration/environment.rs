//! Settings from the environment, as an operator's container gives them: every flag reads
//! `TOLLGATE_<FLAG>`, a flag wins over its variable, which wins over `[gateway]`, which wins
//! over the default; `--print-config` says which gave each (secrets redacted); a bad value
//! or a misspelt variable is an error naming it, and nothing starts.

use std::process::Command;

const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");

fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = Command::new(TOLLGATE)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn flag_then_environment_then_file_then_default_and_print_config_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[gateway]\nlisten = \"127.0.0.1:7001\"\nadmin = \"127.0.0.1:7002\"\nupstream_timeout = \"5s\"\n\
         admin_token = \"from-the-file\"\n[limits]\n\"/\" = \"1/s\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (code, out, err) = run(
        &["--print-config", "--upstream-timeout", "9s"],
        &[
            ("TOLLGATE_CONFIG", config),
            ("TOLLGATE_ADMIN", "127.0.0.1:7003"),
            ("TOLLGATE_UPSTREAM_TIMEOUT", "7s"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    for line in [
        format!("config = [\"{config}\"]  # env TOLLGATE_CONFIG"),
        "listen = \"127.0.0.1:7001\"  # file".into(),
        "admin = \"127.0.0.1:7003\"  # env TOLLGATE_ADMIN".into(),
        "upstream_timeout = \"9s\"  # flag".into(),
        "shutdown_grace = \"10s\"  # default".into(),
        "admin_token = \"<redacted>\"  # file".into(),
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "missing {line:?} in:\n{out}"
        );
    }
    assert!(
        !out.contains("from-the-file"),
        "secrets are redacted:\n{out}"
    );
}

#[test]
fn a_bad_value_or_a_misspelt_variable_names_it_and_starts_nothing() {
    let (code, _, err) = run(&[], &[("TOLLGATE_LISTEN", "everywhere")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the environment variable TOLLGATE_LISTEN has a bad value \"everywhere\""),
        "{err}"
    );
    let (code, _, err) = run(&[], &[("TOLLGATE_UPSTREAM_TIMEUOT", "5s")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(
            "TOLLGATE_UPSTREAM_TIMEUOT is not a setting; did you mean TOLLGATE_UPSTREAM_TIMEOUT?"
        ),
        "{err}"
    );
    // Variables of other names are the operator's own (secrets named in the config).
    let (code, _, err) = run(
        &["--check", "--config", "../config/limits.toml"],
        &[("TOLLGATE_REDIS_PASSWORD", "x")],
    );
    assert_eq!(code, Some(0), "{err}");
}
