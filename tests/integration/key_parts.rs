//! `[key] parts` through the layer over real HTTP: rules per method, host, query parameter
//! and cookie; hostile part values that stay one bounded segment and never make buckets.

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Method, StatusCode};
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};

use crate::support::{send, serve};

async fn app(config: &str) -> (std::net::SocketAddr, Limits) {
    let limits = Limits::from_toml(config).unwrap();
    let app = Router::new()
        .route(
            "/orders",
            get(|| async { "list" }).post(|| async { "made" }),
        )
        .route("/export", get(|| async { "rows" }))
        .route("/search", post(|| async { "found" }))
        .layer(RateLimitLayer::new(limits.clone()));
    (serve(app).await, limits)
}

async fn status(
    address: std::net::SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> StatusCode {
    send(address, method, path, headers, Bytes::new())
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posting_orders_on_one_host_is_limited_apart_from_reading_them_and_other_hosts() {
    let (address, _) = app(
        "[key]\nparts = [\"host\", \"method\", \"route\", \"client\"]\n\
         [limits]\n\"/\" = \"100/min\"\n\"shop.example/POST/orders\" = \"1/min\"\n",
    )
    .await;
    let shop = [("host", "shop.example")];
    assert_eq!(
        status(address, Method::POST, "/orders", &shop).await,
        StatusCode::OK
    );
    assert_eq!(
        status(address, Method::POST, "/orders", &shop).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The same host however it is written: case and port do not make another host.
    assert_eq!(
        status(
            address,
            Method::POST,
            "/orders",
            &[("host", "SHOP.Example:8443")]
        )
        .await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(address, Method::GET, "/orders", &shop).await,
        StatusCode::OK
    );
    assert_eq!(
        status(
            address,
            Method::POST,
            "/orders",
            &[("host", "other.example")]
        )
        .await,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_parameter_and_a_cookie_pick_their_rules() {
    let (address, _) = app(
        "[key]\nparts = [\"cookie:plan\", \"route\", \"query:format\", \"client\"]\n\
         [limits]\n\"/\" = \"100/min\"\n\"-/export/csv\" = \"1/min\"\n\"free/search\" = \"1/min\"\n",
    )
    .await;
    assert_eq!(
        status(address, Method::GET, "/export?format=csv", &[]).await,
        StatusCode::OK
    );
    assert_eq!(
        status(address, Method::GET, "/export?format=csv&x=1", &[]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(address, Method::GET, "/export?format=json", &[]).await,
        StatusCode::OK
    );
    let free = [("cookie", "session=abc; plan=free")];
    assert_eq!(
        status(address, Method::POST, "/search", &free).await,
        StatusCode::OK
    );
    assert_eq!(
        status(address, Method::POST, "/search", &free).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let pro = [("cookie", "plan=pro")];
    assert_eq!(
        status(address, Method::POST, "/search", &pro).await,
        StatusCode::OK
    );
    assert_eq!(
        status(address, Method::POST, "/search", &pro).await,
        StatusCode::OK
    );
}

#[test]
fn hostile_part_values_are_bounded_encoded_and_make_no_buckets() {
    let limits = Limits::from_toml(
        "[key]\nparts = [\"header:x-tenant\", \"route\", \"client\"]\n\
         [limits]\n\"/\" = \"1000/min\"\nacme = \"1/min\"\n",
    )
    .unwrap();
    let request = |tenant: &[u8]| {
        let mut request = http::Request::get("/orders").body(()).unwrap();
        request
            .headers_mut()
            .insert("x-tenant", http::HeaderValue::from_bytes(tenant).unwrap());
        request
            .extensions_mut()
            .insert(PeerAddr("192.0.2.9:1".parse().unwrap()));
        request
    };
    let decide = |tenant: &[u8]| {
        crate::support::now_or_never(limits.check_request(&request(tenant)).unwrap()).unwrap()
    };
    for n in 0..300u32 {
        // Long, binary, slashed, dotted: each a different value.
        let mut value = vec![b'\xff'; 4096];
        value.extend_from_slice(format!("/../{n}").as_bytes());
        assert!(decide(&value).allowed());
        assert!(decide(format!("t{n}/../acme").as_bytes()).allowed());
    }
    assert_eq!(
        limits.store().len(),
        1,
        "600 tenants under the root rule: one bucket, the client's"
    );
    assert!(decide(b"acme").allowed());
    assert!(
        !decide(b"acme").allowed(),
        "only tenant acme meets its rule"
    );
    let why = limits.rules().explain(
        &format!("{}/orders", "%FF".repeat(tollgate::key::MAX_PART)),
        "192.0.2.9",
    );
    assert_eq!(why.rule.as_deref(), Some("/"));
    assert_eq!(why.parts[0].value.len(), 3 * tollgate::key::MAX_PART);
}
