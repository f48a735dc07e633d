//! AI traffic through the layer: token usage read from each API's responses (JSON and
//! server-sent events) and weighed; an estimate reserved from the request's JSON body,
//! refusing before the upstream is called; limits per model from the body.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tollgate::clock::FakeClock;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer, ReadBodyLayer};
use tower::ServiceExt as _;

use crate::support::now_or_never;

/// An LLM API's answer: usage 100 input, 800 cached, 50 output in `dialect`'s shape.
fn answer(dialect: &str) -> axum::response::Response {
    let json = |body: &str| {
        axum::response::Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    };
    let events = |events: Vec<&str>| {
        let frames = events.into_iter().map(|event| {
            Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(format!("{event}\n\n"))))
        });
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::new(http_body_util::StreamBody::new(
                futures_util::stream::iter(frames.collect::<Vec<_>>()),
            )))
            .unwrap()
    };
    match dialect {
        "chat" => json(
            r#"{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":900,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":800}}}"#,
        ),
        "chat-sse" => events(vec![
            r#"data: {"choices":[{"delta":{"content":"Hi"}}],"usage":null}"#,
            r#"data: {"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":800}}}"#,
            "data: [DONE]",
        ]),
        "responses" => json(
            r#"{"object":"response","usage":{"input_tokens":900,"input_tokens_details":{"cached_tokens":800},"output_tokens":50}}"#,
        ),
        "anthropic" => json(
            r#"{"type":"message","usage":{"input_tokens":100,"cache_read_input_tokens":800,"output_tokens":50}}"#,
        ),
        "anthropic-sse" => events(vec![
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":800,\"output_tokens\":1}}}",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":50}}",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}",
        ]),
        "gemini" => json(
            r#"{"candidates":[],"usageMetadata":{"promptTokenCount":900,"cachedContentTokenCount":800,"candidatesTokenCount":50}}"#,
        ),
        "gemini-sse" => events(vec![
            r#"data: {"candidates":[],"usageMetadata":{"promptTokenCount":900,"cachedContentTokenCount":800,"candidatesTokenCount":20}}"#,
            r#"data: {"candidates":[],"usageMetadata":{"promptTokenCount":900,"cachedContentTokenCount":800,"candidatesTokenCount":50}}"#,
        ]),
        _ => json(r#"{"error":{"message":"unknown dialect"}}"#),
    }
}

struct App {
    router: Router,
    limits: Limits,
    calls: Arc<AtomicUsize>,
}

fn app(config: &str) -> App {
    // Time stands still: what is left is what was spent, with no refill between requests.
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .from_toml(config)
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let router = Router::new()
        .route(
            "/llm/{dialect}",
            post(
                move |axum::extract::Path(dialect): axum::extract::Path<String>, body: Bytes| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let mut response = answer(&dialect);
                        response
                            .headers_mut()
                            .insert("x-request-bytes", http::HeaderValue::from(body.len()));
                        response
                    }
                },
            ),
        )
        .layer(RateLimitLayer::new(limits.clone()).axum_body())
        .layer(ReadBodyLayer::new(limits.clone()).axum_body());
    App {
        router,
        limits,
        calls,
    }
}

/// Sends `body` to `/llm/{dialect}`, reads the whole response: status and how many bytes
/// of the request the upstream received.
async fn send(app: &App, dialect: &str, body: impl Into<Body>) -> (StatusCode, Option<usize>) {
    let mut request = Request::post(format!("/llm/{dialect}"))
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
    let response = app.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let received = response
        .headers()
        .get("x-request-bytes")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    response.into_body().collect().await.unwrap();
    (status, received)
}

fn remaining(limits: &Limits, key: &str) -> u64 {
    now_or_never(limits.peek(key)).unwrap().remaining()
}

#[tokio::test]
async fn every_dialect_settles_the_same_weighted_usage() {
    // 100 input + 0.1 × 800 cached + 4 × 50 output = 380.
    let app = app(
        "[limits]\nllm = { rate = \"100000/min\", cost = { reserve = 1000, from = \"usage\", max = 100000, weights = { output = 4, cached = 0.1 } } }\n",
    );
    let mut expected = 100_000;
    for dialect in [
        "chat",
        "chat-sse",
        "responses",
        "anthropic",
        "anthropic-sse",
        "gemini",
        "gemini-sse",
    ] {
        let (status, _) = send(&app, dialect, "{}").await;
        assert_eq!(status, StatusCode::OK, "{dialect}");
        expected -= 380;
        assert_eq!(
            remaining(&app.limits, "llm/192.0.2.1"),
            expected,
            "{dialect}"
        );
    }
    // A response without usage keeps its reservation.
    send(&app, "none", "{}").await;
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), expected - 1000);
}

