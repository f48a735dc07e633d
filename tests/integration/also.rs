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
    use tollgate::store::{BucketQuery, Inspection as _};
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

/// Threads taking overlapping sets of buckets in opposite orders (a request's rule and a
/// global limit, through keys whose stacks list them in different orders) never wait on
/// each other for ever, and never admit past a budget.
#[test]
fn opposite_orders_of_overlapping_buckets_neither_deadlock_nor_overspend() {
    const RULES: &str = "[limits.a]\nrate = \"1000/h\"\nalso.shared = { rate = \"600/h\", per = \"global\" }\n\
         [limits.\"a/b\"]\nrate = \"1000/h\"\nalso.other = { rate = \"100000/h\", per = \"global\" }\n";
    contend(Limits::from_toml(RULES).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let disk = Limits::builder()
        .store(tollgate::store::BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"disk\"\npath = \"{}\"\ncache_buckets = 2\n{RULES}",
            dir.path().display()
        ))
        .unwrap();
    assert!(disk.store().disk().is_some());
    contend(disk);
}

fn contend<St: tollgate::store::Store>(limits: Limits<St>) {
    let (done, finished) = std::sync::mpsc::channel();
    let admitted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for thread in 0..4 {
        let limits = limits.clone();
        let done = done.clone();
        let admitted = std::sync::Arc::clone(&admitted);
        std::thread::spawn(move || {
            for n in 0..500 {
                // Even threads by `a` first, odd ones through `a/b` (its stack lists the
                // root's `shared` before its own `other`): overlapping sets, other orders.
                let keys = if thread % 2 == 0 {
                    [("a/x", None), ("a/b/y", None)]
                } else {
                    [("a/b/y", None), ("a/x", None)]
                };
                let decided = crate::support::now_or_never(limits.check_all(&keys)).unwrap();
                if decided.iter().all(|d| d.allowed()) {
                    admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let _ = n;
            }
            let _ = done.send(());
        });
    }
    for _ in 0..4 {
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("every thread finishes: no lock waits on another for ever");
    }
    let admitted = admitted.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        admitted, 600,
        "600 an hour shared: a request whose two keys both meet it draws on it once"
    );
}

/// An `also` limit keeps what it has spent across a reload, as a rule does; one whose
/// `per` changes starts afresh.
#[tokio::test]
async fn a_reload_keeps_each_also_buckets_spending() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    write("[limits.api]\nrate = \"100/min\"\nalso.all = { rate = \"5/min\", per = \"global\" }\n");
    let limits = Limits::load([&file]).unwrap();
    for client in ["a", "b", "c"] {
        assert!(
            limits
                .check(&format!("api/{client}"), 1)
                .await
                .unwrap()
                .allowed()
        );
    }
    write("[limits.api]\nrate = \"200/min\"\nalso.all = { rate = \"6/min\", per = \"global\" }\n");
    limits.reload().unwrap();
    let mut admitted = 0;
    for client in ["d", "e", "f", "g", "h"] {
        if limits
            .check(&format!("api/{client}"), 1)
            .await
            .unwrap()
            .allowed()
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "3 of the 6 were spent before the reload");
    write("[limits.api]\nrate = \"200/min\"\nalso.all = { rate = \"6/min\", per = \"client\" }\n");
    limits.reload().unwrap();
    assert!(
        limits.check("api/z", 1).await.unwrap().allowed(),
        "per client now: afresh"
    );
}

/// An `also` limit that counts tokens (`cost = { reserve, from }` of its own) is settled
/// from the response as a rule is — from a header at once, or from the JSON body when it
/// ends — while the rule beside it counts requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_also_limits_reservation_is_settled_from_the_response() {
    let limits = Limits::from_toml(
        "[client]\nsources = [\"header:x-key\"]\n\
         [limits.v1]\nrate = \"100/min\"\n\
         also.org = { rate = \"1000/h\", per = \"header:x-org\", cost = { reserve = 100, from = \"header:x-usage\" } }\n\
         [limits.v2]\nrate = \"100/min\"\n\
         also.org = { rate = \"1000/h\", per = \"header:x-org\", cost = { reserve = 100, from = \"json:/usage/total_tokens\" } }\n",
    )
    .unwrap();
    let app = Router::new()
        .route(
            "/v1/chat",
            get(|| async { ([("x-usage", "30")], "answered") }),
        )
        .route(
            "/v2/chat",
            get(|| async {
                (
                    [("content-type", "application/json")],
                    r#"{"usage":{"total_tokens":45}}"#,
                )
            }),
        )
        .layer(RateLimitLayer::new(limits.clone()));
    let address = serve(app).await;
    for path in ["/v1/chat", "/v2/chat"] {
        let reply = call(address, path, "k", "acme").await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
    }
    // The settlements may finish just after the responses: bounded wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let org = |prefix: &'static str| {
            let limits = limits.clone();
            async move {
                use tollgate::store::{BucketQuery, Inspection as _};
                let mut query = BucketQuery::new(limits.rules(), limits.now());
                query.prefix = prefix.to_owned();
                let rows = limits.store().buckets(query).await.unwrap();
                rows.first().map(|row| row.remaining)
            }
        };
        let (v1, v2) = (org("v1#org/").await, org("v2#org/").await);
        if v1 == Some(970) && v2 == Some(955) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "100 reserved each, settled at 30 and 45: {v1:?} {v2:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A `count_status` rule keeps counting only the responses it names, beside an `also`
/// limit that counts every admission; a delaying rule holds a request only when every
/// limit it meets admits it, and a refusal by another takes no place in its schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_status_and_delay_rules_keep_their_ways_beside_also_limits() {
    let limits = Limits::from_toml(
        "[client]\nsources = [\"header:x-key\"]\n\
         [limits.login]\nrate = \"2/min\"\ncount_status = [401]\n\
         also.all = { rate = \"4/min\", per = \"global\" }\n\
         [limits.slow]\nrate = \"10/s\"\nburst = 1\non_limit = \"delay\"\nmax_delay = \"2s\"\n\
         also.cap = { rate = \"2/min\", per = \"global\" }\n",
    )
    .unwrap();
    let app = Router::new()
        .route("/login", get(|| async { StatusCode::UNAUTHORIZED }))
        .route("/login/ok", get(|| async { "welcome" }))
        .route("/slow", get(|| async { "done" }))
        .layer(RateLimitLayer::new(limits.clone()));
    let address = serve(app).await;
    // A success counts on `all`, not on login's failures.
    assert_eq!(
        call(address, "/login/ok", "k", "o").await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(address, "/login", "k", "o").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(address, "/login", "k", "o").await.status,
        StatusCode::UNAUTHORIZED
    );
    let refused = call(address, "/login", "k", "o").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(&refused)["limit"], "login", "two failures counted");
    // `all` took three (one success, two failures admitted); one left for someone else.
    assert_eq!(
        call(address, "/login/ok", "other", "o").await.status,
        StatusCode::OK
    );
    assert_eq!(
        body(&call(address, "/login/ok", "third", "o").await)["limit"],
        "login#all"
    );

    // Two pass (the second held ~100 ms); the third is refused by `cap` at once.
    let started = std::time::Instant::now();
    for _ in 0..2 {
        assert_eq!(
            call(address, "/slow", "k", "o").await.status,
            StatusCode::OK
        );
    }
    let capped = call(address, "/slow", "k", "o").await;
    assert_eq!(capped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(&capped)["limit"], "slow#cap");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
