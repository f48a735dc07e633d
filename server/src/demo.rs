//! The built-in demo upstream: what the gateway proxies to when no upstream is configured,
//! so `cargo run --example gateway` is useful on its own.
//!
//! It answers every request with a small JSON description of what it received, including
//! the `X-Forwarded-For` the gateway added — and `POST /v1/chat/completions` as an
//! OpenAI-compatible model would, with a `usage` object (or, with `"stream": true`,
//! server-sent events whose last one carries it), so a tokens-per-minute rule
//! (`cost = { reserve, from = "json:/usage/total_tokens" }`) can be watched at work.

use std::net::SocketAddr;

use axum::Json;
use axum::Router;
use axum::extract::Request;

/// Starts the demo upstream on a free loopback port; it runs until the runtime stops.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            axum::routing::post(chat_completions),
        )
        .fallback(describe);
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "demo upstream stopped");
        }
    });
    Ok(address)
}

async fn describe(request: Request) -> Json<serde_json::Value> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Json(serde_json::json!({
        "message": "hello from tollgate's demo upstream",
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "query": request.uri().query(),
        "x_forwarded_for": header("x-forwarded-for"),
    }))
}

/// What the demo model says, a word a token.
const REPLY: &[&str] = &[
    "This",
    " is",
    " tollgate's",
    " demo",
    " model:",
    " every",
    " word",
    " is",
    " a",
    " token,",
    " and",
    " the",
    " usage",
    " below",
    " is",
    " what",
    " the",
    " limiter",
    " settles.",
];

/// `POST /v1/chat/completions`: `messages` (their words are the prompt's tokens),
/// `max_tokens` (the completion's length, default 16, at most 100,000) and `stream`.
async fn chat_completions(body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (
            http::StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": { "message": "the body is not JSON", "type": "invalid_request_error" } })),
        )
            .into_response();
    };
    let prompt_tokens: u64 = request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .map(|text| text.split_whitespace().count() as u64)
                .sum()
        })
        .unwrap_or(0);
    let completion_tokens = request["max_tokens"].as_u64().unwrap_or(16).min(100_000);
    let words: Vec<&str> = (0..completion_tokens)
        .map(|i| REPLY[i as usize % REPLY.len()])
        .collect();
    let usage = serde_json::json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    let model = request["model"]
        .as_str()
        .unwrap_or("tollgate-demo")
        .to_owned();
    if request["stream"].as_bool() != Some(true) {
        return Json(serde_json::json!({
            "id": "chatcmpl-demo",
            "object": "chat.completion",
            "model": model,
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": words.concat() }, "finish_reason": "stop" }],
            "usage": usage,
        }))
        .into_response();
    }
    // Streamed: a chunk per word, then one with the usage, then [DONE] (as OpenAI's API
    // answers with stream_options.include_usage).
    let mut events: Vec<String> = words
        .chunks(8)
        .map(|chunk| {
            let data = serde_json::json!({
                "id": "chatcmpl-demo",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{ "index": 0, "delta": { "content": chunk.concat() } }],
            });
            format!("data: {data}\n\n")
        })
        .collect();
    let last = serde_json::json!({
        "id": "chatcmpl-demo",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [],
        "usage": usage,
    });
    events.push(format!("data: {last}\n\n"));
    events.push("data: [DONE]\n\n".to_owned());
    let stream = tokio_stream::iter(events.into_iter().map(|event| {
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(axum::body::Bytes::from(event)))
    }));
    axum::response::Response::builder()
        .header(http::header::CONTENT_TYPE, "text/event-stream")
        .header(http::header::CACHE_CONTROL, "no-cache")
        .body(axum::body::Body::new(http_body_util::StreamBody::new(
            stream,
        )))
        .unwrap_or_else(|_| http::StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
