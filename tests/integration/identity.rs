//! Verified identities: API keys from digest tables — a known key is its owner's budget and
//! plan, an invented one is counted by address (or refused with 401), and the tables
//! reload live without a key ever held or shown in clear.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::key::ApiKeys;
use tollgate::{Limits, RateLimitLayer};

use crate::support::{get as fetch, serve};

const RULES: &str = "[client]\nsources = [\"api_key\", \"ip\"]\n\
    [identity.api_keys]\nmembers = [\"keys.toml\"]\n\
    [limits.api]\nrate = \"2/min\"\nplans.pro = \"5/min\"\n";

fn key_row(key: &str, id: &str, plan: Option<&str>) -> String {
    let plan = plan.map_or(String::new(), |plan| format!(", plan = \"{plan}\""));
    format!(
        "\"{}\" = {{ id = \"{id}\"{plan} }}\n",
        ApiKeys::digest_hex(key.as_bytes())
    )
}

fn setup(dir: &Path, rules: &str, keys: &str) -> Limits {
    std::fs::write(dir.join("keys.toml"), keys).unwrap();
    let main = dir.join("limits.toml");
    std::fs::write(&main, rules).unwrap();
    Limits::builder().watch([&main]).unwrap()
}

async fn app(limits: Limits) -> SocketAddr {
    serve(
        Router::new()
            .route("/api", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(limits)),
    )
    .await
}

async fn statuses(at: SocketAddr, key: Option<&str>, times: usize) -> Vec<u16> {
    let mut seen = Vec::new();
    for _ in 0..times {
        let headers: Vec<(&str, &str)> = key.map(|key| ("x-api-key", key)).into_iter().collect();
        seen.push(fetch(at, "/api", &headers).await.status.as_u16());
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_key_is_its_owners_budget_and_plan_and_invented_keys_share_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let limits = setup(
        dir.path(),
        RULES,
        &(key_row("tg-ada-1", "ada", None) + &key_row("tg-bob-1", "bob", Some("pro"))),
    );
    let at = app(limits.clone()).await;

    assert_eq!(statuses(at, Some("tg-ada-1"), 3).await, [200, 200, 429]);
    // The key's plan (pro: 5/min) comes from its row.
    assert_eq!(
        statuses(at, Some("tg-bob-1"), 6).await,
        [200, 200, 200, 200, 200, 429]
    );
    // Rotating invented keys buys nothing: each is as if absent, and the address decides.
    let mut invented = Vec::new();
    for n in 0..3 {
        invented.extend(statuses(at, Some(&format!("tg-forged-{n}")), 1).await);
    }
    assert_eq!(invented, [200, 200, 429]);
    assert_eq!(
        statuses(at, None, 1).await,
        [429],
        "the same address budget"
    );
    // Buckets are named by owner, never by key.
    assert_eq!(limits.peek("api/ada").await.unwrap().remaining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_invalid_reject_answers_401_and_charges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rules = format!("[identity]\non_invalid = \"reject\"\n{RULES}");
    let limits = setup(dir.path(), &rules, &key_row("tg-ada-1", "ada", None));
    let at = app(limits).await;

    for _ in 0..4 {
        let reply = fetch(at, "/api", &[("x-api-key", "tg-forged")]).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            reply.header("www-authenticate"),
            Some("Bearer error=\"invalid_token\"")
        );
        assert!(reply.body.contains("unknown key"), "{}", reply.body);
        assert!(!reply.body.contains("tg-forged"), "{}", reply.body);
    }
    // Nothing was charged to the address: its budget is whole.
    assert_eq!(statuses(at, None, 3).await, [200, 200, 429]);
    assert_eq!(statuses(at, Some("tg-ada-1"), 1).await, [200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_table_reloads_live_and_a_bad_save_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let limits = setup(dir.path(), RULES, &key_row("tg-ada-1", "ada", None));
    let keys = || limits.rules().client_settings().api_keys.clone().unwrap();
    assert!(keys().owner(b"tg-new").is_none());

    let table = key_row("tg-ada-1", "ada", None) + &key_row("tg-new", "carol", Some("pro"));
    std::fs::write(dir.path().join("keys.toml"), &table).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while keys().owner(b"tg-new").is_none() {
        assert!(Instant::now() < deadline, "the new key never applied");
        std::thread::sleep(Duration::from_millis(10));
    }

    // A key pasted in clear is refused, and not repeated in the error.
    std::fs::write(
        dir.path().join("keys.toml"),
        table.clone() + "\"tg-cleartext-secret\" = { id = \"dave\" }\n",
    )
    .unwrap();
    let error = limits.reload().unwrap_err().to_string();
    assert!(error.contains("64 hex digits"), "{error}");
    assert!(!error.contains("tg-cleartext-secret"), "{error}");
    assert_eq!(keys().len(), 2, "the last good table stays");
}

#[test]
fn api_key_as_a_source_needs_a_key_table() {
    let error = Limits::from_toml("[client]\nsources = [\"api_key\"]\n[limits]\napi = \"1/s\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("[identity.api_keys]"), "{error}");
    let error = Limits::from_toml("[identity]\non_invalid = \"ignore\"\n[limits]\napi = \"1/s\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("on_invalid must be"), "{error}");
}
