//! Every way to limit, against a stepped clock, with the expected numbers worked
//! out from the definitions in the comments.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::routing::{get, post};
use http::{Method, StatusCode};
use tollgate::clock::{Clock, FakeClock, Timestamp};
use tollgate::{Limits, RateLimitLayer, RequestCost};
use tower::ServiceBuilder;

use crate::support::{get as fetch, now_or_never, send, serve};

fn limiter(config: &str, clock: &FakeClock) -> Limits {
    Limits::builder()
        .clock(clock.clone())
        .from_toml(config)
        .unwrap()
}

fn check(limits: &Limits, key: &str) -> tollgate::Decision {
    now_or_never(limits.check(key, 1)).unwrap()
}

#[test]
fn strict_never_admits_a_client_that_keeps_knocking_and_admits_one_that_pauses() {
    // 1/s: T = 1 s, burst 1.
    let clock = FakeClock::new();
    let limits = limiter(
        "[limits]\nlogin = { rate = \"1/s\", strict = true }\n",
        &clock,
    );
    assert!(check(&limits, "login/mallory").allowed());

    // Half an interval later: without strict it would wait 0.5 s more; strict makes it wait a
    // whole interval from this refusal, and Retry-After says so.
    clock.advance(Duration::from_millis(500));
    let refused = check(&limits, "login/mallory");
    assert!(!refused.allowed());
    assert_eq!(refused.retry_after(), Duration::from_secs(1));

    // Knocking every half-interval, forever (bounded here): never admitted, since every
    // refusal pushes the next admission a full interval past itself.
    for _ in 0..40 {
        clock.advance(Duration::from_millis(500));
        let refused = check(&limits, "login/mallory");
        assert!(!refused.allowed());
        assert_eq!(refused.retry_after(), Duration::from_secs(1));
    }

    // Quiet for one interval after the last refusal: admitted.
    clock.advance(Duration::from_secs(1));
    assert!(check(&limits, "login/mallory").allowed());

    // Without strict, the same knocking is admitted every second.
    let lenient = limiter("[limits]\nlogin = \"1/s\"\n", &clock);
    let admitted = (0..40)
        .filter(|_| {
            clock.advance(Duration::from_millis(500));
            check(&lenient, "login/alice").allowed()
        })
        .count();
    assert_eq!(admitted, 20);
}

#[test]
fn the_key_api_names_the_rule_and_peeks_without_taking() {
    let clock = FakeClock::new();
    let limits = limiter("[limits]\n\"/\" = \"100/s\"\nlogin = \"5/h\"\n", &clock);
    let decision = check(&limits, "login/alice");
    assert_eq!(decision.rule(), Some("login"));
    assert_eq!((decision.remaining(), decision.limit()), (4, 5));
    let peeked = now_or_never(limits.peek("login/alice")).unwrap();
    assert_eq!(peeked.remaining(), 4);
    assert_eq!(
        now_or_never(limits.peek("login/alice"))
            .unwrap()
            .remaining(),
        4,
        "a peek took nothing"
    );
    assert_eq!(check(&limits, "other/alice").rule(), Some("/"));
    let unlimited = Limits::from_toml("[limits]\napi = \"1/s\"\n").unwrap();
    assert_eq!(check(&unlimited, "other/alice").rule(), None);
}

#[test]
fn check_at_replays_events_in_any_order_without_corrupting_state() {
    let clock = FakeClock::new();
    let limits = limiter("[limits]\nlogin = \"2/min\"\n", &clock);
    let at = |seconds: u64| {
        Timestamp::from_unix_nanos(FakeClock::START.as_unix_nanos() + seconds * 1_000_000_000)
    };
    let replay =
        |seconds: u64| now_or_never(limits.check_at("login/alice", 1, at(seconds))).unwrap();
    // In order: two admitted at 0 s, the third refused; 30 s later one token is back.
    assert!(replay(0).allowed());
    assert!(replay(0).allowed());
    assert!(!replay(1).allowed());
    assert!(replay(30).allowed());
    // An event from before the others is judged against the state as it stands: refused,
    // and it neither underflows nor hands back tokens.
    let old = replay(0);
    assert!(!old.allowed());
    assert_eq!(old.retry_after(), Duration::from_secs(60));
    assert!(!replay(30).allowed());
    assert!(replay(60).allowed());
    // The clock of the limiter itself never moved.
    assert_eq!(clock.now(), FakeClock::START);
}

#[test]
fn sliding_and_fixed_windows_report_their_numbers() {
    let clock = FakeClock::new(); // FakeClock::START is a whole minute.
    let sliding = limiter(
        "[limits]\napi = { rate = \"10/min\", algorithm = \"sliding-window\" }\n",
        &clock,
    );
    let fixed = limiter(
        "[limits]\napi = { rate = \"10/min\", algorithm = \"fixed-window\" }\n",
        &clock,
    );
    clock.advance(Duration::from_secs(45));
    for limits in [&sliding, &fixed] {
        for expected in (0..10).rev() {
            let decision = check(limits, "api/c");
            assert!(decision.allowed());
            assert_eq!(decision.remaining(), expected);
        }
        let refused = check(limits, "api/c");
        assert!(!refused.allowed());
        assert_eq!(refused.limit(), 10);
        assert_eq!(refused.window(), Duration::from_secs(60));
    }
    // Fixed: everything comes back at the minute, 15 s away.
    assert_eq!(
        check(&fixed, "api/c").retry_after(),
        Duration::from_secs(15)
    );
    // Sliding: at the minute the 10 still weigh 10; one unit fits once their weight is 9,
    // 6 s into the next minute: 21 s away.
    assert_eq!(
        check(&sliding, "api/c").retry_after(),
        Duration::from_secs(21)
    );
    clock.advance(Duration::from_secs(15));
    assert_eq!(
        (0..20).filter(|_| check(&fixed, "api/c").allowed()).count(),
        10
    );
    assert_eq!(
        (0..20)
            .filter(|_| check(&sliding, "api/c").allowed())
            .count(),
        0
    );
    clock.advance(Duration::from_secs(6));
    assert_eq!(
        (0..20)
            .filter(|_| check(&sliding, "api/c").allowed())
            .count(),
        1
    );
}