#[tokio::test]
async fn an_estimate_refuses_before_the_upstream_and_the_usage_settles_it() {
    let app = app(
        "[limits]\nllm = { rate = \"400/min\", cost = { reserve = \"estimate\", from = \"usage\", max = 350 } }\n",
    );
    // 400 bytes of prompt text (100 tokens) + a ceiling of 200: 300 reserved; the answer
    // says no usage, so the reservation stands.
    let chat = |text_bytes: usize, max_tokens: u64| {
        format!(
            r#"{{"model":"m","max_tokens":{max_tokens},"messages":[{{"role":"user","content":"{}"}}]}}"#,
            "x".repeat(text_bytes)
        )
    };
    let (status, received) = send(&app, "none", chat(400, 200)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(received, Some(chat(400, 200).len()), "forwarded whole");
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 100);
    // 300 more cannot be afforded: refused before the upstream is called.
    let (status, _) = send(&app, "chat", chat(400, 200)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(app.calls.load(Ordering::SeqCst), 1);
    // A small request fits (1 + 10 = 11); its usage (none here) keeps the reservation.
    let (status, _) = send(&app, "none", chat(4, 10)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 89);
}

#[tokio::test]
async fn usage_settles_an_estimate_down_to_what_was_used() {
    let app = app(
        "[limits]\nllm = { rate = \"10000/min\", cost = { reserve = \"estimate\", from = \"usage\", max = 5000, weights = { cached = 0 } } }\n",
    );
    let body = r#"{"model":"m","max_tokens":4000,"messages":[{"role":"user","content":"abcd"}]}"#;
    let (status, _) = send(&app, "anthropic", body).await;
    assert_eq!(status, StatusCode::OK);
    // Reserved 4001, settled to 100 + 0 × 800 + 50.
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 10_000 - 150);
    // Usage above the estimate's cap is believed: a ceiling of 5 (7 reserved) and 950 used.
    let capped = self::app(
        "[limits]\nllm = { rate = \"10000/min\", cost = { reserve = \"estimate\", from = \"usage\", max = 100 } }\n",
    );
    let body = r#"{"max_tokens":5,"messages":[{"role":"user","content":"abcdefgh"}]}"#;
    assert_eq!(send(&capped, "anthropic", body).await.0, StatusCode::OK);
    assert_eq!(remaining(&capped.limits, "llm/192.0.2.1"), 10_000 - 950);
}

#[tokio::test]
async fn bodies_that_are_not_json_or_too_large_reserve_max_and_pass_unchanged() {
    let app = app(
        "[limits]\nllm = { rate = \"10000/min\", cost = { reserve = \"estimate\", from = \"usage\", max = 1000 } }\n",
    );
    let (status, received) = send(&app, "none", "model=gpt-4o").await;
    assert_eq!((status, received), (StatusCode::OK, Some(12)));
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 9_000);
    // Over 1 MiB, streamed in pieces without a length: read to the bound, then the rest
    // follows; the upstream gets every byte.
    let piece = Bytes::from(vec![b' '; 64 << 10]);
    let pieces = (0..20).map(move |_| Ok::<_, Infallible>(http_body::Frame::data(piece.clone())));
    let body = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        pieces.collect::<Vec<_>>(),
    )));
    let (status, received) = send(&app, "none", body).await;
    assert_eq!((status, received), (StatusCode::OK, Some(20 * (64 << 10))));
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 8_000);
}

