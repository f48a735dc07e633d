//! Plans: a rule's limits per plan, chosen by the app, a trusted authenticator's header,
//! live-reloaded membership files or the default; a client moving between plans keeps what
//! it spent.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::clock::FakeClock;
use tollgate::{Limits, RateLimitLayer};

use crate::support::{get as fetch, now_or_never, serve};

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn remaining(limits: &Limits, key: &str) -> u64 {
    now_or_never(limits.check(key, 1)).unwrap().remaining()
}

const RULES: &str = "[plans]\nmembers = [\"plans.toml\"]\ndefault = \"free\"\n\
    [limits.api]\nrate = \"100/min\"\n\
    [limits.api.plans]\nfree = \"10/min\"\npro = \"1000/min\"\nenterprise = { unlimited = true }\n";

struct Setup {
    _dir: tempfile::TempDir,
    members: PathBuf,
    limits: Limits,
}

fn watched(members: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("limits.toml");
    std::fs::write(&rules, RULES).unwrap();
    let file = dir.path().join("plans.toml");
    std::fs::write(&file, members).unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .watch([&rules])
        .unwrap();
    Setup {
        _dir: dir,
        members: file,
        limits,
    }
}

#[test]
fn membership_picks_each_clients_plan_and_others_get_the_default() {
    let setup =
        watched("\"user-42\" = \"pro\"\n\"acme\" = \"enterprise\"\n\"198.51.100.7\" = \"pro\"\n");
    let limits = &setup.limits;
    assert_eq!(remaining(limits, "api/user-42"), 999);
    assert_eq!(remaining(limits, "api/198.51.100.7"), 999);
    assert_eq!(remaining(limits, "api/nobody"), 9, "the default plan, free");
    for _ in 0..2_000 {
        assert!(now_or_never(limits.check("api/acme", 1)).unwrap().allowed());
    }
}

#[test]
fn an_edited_membership_file_moves_a_client_within_a_second_keeping_what_it_spent() {
    let setup = watched("\"user-42\" = \"pro\"\n");
    let limits = &setup.limits;
    for _ in 0..4 {
        remaining(limits, "api/user-42");
    }
    assert_eq!(remaining(limits, "api/user-42"), 995);
    std::fs::write(&setup.members, "\"user-42\" = \"free\"\n").unwrap();
    wait_until("user-42 is on free", || {
        limits.rules().plans().member_plan("user-42") == Some("free")
    });
    // Five spent under pro stay spent under free's ten.
    assert_eq!(remaining(limits, "api/user-42"), 4);
    // And back: what was spent is spent, the rest of pro's budget is there.
    std::fs::write(&setup.members, "\"user-42\" = \"pro\"\n").unwrap();
    wait_until("user-42 is on pro again", || {
        limits.rules().plans().member_plan("user-42") == Some("pro")
    });
    assert_eq!(remaining(limits, "api/user-42"), 993);
}

#[test]
fn moving_to_a_smaller_plan_caps_what_was_spent_at_its_burst() {
    let setup = watched("\"user-42\" = \"pro\"\n");
    let limits = &setup.limits;
    for _ in 0..500 {
        remaining(limits, "api/user-42");
    }
    std::fs::write(&setup.members, "\"user-42\" = \"free\"\n").unwrap();
    wait_until("user-42 is on free", || {
        limits.rules().plans().member_plan("user-42") == Some("free")
    });
    let decision = now_or_never(limits.check("api/user-42", 1)).unwrap();
    assert!(!decision.allowed(), "500 spent is more than free's 10");
    // Empty, not 490 tokens in debt: one free interval (6 s) brings the next token.
    assert!(
        decision.retry_after() <= Duration::from_secs(6),
        "{:?}",
        decision.retry_after()
    );
}

