//! `backend = "redis-sentinel"` against real Redis Sentinel — a master, its replica and a
//! sentinel, each a Debian `redis-server` — with the master killed under traffic: no
//! request fails, and decisions are shared again within 8 s of the promotion.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::store::BackendStore;
use tollgate::{Limits, RateLimitLayer};

use crate::support::certs::Pki;
use crate::support::sentinel::{MASTER_NAME, SentinelSetup, SentinelTls};
use crate::support::{get as send, serve};

fn instance(sentinel: &str, tls: &str) -> Limits<BackendStore> {
    Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"redis-sentinel\"\nsentinels = [\"{sentinel}\"]\nmaster_name = \"{MASTER_NAME}\"\n\
             key_prefix = \"sentinel:\"\ntimeout = \"500ms\"\n{tls}[client]\nsources = [\"header:x-client\"]\n\
             [limits]\n\"/\" = \"1000/h\"\n"
        ))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_gives_no_5xx_and_shared_decisions_resume_within_8s_of_the_promotion() {
    let Some(setup) = SentinelSetup::start("a_failover_gives_no_5xx") else {
        return;
    };
    let url = setup.sentinel_url();
    failover_under_traffic(setup, &url, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_sentinels_and_the_masters_are_reached_with_rediss_and_a_failover_is_followed()
{
    let pki = Pki::new("sentinel");
    // For the addresses the sentinel and the servers are reached at, and for a DNS name.
    let tls = SentinelTls {
        pki: &pki,
        server: pki.node_for("redis", &["localhost", "127.0.0.1", "redis.internal"]),
    };
    let Some(setup) = SentinelSetup::start_tls("over_tls_the_sentinels", &tls) else {
        return;
    };
    let url = setup.sentinel_tls_url().unwrap();
    let ca = format!("[store.tls]\nca_file = \"{}\"\n", pki.ca.display());
    let decides_in_redis = |table: &str, client: &str| {
        let limits = instance(&url, table);
        let client = client.to_owned();
        async move {
            let decided = limits.check(&client, 1).await.unwrap();
            decided.allowed() && limits.store().redis().unwrap().ping().await.is_ok()
        }
    };
    assert!(
        decides_in_redis(&ca, "by-address").await,
        "verified by address"
    );
    // `server_name`: the sentinel and the master it names are verified against the name,
    // not the address they are reached at (the sentinel names the master by address).
    let by_address = url.replace("localhost", "127.0.0.1");
    let wrong = instance(
        &by_address,
        &format!("{ca}server_name = \"other.internal\"\n"),
    );
    assert!(
        wrong.store().redis().unwrap().ping().await.is_err(),
        "a certificate not for server_name is refused"
    );
    let named = format!("{ca}server_name = \"redis.internal\"\n");
    failover_under_traffic(setup, &by_address, &named).await;
}

/// Two instances on `sentinel` (with `tls` as their `[store.tls]`): shared decisions, then
/// the master killed under traffic: every request answered, and decisions shared again
/// within 8 s of the promotion.
async fn failover_under_traffic(mut setup: SentinelSetup, sentinel: &str, tls: &str) {
    let (a, b) = (instance(sentinel, tls), instance(sentinel, tls));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(a.clone()));
    let address = serve(app).await;

    // Connected first (the sentinel asked, TLS set up), so the first decision is not cut
    // by the timeout on a busy machine; then shared through the master the sentinel names.
    for limits in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while limits.store().redis().unwrap().ping().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the master answers through the sentinel"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let first = send(address, "/", &[("x-client", "steady")]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(b.peek("steady").await.unwrap().remaining(), 999);
    let old_master = setup.master_port().unwrap();

    setup.kill_master();
    let killed = Instant::now();
    let mut statuses = Vec::new();
    let (mut promoted, mut resumed) = (None, None);
    let deadline = killed + Duration::from_secs(40);
    for probe in 0.. {
        if Instant::now() > deadline {
            break;
        }
        let reply = send(address, "/", &[("x-client", "steady")]).await;
        statuses.push(reply.status);
        // A fresh client: taken through A, seen through B?
        let client = format!("probe-{probe}");
        let taken = send(address, "/", &[("x-client", &client)]).await;
        statuses.push(taken.status);
        if promoted.is_none() && setup.master_port().is_some_and(|port| port != old_master) {
            promoted = Some(killed.elapsed());
        }
        if promoted.is_some() && b.peek(&client).await.unwrap().remaining() == 999 {
            resumed = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "every request answered (on_backend_error = \"local\" meanwhile), none failed: {statuses:?}"
    );
    let promoted = promoted.expect("the sentinel promoted the replica within 40 s");
    let resumed = resumed.expect("shared decisions resumed after the promotion");
    eprintln!(
        "sentinel failover: promoted {promoted:?} after the kill, decisions shared again {:?} \
         after the promotion ({} requests meanwhile)",
        resumed - promoted,
        statuses.len()
    );
    assert!(
        resumed - promoted <= Duration::from_secs(8),
        "shared decisions resumed {:?} after the promotion",
        resumed - promoted
    );
    assert_eq!(setup.master_port(), Some(setup.replica_port()));
}