/// An app whose /login answers 401 unless `x-password: right`, behind `count_status`.
fn login_app(limits: Limits, gate: Option<Arc<tokio::sync::Barrier>>) -> Router {
    Router::new()
        .route(
            "/login",
            get(move |request: Request| {
                let gate = gate.clone();
                async move {
                    if let Some(gate) = gate {
                        gate.wait().await;
                    }
                    let right = request
                        .headers()
                        .get("x-password")
                        .is_some_and(|p| p == "right");
                    if right {
                        StatusCode::OK
                    } else {
                        StatusCode::UNAUTHORIZED
                    }
                }
            }),
        )
        .layer(RateLimitLayer::new(limits))
}

#[tokio::test]
async fn count_status_only_charges_the_responses_that_count() {
    let clock = FakeClock::new();
    let limits = limiter(
        "[limits]\nlogin = { rate = \"2/min\", count_status = [401, \"5xx\"] }\n",
        &clock,
    );
    let address = serve(login_app(limits, None)).await;
    let right = [("x-password", "right")];
    // Successful logins take nothing.
    for _ in 0..5 {
        let reply = fetch(address, "/login", &right).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit"), Some("\"login\";r=2;t=0"));
    }
    // Two failures take the two tokens; the headers show what each left.
    let first = fetch(address, "/login", &[]).await;
    assert_eq!(first.status, StatusCode::UNAUTHORIZED);
    assert_eq!(first.header("ratelimit"), Some("\"login\";r=1;t=30"));
    assert_eq!(
        fetch(address, "/login", &[]).await.header("ratelimit"),
        Some("\"login\";r=0;t=30")
    );
    // Now even the right password is refused until a token is back (30 s).
    let refused = fetch(address, "/login", &right).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("30"));
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        fetch(address, "/login", &right).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_status_overdraws_by_at_most_the_requests_in_flight() {
    // One token left and three failing requests in flight at once: all three passed the
    // check, all three are charged, so the bucket is two tokens past empty — the bound is
    // (requests in flight − 1) × cost — and pays it back before admitting anyone.
    let clock = FakeClock::new();
    let limits = limiter(
        "[limits]\nlogin = { rate = \"2/min\", count_status = [401] }\n",
        &clock,
    );
    let gate = Arc::new(tokio::sync::Barrier::new(3));
    let address = serve(login_app(limits.clone(), Some(gate.clone()))).await;
    let warm = tokio::spawn(async move { fetch(address, "/login", &[]).await });
    // The barrier needs three arrivals: this one fails alone first, to use one token.
    let (a, b) = (gate.clone(), gate.clone());
    tokio::spawn(async move { a.wait().await });
    tokio::spawn(async move { b.wait().await });
    assert_eq!(warm.await.unwrap().status, StatusCode::UNAUTHORIZED);

    let in_flight: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { fetch(address, "/login", &[]).await.status }))
        .collect();
    for request in in_flight {
        assert_eq!(request.await.unwrap(), StatusCode::UNAUTHORIZED);
    }
    // 1 + 3 = 4 tokens charged against a burst of 2: two past empty, 30 s each, so the next
    // token is 90 s away.
    let peek = now_or_never(limits.peek("login/127.0.0.1")).unwrap();
    assert!(!peek.allowed());
    assert_eq!(peek.retry_after(), Duration::from_secs(90));
}

#[tokio::test]
async fn a_request_cost_from_the_request_weighs_it() {
    let clock = FakeClock::new();
    let limits = limiter("[limits]\nupload = \"100/min\"\n", &clock);
    // Weigh uploads by their declared size in kilobytes, before the limiter runs.
    let app = Router::new()
        .route("/upload", post(|| async { "stored" }))
        .layer(
            ServiceBuilder::new()
                .map_request(|mut request: Request| {
                    let kilobytes = request
                        .headers()
                        .get(http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map_or(1, |bytes| bytes.div_ceil(1024).max(1));
                    request.extensions_mut().insert(RequestCost(kilobytes));
                    request
                })
                .layer(RateLimitLayer::new(limits)),
        );
    let address = serve(app).await;
    let body = bytes::Bytes::from(vec![b'x'; 60 * 1024]);
    let first = send(address, Method::POST, "/upload", &[], body.clone()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit"), Some("\"upload\";r=40;t=1"));
    let second = send(address, Method::POST, "/upload", &[], body).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    // 60 units needed, 40 there: 20 more at 0.6 s each.
    assert_eq!(second.header("retry-after"), Some("12"));
}
