//! Limits that compose (`[limits."KEY".also]`) through the layer over real HTTP and through
//! the key API: per client AND per organisation AND one global budget on the same request,
//! all admitting or none charged, the refusing limit named, every limit in the headers.

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Method, StatusCode};
use tollgate::{Limits, RateLimitLayer};

use crate::support::{Reply, send, serve};

const STACKED: &str = "[client]\nsources = [\"header:x-key\"]\n\
    [limits.\"/\"]\nrate = \"2/min\"\n\
    [limits.\"/\".also]\neveryone = { rate = \"3/min\", per = \"global\" }\n\
    org = { rate = \"10/min\", per = \"header:x-org\" }\n\
    guard = { rate = \"100/min\", per = \"global\", headers = false }\n\
    [limits.\"api/search\"]\nrate = \"5/min\"\n";

async fn app(config: &str) -> (std::net::SocketAddr, Limits) {
    let limits = Limits::from_toml(config).unwrap();
    let app = Router::new()
        .route("/", get(|| async { "home" }))
        .route("/api/search", get(|| async { "results" }))
        .route("/healthz", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limits.clone()));
    (serve(app).await, limits)
}

async fn call(address: std::net::SocketAddr, path: &str, key: &str, org: &str) -> Reply {
    send(
        address,
        Method::GET,
        path,
        &[("x-key", key), ("x-org", org)],
        Bytes::new(),
    )
    .await
}

fn body(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_and_global_budgets_apply_together_and_a_refusal_charges_none() {
    let (address, limits) = app(STACKED).await;
    let first = call(address, "/", "alice", "acme").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"/\";q=2;w=60, \"/#everyone\";q=3;w=60, \"/#org\";q=10;w=60"),
        "every limit shown, the hidden guard not"
    );
    assert_eq!(
        first.header("ratelimit"),
        Some("\"/\";r=1;t=30"),
        "the one closest to refusing: alice has 1 of 2, everyone 2 of 3"
    );
    assert_eq!(
        call(address, "/", "alice", "acme").await.status,
        StatusCode::OK
    );

    // Alice's own limit refuses: the body names it, and nothing else is charged.
    let refused = call(address, "/", "alice", "acme").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(&refused)["limit"], "/");

    // Bob takes the last of everyone's three; then everyone refuses carol.
    assert_eq!(
        call(address, "/", "bob", "acme").await.status,
        StatusCode::OK
    );
    let carol = call(address, "/", "carol", "initech").await;
    assert_eq!(carol.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(&carol)["limit"], "/#everyone");
    assert_eq!(carol.header("ratelimit"), Some("\"/#everyone\";r=0;t=20"));
    assert_eq!(carol.header("retry-after"), Some("20"));
    // Carol's own bucket and her org's took nothing (a bucket never charged is not kept).
    let buckets = listed(&limits).await;
    assert!(
        buckets.contains(&"/#org/acme".to_owned())
            && !buckets
                .iter()
                .any(|b| b.contains("initech") || b.contains("carol")),
        "acme's org bucket is listed under its limit's name; carol's and initech's were never charged: {buckets:?}"
    );
    // A peek of a key with several limits speaks for the one closest to refusing.
    let peeked = limits.peek("alice").await.unwrap();
    assert_eq!((peeked.rule(), peeked.allowed()), (Some("/"), false));
    assert!(buckets.contains(&"/#everyone".to_owned()), "{buckets:?}");
}

/// The keys of every bucket the store holds.
async fn listed(limits: &Limits) -> Vec<String> {
    use tollgate::store::{BucketQuery, Store as _};
    let query = BucketQuery::new(limits.rules(), limits.now());
    limits
        .store()
        .buckets(query)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeper_rule_keeps_its_ancestors_also_limits_and_unlimited_rules_meet_none() {
    let (address, _) = app(&format!("{STACKED}[limits.healthz]\nunlimited = true\n")).await;
    let search = call(address, "/api/search", "dave", "acme").await;
    assert_eq!(search.status, StatusCode::OK);
    assert_eq!(
        search.header("ratelimit-policy"),
        Some("\"api/search\";q=5;w=60, \"/#everyone\";q=3;w=60, \"/#org\";q=10;w=60")
    );
    for _ in 0..10 {
        let health = call(address, "/healthz", "dave", "acme").await;
        assert_eq!(health.status, StatusCode::OK);
        assert!(health.header("ratelimit-policy").is_none());
    }
    // The health checks took nothing from everyone's budget: two more pass.
    assert_eq!(
        call(address, "/api/search", "erin", "acme").await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(address, "/api/search", "frank", "acme").await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(address, "/api/search", "grace", "acme").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotating_spammer_is_caught_by_its_organisation() {
    let (address, _) = app(
        "[client]\nsources = [\"header:x-key\"]\n[limits.\"/\"]\nrate = \"100/min\"\n\
         also.org = { rate = \"5/min\", per = \"header:x-org\" }\n",
    )
    .await;
    for n in 0..5 {
        let key = format!("key-{n}");
        assert_eq!(
            call(address, "/", &key, "spam").await.status,
            StatusCode::OK
        );
    }
    let rotated = call(address, "/", "key-99", "spam").await;
    assert_eq!(rotated.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(&rotated)["limit"], "/#org");
    // Another organisation, and requests without one (all under `-`), are apart.
    assert_eq!(
        call(address, "/", "key-99", "honest").await.status,
        StatusCode::OK
    );
    let anonymous = send(address, Method::GET, "/", &[("x-key", "k")], Bytes::new()).await;
    assert_eq!(anonymous.status, StatusCode::OK);
}

#[tokio::test]
async fn the_key_api_decides_every_limit_and_hidden_ones_refuse_with_retry_after_only() {
    let limits = Limits::from_toml(
        "[limits.api]\nrate = \"10/min\"\nalso.guard = { rate = \"1/min\", per = \"global\", headers = false }\n",
    )
    .unwrap();
    let first = limits.check("api/alice", 1).await.unwrap();
    assert!(first.allowed());
    assert_eq!(first.rule(), Some("api"));
    let second = limits.check("api/bob", 1).await.unwrap();
    assert!(!second.allowed());
    assert_eq!(second.rule(), Some("api#guard"));
    assert!(
        !listed(&limits).await.iter().any(|key| key.contains("bob")),
        "bob was charged nothing"
    );

    let app = Router::new()
        .route("/api", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limits.clone()));
    let address = serve(app).await;
    let hidden = send(address, Method::GET, "/api", &[], Bytes::new()).await;
    assert_eq!(hidden.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(hidden.header("retry-after").is_some());
    assert!(hidden.header("ratelimit").is_none(), "{:?}", hidden.headers);
    assert_eq!(hidden.header("ratelimit-policy"), Some("\"api\";q=10;w=60"));
}
