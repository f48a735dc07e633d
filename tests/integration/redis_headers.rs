//! Memory and Redis send the same headers, not only the same admit/deny: every response of
//! a sequence through the layer, compared header by header, for multi-quota rules.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tollgate::clock::FakeClock;
use tollgate::store::{BackendStore, MemoryStore};
use tollgate::{Limits, RateLimitLayer};

use crate::support::redis::RedisServer;
use crate::support::{Reply, get as send, serve};

/// The headers a client sees, in one comparable line per response.
fn seen(reply: &Reply) -> String {
    let header = |name| reply.header(name).unwrap_or("-");
    format!(
        "{} ratelimit={} policy={} retry-after={} x-limit={} x-remaining={} x-reset={}",
        reply.status.as_u16(),
        header("ratelimit"),
        header("ratelimit-policy"),
        header("retry-after"),
        header("x-ratelimit-limit"),
        header("x-ratelimit-remaining"),
        header("x-ratelimit-reset"),
    )
}

fn app<St>(limits: Limits<St>) -> Router
where
    St: tollgate::store::Store + Send + Sync + 'static,
    St::Future: Send,
{
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limits))
}

/// Requests `/` after each wait (milliseconds on the fake clock); every response seen.
async fn replay(address: std::net::SocketAddr, clock: &FakeClock, waits: &[u64]) -> Vec<String> {
    let mut lines = Vec::new();
    for &wait in waits {
        clock.advance(Duration::from_millis(wait));
        lines.push(seen(&send(address, "/", &[]).await));
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_send_the_same_headers_for_multi_quota_rules() {
    let Some(server) = RedisServer::start("memory_and_redis_send_the_same_headers") else {
        return;
    };
    let rules = [
        "rate = [\"3/2s\", \"10/min\"]",
        "rate = [\"3/2s\", \"10/min\"], strict = true",
        "rate = [\"4/s\", \"10/min\"], burst = [2, 10]",
        "rate = [\"3/s\", \"10/min\"], algorithm = \"sliding-window\"",
        "rate = [\"2/s\", \"5/min\"], algorithm = \"fixed-window\"",
    ];
    // Bursts, partial refills, waits that cross windows.
    let waits = [
        0, 0, 0, 0, 250, 400, 0, 700, 0, 0, 1_500, 333, 333, 334, 0, 2_000, 0,
    ];
    for (index, rule) in rules.iter().enumerate() {
        let limits_table =
            format!("[response]\nheaders = \"both\"\n[limits]\n\"/\" = {{ {rule} }}\n");

        let memory_clock = FakeClock::new();
        let memory = Limits::builder()
            .store(MemoryStore::new())
            .clock(memory_clock.clone())
            .from_toml(&limits_table)
            .unwrap();

        let redis_clock = FakeClock::new();
        let redis = Limits::builder()
            .store(BackendStore::new())
            .clock(redis_clock.clone())
            .from_toml(&format!(
                "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"headers{index}:\"\ntimeout = \"2s\"\n{limits_table}",
                server.url()
            ))
            .unwrap();
        let backend = redis.store().redis().unwrap().clone();
        backend.use_caller_time(true);

        let expected = replay(serve(app(memory)).await, &memory_clock, &waits).await;
        let actual = replay(serve(app(redis)).await, &redis_clock, &waits).await;
        assert!(
            !backend.breaker_open() && backend.local().is_empty(),
            "{rule}: every decision came from Redis"
        );
        assert!(
            expected.iter().any(|line| line.starts_with("429")),
            "{rule}: the sequence reaches a denial: {expected:#?}"
        );
        for (step, (want, got)) in expected.iter().zip(&actual).enumerate() {
            assert_eq!(want, got, "{rule}: response {step}");
        }
    }
}

/// The report this fix answers: on Redis, with the server's own clock, a new client's first
/// admitted request under `["3/2s", "10/min"]` said `r=1` where memory says `r=2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_clients_first_request_reports_the_tighter_quota_on_the_servers_clock() {
    let Some(server) = RedisServer::start("first_request_reports_the_tighter_quota") else {
        return;
    };
    let limits_table = "[limits]\n\"/\" = { rate = [\"3/2s\", \"10/min\"] }\n";
    let memory = Limits::from_toml(limits_table).unwrap();
    let redis = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{limits_table}",
            server.url()
        ))
        .unwrap();
    let from_memory = send(serve(app(memory)).await, "/", &[]).await;
    let from_redis = send(serve(app(redis)).await, "/", &[]).await;
    assert_eq!(from_memory.header("ratelimit"), Some("\"/\";r=2;t=1"));
    assert_eq!(
        from_redis.header("ratelimit"),
        from_memory.header("ratelimit")
    );
    assert_eq!(
        from_redis.header("ratelimit-policy"),
        from_memory.header("ratelimit-policy")
    );
}
