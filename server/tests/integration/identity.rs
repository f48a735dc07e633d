//! Verified identities through the service: an HS256 secret from the environment, an API
//! key table, `/explain` naming who a credential makes — and no secret, token or key in
//! any output an operator or an attacker can read.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};
use tollgate::key::ApiKeys;

use crate::support::{ServiceProcess, get};

const SECRET: &str = "s3cret-of-the-gateway-0123456789-abcdef";
const API_KEY: &str = "tg_live_key_for_team_a_5f1c";

fn token(sub: &str, exp_in: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    jsonwebtoken::encode(
        &Header::default(),
        &json!({ "sub": sub, "org": "acme", "exp": now + exp_in }),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn config(dir: &std::path::Path) -> String {
    std::fs::write(
        dir.join("keys.toml"),
        format!(
            "\"{}\" = {{ id = \"team-a\" }}\n",
            ApiKeys::digest_hex(API_KEY.as_bytes())
        ),
    )
    .unwrap();
    let main = dir.join("gateway.toml");
    std::fs::write(
        &main,
        "[client]\nsources = [\"jwt:sub\", \"api_key\", \"ip\"]\n\
         [identity.jwt]\nsecret_env = \"TG_TEST_JWT_SECRET\"\n\
         [identity.api_keys]\nmembers = [\"keys.toml\"]\n\
         [limits.api]\nrate = \"2/min\"\n",
    )
    .unwrap();
    main.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_keys_pick_budgets_explain_names_them_and_no_secret_is_ever_shown() {
    let dir = tempfile::tempdir().unwrap();
    let main = config(dir.path());
    let env = [("TG_TEST_JWT_SECRET", SECRET)];
    let service = ServiceProcess::start(&["--config", &main], &env);
    let ada = token("ada", 600);
    let bearer = format!("Bearer {ada}");
    let statuses = async |headers: &[(&str, &str)], times: usize| {
        let mut seen = Vec::new();
        for _ in 0..times {
            seen.push(get(service.proxy, "/api", headers).await.status.as_u16());
        }
        seen
    };
    assert_eq!(
        statuses(&[("authorization", &bearer)], 3).await,
        [200, 200, 429]
    );
    assert_eq!(
        statuses(&[("x-api-key", API_KEY)], 3).await,
        [200, 200, 429]
    );
    // A token signed with another secret, and an invented key: both the address's budget.
    let forged = jsonwebtoken::encode(
        &Header::default(),
        &json!({ "sub": "ada", "exp": 4_000_000_000u64 }),
        &EncodingKey::from_secret(b"not the gateway's secret, but long enough"),
    )
    .unwrap();
    let forged = format!("Bearer {forged}");
    assert_eq!(statuses(&[("authorization", &forged)], 1).await, [200]);
    assert_eq!(
        statuses(&[("x-api-key", "tg_invented")], 2).await,
        [200, 429]
    );

    // /explain names who a credential makes, and the claims used: never the credential.
    let explained = |query: String| {
        let admin = service.admin;
        async move {
            let reply = get(admin, &format!("/explain?{query}"), &[]).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            (
                serde_json::from_str::<Value>(&reply.body).unwrap(),
                reply.body,
            )
        }
    };
    let (why, body) = explained(format!("path=/api&header.authorization=Bearer%20{ada}")).await;
    assert_eq!(why["identity"]["client"], "ada", "{body}");
    assert_eq!(
        why["identity"]["claims"],
        json!([{ "claim": "sub", "value": "ada" }])
    );
    assert_eq!(why["key"], "api/ada");
    let expired = token("ada", -3600);
    let (why, _) = explained(format!(
        "path=/api&client=192.0.2.1&header.authorization=Bearer%20{expired}"
    ))
    .await;
    assert_eq!(why["identity"]["invalid"], "expired");
    let (why, body) = explained(format!("path=/api&header.x-api-key={API_KEY}")).await;
    assert_eq!(why["identity"]["client"], "team-a", "{body}");

    // Every output: the log, /config, /metrics, the page, explain, --print-config.
    let mut outputs = vec![service.log()];
    for path in ["/config", "/metrics", "/", "/explain?path=/api&client=x"] {
        outputs.push(get(service.admin, path, &[]).await.body);
    }
    let printed = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--config", &main, "--print-config"])
        .env("TG_TEST_JWT_SECRET", SECRET)
        .output()
        .unwrap();
    outputs.push(String::from_utf8_lossy(&printed.stdout).into_owned());
    outputs.push(String::from_utf8_lossy(&printed.stderr).into_owned());
    outputs.push(body);
    for output in &outputs {
        for secret in [
            SECRET,
            API_KEY,
            ada.as_str(),
            forged.as_str(),
            "tg_invented",
        ] {
            assert!(!output.contains(secret), "{secret} shown in:\n{output}");
        }
    }
    let metrics = &outputs[2];
    assert!(
        metrics.lines().any(|line| line.starts_with(
            "tollgate_invalid_credentials_total{reason=\"signature\",action=\"anonymous\"}"
        ) && !line.ends_with(" 0")),
        "{metrics}"
    );
}

#[test]
fn a_secret_not_in_the_environment_is_refused_at_start_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let main = config(dir.path());
    let checked = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--config", &main, "--check"])
        .env_remove("TG_TEST_JWT_SECRET")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stderr).into_owned()
        + &String::from_utf8_lossy(&checked.stdout);
    assert!(!checked.status.success(), "{said}");
    assert!(said.contains("TG_TEST_JWT_SECRET is not set"), "{said}");
}

#[test]
fn api_key_prints_a_line_the_gateway_reads() {
    let made = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["api-key", "team-b", "--plan", "pro"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let line = String::from_utf8_lossy(&made.stdout).into_owned();
    let said = String::from_utf8_lossy(&made.stderr).into_owned();
    let key = said.rsplit(' ').next().unwrap().trim();
    assert!(key.starts_with("tg_"), "{said}");
    assert!(!line.contains(key));
    let table: toml::Table = toml::from_str(&line).unwrap();
    let (digest, row) = table.iter().next().unwrap();
    assert_eq!(digest, &ApiKeys::digest_hex(key.as_bytes()));
    assert_eq!(row["id"].as_str(), Some("team-b"));
    assert_eq!(row["plan"].as_str(), Some("pro"));
}
