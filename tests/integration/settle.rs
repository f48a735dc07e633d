//! Costs known after the response: a reservation at admission, settled by the response's
//! own figure — from a header, a trailer, a JSON body or the last server-sent event — with
//! the unused part given back and an excess taken as debt; responses that never say, say
//! nonsense or never finish keep the reservation.

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt as _;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};
use tower::ServiceExt as _;

use crate::support::now_or_never;

/// What the upstream says the request cost, and how.
async fn upstream(request: Request<Body>) -> axum::response::Response {
    let query = request.uri().query().unwrap_or_default().to_owned();
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .map(str::to_owned)
    };
    let tokens = param("tokens").unwrap_or_default();
    match param("via").as_deref() {
        Some("header") => axum::response::Response::builder()
            .header("x-usage-tokens", tokens)
            .body(Body::from("ok"))
            .unwrap(),
        Some("json") => axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(format!(
                "{{\"id\":\"c1\",\"usage\":{{\"prompt_tokens\":1,\"total_tokens\":{tokens}}}}}"
            )))
            .unwrap(),
        Some("sse") => {
            let events = vec![
                "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n".to_owned(),
                format!("data: {{\"choices\":[],\"usage\":{{\"total_tokens\":{tokens}}}}}\n\n"),
                "data: [DONE]\n\n".to_owned(),
            ];
            let stream = futures_util::stream::iter(
                events
                    .into_iter()
                    .map(|event| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(event)))),
            );
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::new(http_body_util::StreamBody::new(stream)))
                .unwrap()
        }
        Some("trailer") => {
            let mut trailers = HeaderMap::new();
            trailers.insert("x-usage-tokens", HeaderValue::from_str(&tokens).unwrap());
            let frames = vec![
                Ok::<_, Infallible>(http_body::Frame::data(Bytes::from("streamed"))),
                Ok(http_body::Frame::trailers(trailers)),
            ];
            axum::response::Response::builder()
                .body(Body::new(http_body_util::StreamBody::new(
                    futures_util::stream::iter(frames),
                )))
                .unwrap()
        }
        _ => axum::response::Response::new(Body::from("no figure")),
    }
}

fn app(from: &str) -> (Router, Limits) {
    let limits = Limits::from_toml(&format!(
        "[limits]\nllm = {{ rate = \"1000/min\", cost = {{ reserve = 100, from = \"{from}\", max = 100000 }} }}\n"
    ))
    .unwrap();
    let app = Router::new()
        .route("/llm", get(upstream))
        .layer(RateLimitLayer::new(limits.clone()));
    (app, limits)
}

fn request(query: &str) -> Request<Body> {
    let mut request = Request::get(format!("/llm?{query}"))
        .body(Body::empty())
        .unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
    request
}

/// Sends a request and reads its whole body; the response's `RateLimit` header.
async fn send(app: &Router, query: &str) -> (StatusCode, Option<String>) {
    let response = app.clone().oneshot(request(query)).await.unwrap();
    let status = response.status();
    let header = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned());
    response.into_body().collect().await.unwrap();
    (status, header)
}

fn remaining(limits: &Limits) -> u64 {
    now_or_never(limits.peek("llm/192.0.2.1"))
        .unwrap()
        .remaining()
}

#[tokio::test]
async fn every_source_gives_back_the_unused_part_and_takes_the_excess() {
    for source in [
        "header:x-usage-tokens",
        "json:/usage/total_tokens",
        "trailer:x-usage-tokens",
    ] {
        let via = source.split(':').next().unwrap();
        let (app, limits) = app(source);
        send(&app, &format!("via={via}&tokens=30")).await;
        assert_eq!(remaining(&limits), 970, "{source}: 100 reserved, 30 used");
        send(&app, &format!("via={via}&tokens=250")).await;
        assert_eq!(remaining(&limits), 720, "{source}: 100 reserved, 250 used");
    }
    let (app, limits) = app("json:/usage/total_tokens");
    send(&app, "via=sse&tokens=57").await;
    assert_eq!(remaining(&limits), 943, "the last event's usage");
}

/// hyper sends a body's trailers and drops it without asking for more: trailers are the
/// last frame, so they settle it even when nobody polls the body to its end.
#[tokio::test]
async fn a_trailer_settles_a_body_dropped_right_after_it() {
    let (app, limits) = app("trailer:x-usage-tokens");
    let response = app
        .clone()
        .oneshot(request("via=trailer&tokens=30"))
        .await
        .unwrap();
    let mut body = response.into_body();
    loop {
        let frame = body.frame().await.unwrap().unwrap();
        if frame.is_trailers() {
            break;
        }
    }
    drop(body);
    assert_eq!(remaining(&limits), 970, "100 reserved, 30 used");
}

#[tokio::test]
async fn a_header_figure_is_settled_before_the_headers_go_out() {
    let (app, _limits) = app("header:x-usage-tokens");
    let (_, header) = send(&app, "via=header&tokens=10").await;
    assert!(header.as_deref().unwrap().contains("r=990"), "{header:?}");
}