#[test]
fn a_broken_membership_file_is_refused_where_it_is_wrong_and_the_last_good_one_serves() {
    let setup = watched("\"user-42\" = \"pro\"\n");
    let limits = &setup.limits;
    std::fs::write(
        &setup.members,
        "\"user-42\" = \"free\"\n\"user-7\" = \"pro plus\"\n",
    )
    .unwrap();
    wait_until("the reload is refused", || {
        limits.status().last_error.is_some()
    });
    let error = limits.status().last_error.unwrap();
    assert!(error.contains("plans.toml:2:12"), "{error}");
    assert!(error.contains("plan name \"pro plus\""), "{error}");
    assert_eq!(limits.rules().plans().member_plan("user-42"), Some("pro"));
    std::fs::write(&setup.members, "not toml at all\n").unwrap();
    wait_until("the second refusal", || {
        limits
            .status()
            .last_error
            .is_some_and(|e| e.contains("plans.toml:1"))
    });
    std::fs::remove_file(&setup.members).unwrap();
    wait_until("the third refusal", || {
        limits
            .status()
            .last_error
            .is_some_and(|e| e.contains("plans.toml") && !e.contains("plans.toml:1"))
    });
    assert_eq!(limits.rules().plans().member_plan("user-42"), Some("pro"));
    assert_eq!(remaining(limits, "api/user-42"), 999);
}

#[test]
fn naming_another_membership_file_reads_and_watches_it() {
    let setup = watched("\"user-42\" = \"pro\"\n");
    let dir = setup.members.parent().unwrap().to_path_buf();
    let other = dir.join("more").join("teams.toml");
    std::fs::create_dir(dir.join("more")).unwrap();
    std::fs::write(&other, "\"team-1\" = \"enterprise\"\n").unwrap();
    std::fs::write(
        dir.join("limits.toml"),
        RULES.replace("[\"plans.toml\"]", "[\"plans.toml\", \"more/teams.toml\"]"),
    )
    .unwrap();
    let limits = &setup.limits;
    wait_until("team-1 is known", || {
        limits.rules().plans().member_plan("team-1") == Some("enterprise")
    });
    assert_eq!(limits.rules().plans().members(), 2);
    std::fs::write(&other, "\"team-1\" = \"pro\"\n").unwrap();
    wait_until("an edit of the new file applies", || {
        limits.rules().plans().member_plan("team-1") == Some("pro")
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_header_is_believed_from_trusted_proxies_only() {
    let app = |trusted: &str| {
        let limits = Limits::from_toml(&format!(
            "[client]\nsources = [\"header:x-user\"]\ntrusted_proxies = [{trusted}]\n\
             [plans]\nheader = \"x-plan\"\n\
             [limits.api]\nrate = \"1/min\"\nplans.pro = \"100/min\"\n"
        ))
        .unwrap();
        Router::new()
            .route("/api", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(limits))
    };
    let headers = [("x-user", "ada"), ("x-plan", "pro")];
    let behind_proxy = serve(app("\"127.0.0.1\"")).await;
    for _ in 0..5 {
        let reply = fetch(behind_proxy, "/api", &headers).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let reply = fetch(behind_proxy, "/api", &headers).await;
    assert!(
        reply.header("ratelimit-policy").unwrap().contains("q=100"),
        "{:?}",
        reply.header("ratelimit-policy")
    );
    // Straight from a client, the same header is a claim anyone could make.
    let direct = serve(app("\"192.0.2.1\"")).await;
    assert_eq!(fetch(direct, "/api", &headers).await.status, StatusCode::OK);
    assert_eq!(
        fetch(direct, "/api", &headers).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[test]
fn a_plan_entry_that_sets_what_belongs_to_its_rule_is_refused_where_written() {
    let error = Limits::from_toml(
        "[limits.api]\nrate = \"10/min\"\n[limits.api.plans]\npro = { rate = \"1000/min\", algorithm = \"fixed-window\" }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("<inline>:4:7"), "{error}");
    assert!(error.contains("sets algorithm"), "{error}");
    let error = Limits::from_toml("[limits.api]\nrate = \"10/min\"\nplans.pro = \"lots\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("<inline>:3"), "{error}");
    let error = Limits::from_toml("[plans]\ndefault = \"not a plan\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("<inline>:2:11"), "{error}");
    let error = Limits::from_toml("[plans]\nmembers = [\"plans.toml\"]\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("not read"), "{error}");
}