#[tokio::test]
async fn a_limit_per_model_from_the_body_beside_the_client_s() {
    let app = app(concat!(
        "[limits.llm]\nrate = \"100/min\"\n",
        "[limits.llm.also]\nmodel = { rate = \"2/min\", per = \"json:/model\" }\n",
    ));
    let ask = |model: &str| format!(r#"{{"model":"{model}","messages":[]}}"#);
    for _ in 0..2 {
        assert_eq!(send(&app, "none", ask("gpt-4o")).await.0, StatusCode::OK);
    }
    assert_eq!(
        send(&app, "none", ask("gpt-4o")).await.0,
        StatusCode::TOO_MANY_REQUESTS,
        "gpt-4o's budget is spent"
    );
    for _ in 0..2 {
        assert_eq!(
            send(&app, "none", ask("gpt-4o-mini")).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        send(&app, "none", ask("gpt-4o-mini")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The client's own budget counted all four admitted.
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 96);
}

#[tokio::test]
async fn a_money_budget_prices_each_response_by_its_model_and_shows_cents() {
    // $1 a month; gpt-4o at $2.50 a million input and $10 a million output tokens.
    let app = app(concat!(
        "[prices.\"gpt-4o*\"]\ninput = \"2.50/1M\"\noutput = \"10.00/1M\"\ncached = \"1.25/1M\"\n",
        "[limits]\nllm = { rate = \"$1/month\", cost = { reserve = \"estimate\", from = \"usage\", max = 50 } }\n",
    ));
    // The chat answer: 100 input, 800 cached, 50 output, named by the request's model:
    // 250 + 1000 + 500 = 1750 micro-dollars.
    let body =
        r#"{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":"abcd"}]}"#;
    let mut request = Request::post("/llm/chat").body(Body::from(body)).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse().unwrap()));
    let response = app.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // Admitted on the estimate: 1 input + 50 output tokens at gpt-4o's prices, 503
    // micro-dollars; $1 less that is 99 whole cents.
    assert_eq!(
        response.headers()["ratelimit-policy"],
        "\"llm\";q=100;w=2592000"
    );
    assert_eq!(
        response.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .split(';')
            .nth(1),
        Some("r=99")
    );
    response.into_body().collect().await.unwrap();
    assert_eq!(remaining(&app.limits, "llm/192.0.2.1"), 1_000_000 - 1750);
    // A model without a price keeps the reservation (the estimate falls back to max, 50
    // cents, as the model has no price either).
    let (status, _) = send(&app, "chat", r#"{"model":"mystery","messages":[]}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        remaining(&app.limits, "llm/192.0.2.1"),
        1_000_000 - 1750 - 500_000
    );
}

#[test]
fn money_rules_are_checked_when_written() {
    let refused = [
        ("rate = \"$50/month\"", "give it cost"),
        (
            "rate = \"$50/month\", cost = { reserve = 1, from = \"header:x-cost\" }",
            "give it cost",
        ),
        (
            "rate = [\"$5/day\", \"1000/day\"], cost = { reserve = 1, from = \"usage\" }",
            "mixes money and token rates",
        ),
        (
            "rate = \"$5/day\", burst = 10, cost = { reserve = 1, from = \"usage\" }",
            "leave burst out",
        ),
        (
            "rate = \"$-5/day\", cost = { reserve = 1, from = \"usage\" }",
            "not an amount of money",
        ),
        (
            "rate = \"$5/day\", cost = { reserve = 1, from = \"usage\", weights = { output = 2 } }",
            "takes no weights",
        ),
        (
            "rate = \"100/min\", cost = { reserve = 1, from = \"usage\", weights = { output = -2 } }",
            "weights must be numbers",
        ),
        (
            "rate = \"100/min\", cost = { reserve = 1, from = \"header:x-n\", weights = { output = 2 } }",
            "weights need from",
        ),
        (
            "rate = \"100/min\", cost = { reserve = \"estimate\", from = \"usage\" }",
            "give it a max",
        ),
        (
            "rate = \"100/min\", cost = { reserve = \"guess\", from = \"usage\" }",
            "a number of tokens or \"estimate\"",
        ),
    ];
    for (rule, expected) in refused {
        let error = Limits::from_toml(&format!("[limits]\nllm = {{ {rule} }}\n"))
            .err()
            .unwrap_or_else(|| panic!("{rule} was accepted"))
            .to_string();
        assert!(error.contains(expected), "{rule}: {error}");
        assert!(error.contains(":2:"), "{rule}: names the line: {error}");
    }
    let error =
        Limits::from_toml("[prices.\"gpt-4o\"]\ninput = \"cheap\"\n[limits]\n\"/\" = \"1/s\"\n")
            .err()
            .unwrap()
            .to_string();
    assert!(
        error.contains(":2:") && error.contains("2.50/1M"),
        "{error}"
    );
}