#[tokio::test]
async fn an_excess_is_debt_that_later_requests_wait_off() {
    let (app, limits) = app("header:x-usage-tokens");
    send(&app, "via=header&tokens=1500").await;
    assert_eq!(remaining(&limits), 0);
    let (status, _) = send(&app, "via=header&tokens=1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "500 tokens in debt");
    let decision = now_or_never(limits.check("llm/192.0.2.1", 100)).unwrap();
    assert!(!decision.allowed());
    assert!(
        decision.retry_after().as_secs() >= 35,
        "{:?}",
        decision.retry_after()
    );
}

#[tokio::test]
async fn responses_that_do_not_say_or_say_nonsense_keep_the_reservation() {
    for (source, query) in [
        ("header:x-usage-tokens", "via=none"),
        ("header:x-usage-tokens", "via=header&tokens=-5"),
        ("header:x-usage-tokens", "via=header&tokens=lots"),
        ("header:x-usage-tokens", "via=header&tokens=100001"),
        ("json:/usage/total_tokens", "via=json&tokens=%22x%22"),
        ("json:/usage/total_tokens", "via=none"),
        ("trailer:x-usage-tokens", "via=none"),
    ] {
        let (app, limits) = app(source);
        let (status, _) = send(&app, query).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{source} {query}: the response is untouched"
        );
        assert_eq!(remaining(&limits), 900, "{source} {query}");
    }
}

#[tokio::test]
async fn a_body_dropped_half_way_keeps_the_reservation_and_a_thousand_leave_nothing_behind() {
    let (app, limits) = app("json:/usage/total_tokens");
    for _ in 0..1_000 {
        let response = app
            .clone()
            .oneshot(request("via=sse&tokens=1"))
            .await
            .unwrap();
        let mut body = response.into_body();
        // One frame read, then the client goes away.
        let _ = body.frame().await;
        drop(body);
        // Refill what was reserved, so every request is admitted.
        now_or_never(limits.refund("llm/192.0.2.1", 100)).unwrap();
    }
    assert_eq!(
        remaining(&limits),
        1000,
        "each dropped body kept exactly its reservation"
    );
    let response = app
        .clone()
        .oneshot(request("via=sse&tokens=1"))
        .await
        .unwrap();
    drop(response);
    assert_eq!(
        remaining(&limits),
        900,
        "a response never read keeps its reservation"
    );
}

#[tokio::test]
async fn requests_are_counted_beside_tokens_one_each_and_never_settled() {
    let limits = Limits::from_toml(
        "[limits]\nllm = { rate = [\"1000/min\", \"50000/d\"], requests = \"3/min\", \
         cost = { reserve = 100, from = \"header:x-usage-tokens\" } }\n",
    )
    .unwrap();
    let app = Router::new()
        .route("/llm", get(upstream))
        .layer(RateLimitLayer::new(limits.clone()));
    for _ in 0..3 {
        let (status, _) = send(&app, "via=header&tokens=5").await;
        assert_eq!(status, StatusCode::OK);
    }
    let rule = limits.rules();
    let rule = rule.get("llm").unwrap();
    assert_eq!(
        rule.quotas().iter().filter(|q| q.counts_requests()).count(),
        1
    );
    // Tokens are plentiful (15 used), but three requests a minute is the limit.
    let (status, _) = send(&app, "via=header&tokens=5").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let tokens = now_or_never(limits.peek("llm/192.0.2.1")).unwrap();
    assert!(
        !tokens.allowed(),
        "the request quota is the one that refuses"
    );
}

#[tokio::test]
async fn a_thousand_failing_or_panicking_requests_keep_their_reservations_and_hold_nothing() {
    use futures_util::FutureExt as _;
    use tower::Layer as _;
    let limits = Limits::from_toml(
        "[limits]\nllm = { rate = \"100000/min\", concurrency = 5, \
         cost = { reserve = 10, from = \"header:x-usage-tokens\" } }\n",
    )
    .unwrap();
    let failing = tower::service_fn(|request: Request<Body>| async move {
        if request.uri().query() == Some("panic") {
            panic!("the handler panicked");
        }
        Err::<axum::response::Response, _>(std::io::Error::other("the upstream failed"))
    });
    let service = RateLimitLayer::new(limits.clone()).layer(failing);
    for n in 0..1_000 {
        // One in ten panics (each prints its message), the rest fail.
        let query = if n % 10 == 0 { "panic" } else { "error" };
        let outcome = std::panic::AssertUnwindSafe(service.clone().oneshot(request(query)))
            .catch_unwind()
            .await;
        match query {
            "panic" => assert!(outcome.is_err(), "the panic reached the caller"),
            _ => assert!(
                matches!(outcome, Ok(Err(_))),
                "the error reached the caller"
            ),
        }
    }
    // Every one kept its reservation (nothing settled, nothing lost), and no slot of the
    // concurrency cap of 5 is still held: a thousand more pass one after another.
    let bucket = now_or_never(limits.peek("llm/192.0.2.1")).unwrap();
    assert!(
        (100_000 - 10_000..=100_000 - 10_000 + 200).contains(&bucket.remaining()),
        "{bucket:?}"
    );
    let ok = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(
            axum::response::Response::builder()
                .header("x-usage-tokens", "1")
                .body(Body::empty())
                .unwrap(),
        )
    });
    let service = RateLimitLayer::new(limits.clone()).layer(ok);
    for _ in 0..1_000 {
        let response = service.clone().oneshot(request("ok")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
}
