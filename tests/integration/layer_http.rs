//! The layer under axum, over real HTTP: statuses, every header, bodies.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::clock::FakeClock;
use tollgate::{Limits, RateLimitLayer};

use crate::support::{get as send, serve};

fn app(config: &str, clock: &FakeClock) -> Router {
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(config)
        .unwrap();
    Router::new()
        .route("/", get(|| async { "root" }))
        .route("/api/search", get(|| async { "search" }))
        .route("/login", get(|| async { "login" }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/created",
            get(|| async { (StatusCode::CREATED, [("x-upstream", "kept")], "made") }),
        )
        .layer(RateLimitLayer::new(limits))
}

#[tokio::test]
async fn admits_then_denies_with_every_header_and_the_body() {
    let clock = FakeClock::new();
    let address = serve(app("[limits]\n\"/\" = \"2/min\"\n", &clock)).await;

    let first = send(address, "/", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "root");
    assert_eq!(first.header("ratelimit-policy"), Some("\"/\";q=2;w=60"));
    assert_eq!(first.header("ratelimit"), Some("\"/\";r=1;t=30"));
    assert_eq!(first.header("retry-after"), None);

    let second = send(address, "/", &[]).await;
    assert_eq!(second.header("ratelimit"), Some("\"/\";r=0;t=30"));

    clock.advance(Duration::from_millis(10_500));
    let denied = send(address, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    // 19.5 s until the next token: rounded up, and `t` agrees with Retry-After.
    assert_eq!(denied.header("retry-after"), Some("20"));
    assert_eq!(denied.header("ratelimit"), Some("\"/\";r=0;t=20"));
    assert_eq!(denied.header("ratelimit-policy"), Some("\"/\";q=2;w=60"));
    assert_eq!(denied.header("content-type"), Some("application/json"));
    assert_eq!(
        denied.body,
        r#"{"error":"rate_limited","retry_after":20,"limit":"/"}"#
    );
    assert_eq!(denied.header("x-ratelimit-limit"), None);

    clock.advance(Duration::from_millis(19_500));
    assert_eq!(send(address, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn retry_after_is_never_zero() {
    let clock = FakeClock::new();
    let address = serve(app("[limits]\n\"/\" = \"1/s\"\n", &clock)).await;
    send(address, "/", &[]).await;
    clock.advance(Duration::from_millis(999_999) / 1000);
    let denied = send(address, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("1"));
}

#[tokio::test]
async fn the_most_specific_rule_applies_and_keys_are_normalised() {
    let clock = FakeClock::new();
    let config = r#"
        [limits]
        "/" = "100/s"
        "api/search" = "1/min"
    "#;
    let address = serve(app(config, &clock)).await;
    let first = send(address, "/api/search", &[]).await;
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"api/search\";q=1;w=60")
    );
    // Spelling variants of the same route land in the same bucket (axum itself would
    // 404 some of them, but the limiter decides first).
    for variant in [
        "/api/search?q=1",
        "//api/./search/",
        "/x/../api/%73earch",
        "/api/search%2F",
    ] {
        let reply = send(address, variant, &[]).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{variant}");
    }
    assert_eq!(send(address, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn clients_behind_a_trusted_proxy_get_their_own_buckets() {
    let clock = FakeClock::new();
    let config = r#"
        [client]
        trusted_proxies = ["127.0.0.1"]
        [limits]
        "/" = "1/min"
        "/192.0.2.9" = "3/min"
    "#;
    let address = serve(app(config, &clock)).await;
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(
        send(address, "/", &from("192.0.2.1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(address, "/", &from("192.0.2.1")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(address, "/", &from("192.0.2.2")).await.status,
        StatusCode::OK
    );
    // The per-client special case.
    for _ in 0..3 {
        let reply = send(address, "/", &from("192.0.2.9")).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(
            reply
                .header("ratelimit-policy")
                .unwrap()
                .starts_with("\"192.0.2.9\";q=3")
        );
    }
    assert_eq!(
        send(address, "/", &from("192.0.2.9")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn spoofed_forwarding_headers_from_an_untrusted_peer_change_nothing() {
    let clock = FakeClock::new();
    let address = serve(app("[limits]\n\"/\" = \"1/min\"\n", &clock)).await;
    assert_eq!(
        send(address, "/", &[("x-forwarded-for", "192.0.2.1")])
            .await
            .status,
        StatusCode::OK
    );
    for spoof in [
        ("x-forwarded-for", "192.0.2.2"),
        ("x-real-ip", "192.0.2.3"),
        ("forwarded", "for=192.0.2.4"),
    ] {
        assert_eq!(
            send(address, "/", &[spoof]).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

#[tokio::test]
async fn api_keys_identify_clients_and_fall_back_to_the_address() {
    let clock = FakeClock::new();
    let config = r#"
        [client]
        sources = ["header:x-api-key", "ip"]
        [limits]
        "/" = "1/min"
    "#;
    let address = serve(app(config, &clock)).await;
    let key = |k: &'static str| [("x-api-key", k)];
    assert_eq!(
        send(address, "/", &key("alpha")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(address, "/", &key("alpha")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(address, "/", &key("beta")).await.status,
        StatusCode::OK
    );
    assert_eq!(send(address, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        send(address, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn header_styles_status_and_body_are_configurable() {
    let clock = FakeClock::new();
    let config = r#"
        [response]
        status = 503
        headers = "both"
        body = "busy, retry in {retry_after}s"
        content_type = "text/plain"
        [limits]
        "/" = { rate = "1/min", burst = 2 }
    "#;
    let address = serve(app(config, &clock)).await;
    let admitted = send(address, "/", &[]).await;
    assert_eq!(admitted.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(admitted.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(admitted.header("x-ratelimit-reset"), Some("60"));
    assert_eq!(admitted.header("ratelimit"), Some("\"/\";r=1;t=60"));
    send(address, "/", &[]).await;
    let denied = send(address, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(denied.body, "busy, retry in 60s");
    assert_eq!(denied.header("content-type"), Some("text/plain"));
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(denied.header("x-ratelimit-reset"), Some("120"));

    let legacy = serve(app(
        "[response]\nheaders = \"legacy\"\n[limits]\n\"/\" = \"1/min\"\n",
        &clock,
    ))
    .await;
    let reply = send(legacy, "/", &[]).await;
    assert_eq!(reply.header("ratelimit"), None);
    assert_eq!(reply.header("x-ratelimit-limit"), Some("1"));

    let none = serve(app(
        "[response]\nheaders = \"none\"\n[limits]\n\"/\" = \"1/min\"\n",
        &clock,
    ))
    .await;
    let reply = send(none, "/", &[]).await;
    assert!(
        !reply.headers.keys().any(|h| h.contains("ratelimit")),
        "{reply:?}"
    );
    let denied = send(none, "/", &[]).await;
    assert!(
        !denied.headers.keys().any(|h| h.contains("ratelimit")),
        "{denied:?}"
    );
    assert_eq!(denied.header("retry-after"), Some("60"));
}

#[tokio::test]
async fn unlimited_and_unmatched_routes_pass_without_headers() {
    let clock = FakeClock::new();
    let config = "[limits]\napi = \"1/min\"\nhealthz = { unlimited = true }\n";
    let address = serve(app(config, &clock)).await;
    for path in ["/healthz", "/healthz", "/login", "/login"] {
        let reply = send(address, path, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.header("ratelimit"), None, "{path}");
    }
}

#[tokio::test]
async fn the_inner_response_passes_through_untouched() {
    let clock = FakeClock::new();
    let address = serve(app("[limits]\n\"/\" = \"5/s\"\n", &clock)).await;
    let reply = send(address, "/created", &[]).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.body, "made");
    assert_eq!(reply.header("x-upstream"), Some("kept"));
    assert_eq!(reply.header("ratelimit"), Some("\"/\";r=4;t=1"));
}

#[tokio::test]
async fn two_routers_sharing_a_layer_share_one_budget() {
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml("[limits]\n\"/\" = \"2/min\"\n")
        .unwrap();
    let layer = RateLimitLayer::new(limits);
    let one = Router::new()
        .route("/", get(|| async { "one" }))
        .layer(layer.clone());
    let two = Router::new()
        .route("/", get(|| async { "two" }))
        .layer(layer);
    let (one, two) = (serve(one).await, serve(two).await);
    assert_eq!(send(one, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(send(two, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        send(one, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(two, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_refused_grpc_call_is_answered_as_grpc_and_other_requests_as_http() {
    let clock = FakeClock::new();
    let address = serve(app("[limits]\n\"/\" = \"1/min\"\n", &clock)).await;
    let grpc = [("content-type", "application/grpc+proto")];
    assert_eq!(send(address, "/", &grpc).await.status, StatusCode::OK);

    let refused = send(address, "/", &grpc).await;
    assert_eq!(
        refused.status,
        StatusCode::OK,
        "gRPC clients read grpc-status, not 429"
    );
    assert_eq!(refused.header("content-type"), Some("application/grpc"));
    assert_eq!(
        refused.header("grpc-status"),
        Some("8"),
        "RESOURCE_EXHAUSTED"
    );
    assert_eq!(
        refused.header("grpc-message"),
        Some("rate limited: retry after 60 s")
    );
    assert_eq!(refused.header("retry-after"), Some("60"));
    assert_eq!(refused.header("ratelimit"), Some("\"/\";r=0;t=60"));
    assert!(refused.body.is_empty(), "{}", refused.body);

    let plain = send(address, "/", &[]).await;
    assert_eq!(plain.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(plain.header("grpc-status"), None);
}
