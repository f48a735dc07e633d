//! Candidate limits and suggested limits against known truth: synthetic traffic from 2,000
//! clients whose per-minute rates follow Zipf's law, driven through the fake clock. Each
//! candidate must refuse exactly what an enforcing rule with its limit refuses on the same
//! traffic, and the limit suggested for refusing 1 % of clients must be within 5 % of the
//! true 99th percentile of their peaks.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::clock::{Clock, FakeClock};
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};
use tower::ServiceExt as _;

use crate::support::now_or_never;

const CLIENTS: usize = 2_000;
const MINUTES: usize = 3;

/// Client `i`'s requests in minute `m`: Zipf's law (rank `i + 1`, exponent 1, the heaviest
/// 600 a minute) with a small deterministic wobble from minute to minute, so that a
/// client's peak is one of its minutes, not all of them.
fn requests(i: usize, m: usize) -> usize {
    let zipf = 600.0 / (i + 1) as f64;
    let wobble = 1.0 + 0.1 * (((i * 7 + m * 3) % 5) as f64 - 2.0) / 2.0;
    ((zipf * wobble).round() as usize).max(1)
}

/// One minute's requests, interleaved as real traffic is: each client's spread over the
/// minute, in an order that mixes clients.
fn minute(m: usize) -> Vec<usize> {
    let mut stamped: Vec<(u64, usize)> = Vec::new();
    for i in 0..CLIENTS {
        let n = requests(i, m);
        for k in 0..n {
            // Evenly spread, with a per-client offset.
            let at =
                ((k as u64 * 60_000_000) / n as u64 + (i as u64 * 7_919) % 60_000) % 60_000_000;
            stamped.push((at, i));
        }
    }
    stamped.sort_unstable();
    stamped.into_iter().map(|(_, i)| i).collect()
}

/// Drives `limits` (on `clock`) with every minute's traffic; calls `seen` with each
/// request's client and decision.
fn drive(limits: &[&Limits], clock: &FakeClock, mut seen: impl FnMut(usize, usize, bool)) {
    for m in 0..MINUTES {
        let order = minute(m);
        let step = Duration::from_nanos(60_000_000_000 / order.len() as u64);
        for client in order {
            for (which, limits) in limits.iter().enumerate() {
                let decision =
                    now_or_never(limits.check(&format!("api/client-{client}"), 1)).unwrap();
                seen(which, client, decision.allowed());
            }
            clock.advance(step);
        }
        // On to the next minute's boundary (the steps were rounded down).
        let into = clock.now().as_unix_nanos() % 60_000_000_000;
        if into != 0 {
            clock.advance(Duration::from_nanos(60_000_000_000 - into));
        }
    }
}

#[test]
fn candidates_refuse_what_enforcing_rules_refuse_and_the_suggestion_finds_the_p99() {
    let clock = FakeClock::new();
    // Start on a minute boundary, so that the traffic's minutes are the tracker's windows.
    let since_minute = clock.now().as_unix_nanos() % 60_000_000_000;
    clock.advance(Duration::from_nanos(60_000_000_000 - since_minute));
    let limiter = |rule: &str| {
        Limits::builder()
            .clock(clock.clone())
            .from_toml(&format!(
                "[store]\nmax_buckets = 1000000\n[limits]\napi = {rule}\n"
            ))
            .unwrap()
    };
    let tuned =
        limiter("{ rate = \"100000/min\", candidates = [\"50/min\", [\"150/min\", \"10/s\"]] }");
    let fifty = limiter("\"50/min\"");
    let both = limiter("{ rate = [\"150/min\", \"10/s\"] }");
    let mut refused = [0u64; 3];
    let mut refused_by_fifty = std::collections::HashSet::new();
    drive(
        &[&tuned, &fifty, &both],
        &clock,
        |which, client, allowed| {
            if !allowed {
                refused[which] += 1;
                if which == 1 {
                    refused_by_fifty.insert(client);
                }
            }
        },
    );
    assert_eq!(refused[0], 0, "the enforced limit is far above everyone");
    assert!(refused[1] > 1_000 && refused[2] > 1_000, "{refused:?}");

    let reports = tuned.candidates(5);
    let would_refuse = |label: &str| {
        let report = reports.iter().find(|r| r.candidate == label).unwrap();
        let quarter = &report.windows[0];
        assert_eq!(quarter.window, "15m");
        assert_eq!(
            quarter.requests,
            (0..CLIENTS)
                .flat_map(|i| (0..MINUTES).map(move |m| requests(i, m) as u64))
                .sum::<u64>()
        );
        assert_eq!(
            quarter.top[0].client, "client-0",
            "the heaviest client tops"
        );
        (quarter.would_refuse, quarter.clients)
    };
    let (fifty_refused, fifty_clients) = would_refuse("50/min");
    assert_eq!(
        fifty_refused, refused[1],
        "50/min alongside = 50/min enforced"
    );
    let (both_refused, _) = would_refuse("150/min, 10/s");
    assert_eq!(both_refused, refused[2], "two quotas alongside = enforced");
    let truth = refused_by_fifty.len() as f64;
    assert!(
        (fifty_clients as f64 - truth).abs() <= truth * 0.1 + 1.0,
        "{fifty_clients} distinct refused, truly {truth}"
    );

    // The true 99th percentile of peaks: the limit refusing at most 1 % of clients.
    let mut peaks: Vec<usize> = (0..CLIENTS)
        .map(|i| (0..MINUTES).map(|m| requests(i, m)).max().unwrap())
        .collect();
    peaks.sort_unstable_by(|a, b| b.cmp(a));
    let p99 = peaks[CLIENTS / 100] as f64;
    let suggestion = tuned.suggest("api", 1.0).unwrap();
    let limit = suggestion.peaks.requests.limit as f64;
    assert!(
        (limit - p99).abs() <= p99 * 0.05,
        "suggested {limit}, true p99 {p99}"
    );
    assert_eq!(suggestion.peaks.clients, CLIENTS as u64);
    assert_eq!(suggestion.peaks.requests.max, peaks[0] as u64);
    assert_eq!(suggestion.suggested_rate, format!("{limit}/min"));
    let named: Vec<&str> = suggestion
        .peaks
        .requests
        .refused
        .iter()
        .map(|c| c.client.as_str())
        .collect();
    assert_eq!(named.first(), Some(&"client-0"), "{named:?}");
    assert!(
        named.len() >= CLIENTS / 100 - 2 && named.len() <= CLIENTS / 100 + 2,
        "about 1 % of clients named: {named:?}"
    );
    assert!(suggestion.peaks.cost.is_none(), "every request cost 1");
}

#[test]
fn a_reload_keeps_a_candidate_s_buckets_and_history_and_a_new_candidate_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    std::fs::write(
        &file,
        "[limits.api]\nrate = \"100/min\"\ncandidates = [\"2/min\"]\n",
    )
    .unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .load([&file])
        .unwrap();
    let check = || now_or_never(limits.check("api/me", 1)).unwrap();
    for _ in 0..2 {
        check();
    }
    std::fs::write(
        &file,
        "[limits.api]\nrate = \"200/min\"\ncandidates = [\"2/min\", \"3/min\"]\n",
    )
    .unwrap();
    limits.reload().unwrap();
    assert!(check().allowed(), "never enforced");
    let reports = limits.candidates(5);
    let of = |label: &str| {
        reports
            .iter()
            .find(|r| r.candidate == label)
            .unwrap()
            .windows[0]
            .clone()
    };
    let two = of("2/min");
    assert_eq!(
        (two.requests, two.would_refuse),
        (3, 1),
        "2/min kept its spent budget and its history"
    );
    let three = of("3/min");
    assert_eq!((three.requests, three.would_refuse), (1, 0), "3/min is new");

    // Promoted: the candidate becomes the rate; the candidates list goes.
    std::fs::write(&file, "[limits.api]\nrate = \"2/min\"\n").unwrap();
    limits.reload().unwrap();
    assert!(limits.candidates(5).is_empty());
    assert!(
        !check().allowed(),
        "the client's spending carries over into the promoted limit"
    );
}

#[test]
fn candidates_follow_requests_through_the_layer_and_never_change_a_response() {
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(
            "[limits.login]\nrate = \"10/min\"\ncount_status = [401]\ncandidates = [\"2/min\"]\n\
             [limits.api]\nrate = \"10/min\"\ncandidates = [\"1/min\"]\n",
        )
        .unwrap();
    let app = Router::new()
        .route("/api", get(|| async { "ok" }))
        .route("/login", get(|| async { StatusCode::UNAUTHORIZED }))
        .layer(RateLimitLayer::new(limits.clone()));
    let call = |path: &'static str| {
        let app = app.clone();
        async move {
            let mut request = http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            request
                .extensions_mut()
                .insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
            app.oneshot(request).await.unwrap()
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for n in 0..3 {
            let response = call("/api").await;
            assert_eq!(response.status(), StatusCode::OK, "request {n}");
            let header = response.headers()["ratelimit"].to_str().unwrap();
            assert!(
                header.starts_with(&format!("\"api\";r={};", 9 - n)),
                "the enforced rule's numbers: {header}"
            );
            assert_eq!(call("/login").await.status(), StatusCode::UNAUTHORIZED);
        }
    });
    let reports = limits.candidates(5);
    let of = |rule: &str| reports.iter().find(|r| r.rule == rule).unwrap().windows[0].clone();
    assert_eq!((of("api").requests, of("api").would_refuse), (3, 2));
    // count_status: the candidate looks at admission and is charged for each 401, as the
    // rule is: the third failed login is the one it would have refused.
    assert_eq!((of("login").requests, of("login").would_refuse), (3, 1));
    assert_eq!(of("login").top[0].client, "192.0.2.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_candidates_keep_buckets_of_their_own_shared_by_instances() {
    let Some(server) = crate::support::redis::RedisServer::start("candidates_on_redis") else {
        return;
    };
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"cand:\"\n\
         [limits.api]\nrate = \"100/min\"\ncandidates = [\"3/min\"]\n",
        server.url()
    );
    let instance = || {
        Limits::builder()
            .store(tollgate::store::BackendStore::new())
            .from_toml(&config)
            .unwrap()
    };
    let (one, two) = (instance(), instance());
    for n in 0..4 {
        let limits = if n % 2 == 0 { &one } else { &two };
        assert!(limits.check("api/me", 1).await.unwrap().allowed());
    }
    // The candidates' answers arrive on the runtime, after the responses.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let refused = |limits: &Limits<tollgate::store::BackendStore>| {
        limits
            .candidates(5)
            .first()
            .map_or(0, |report| report.windows[0].would_refuse)
    };
    while refused(&one) + refused(&two) < 1 {
        assert!(std::time::Instant::now() < deadline, "no candidate answer");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        refused(&one) + refused(&two),
        1,
        "the fourth request across both instances is the one 3/min refuses"
    );
    for key in ["cand:{api/me}c", "cand:{api#3:min/me}c"] {
        assert_eq!(
            server.command(&format!("EXISTS {key}")).unwrap(),
            ":1",
            "{key}"
        );
    }
    assert_eq!(one.peek("api/me").await.unwrap().remaining(), 96);
}
