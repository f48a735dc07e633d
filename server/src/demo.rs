//! The built-in demo upstream: what the gateway proxies to when no upstream is configured,
//! so `cargo run -p tollgate-server` is useful on its own.
//!
//! It answers every request with a small JSON description of what it received, including
//! the `X-Forwarded-For` the gateway added — and the big LLM APIs as their models would,
//! each with its own usage object, as a JSON body or (with `"stream": true`, or Gemini's
//! `:streamGenerateContent`) as server-sent events, so token budgets
//! (`cost = { reserve, from = "usage" }`) can be watched at work:
//!
//! | endpoint | API | output ceiling |
//! |---|---|---|
//! | `POST /v1/chat/completions` | OpenAI Chat Completions | `max_tokens`, `max_completion_tokens` |
//! | `POST /v1/responses` | OpenAI Responses | `max_output_tokens` |
//! | `POST /v1/messages` | Anthropic Messages | `max_tokens` |
//! | `POST /v1beta/models/MODEL:generateContent` (`:streamGenerateContent`) | Gemini | `generationConfig.maxOutputTokens` |
//!
//! The prompt's tokens are its text's bytes ÷ 4, rounded up (as tollgate estimates them);
//! the answer is as many tokens as the ceiling asks (default 16, at most 100,000). A prompt
//! text starting with `cached:` reports its tokens as read from a cache.

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
        .route("/v1/responses", axum::routing::post(responses))
        .route("/v1/messages", axum::routing::post(messages))
        .route("/v1beta/models/{call}", axum::routing::post(gemini))
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

/// One request to the demo model, whatever its API.
struct Ask {
    model: String,
    /// Prompt tokens not cached, and cached.
    input: u64,
    cached: u64,
    /// The answer, a word a token.
    words: Vec<&'static str>,
    stream: bool,
}

impl Ask {
    /// Reads `body` (`None` if it is not JSON); `ceiling` is where the API puts its limit.
    fn read(body: &[u8], ceiling: &[&str], model: Option<&str>) -> Option<Ask> {
        let request = serde_json::from_slice::<serde_json::Value>(body).ok()?;
        let json = tollgate::key::RequestJson::read(body, &[]);
        let prompt = json.prompt_tokens();
        let cached = if String::from_utf8_lossy(body).contains("cached:") {
            prompt
        } else {
            0
        };
        let output = ceiling
            .iter()
            .find_map(|pointer| request.pointer(pointer)?.as_u64())
            .unwrap_or(16)
            .min(100_000);
        Some(Ask {
            model: model
                .or(request["model"].as_str())
                .unwrap_or("tollgate-demo")
                .to_owned(),
            input: prompt - cached,
            cached,
            words: (0..output)
                .map(|i| REPLY[i as usize % REPLY.len()])
                .collect(),
            stream: request["stream"].as_bool() == Some(true),
        })
    }

    fn output(&self) -> u64 {
        self.words.len() as u64
    }

    fn text(&self) -> String {
        self.words.concat()
    }

    /// The answer in pieces of eight words.
    fn pieces(&self) -> Vec<String> {
        self.words.chunks(8).map(<[&str]>::concat).collect()
    }
}

fn not_json() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        http::StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": { "message": "the body is not JSON", "type": "invalid_request_error" } })),
    )
        .into_response()
}

/// Server-sent events, one a frame.
fn events(events: Vec<String>) -> axum::response::Response {
    use axum::response::IntoResponse as _;
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

/// `data: {json}` and, if named, `event: NAME` before it.
fn event(name: Option<&str>, data: &serde_json::Value) -> String {
    match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// `POST /v1/chat/completions`, as OpenAI's Chat Completions API answers.
async fn chat_completions(body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some(ask) = Ask::read(&body, &["/max_completion_tokens", "/max_tokens"], None) else {
        return not_json();
    };
    let prompt = ask.input + ask.cached;
    let usage = serde_json::json!({
        "prompt_tokens": prompt,
        "completion_tokens": ask.output(),
        "total_tokens": prompt + ask.output(),
        "prompt_tokens_details": { "cached_tokens": ask.cached },
    });
    if !ask.stream {
        return Json(serde_json::json!({
            "id": "chatcmpl-demo",
            "object": "chat.completion",
            "model": ask.model,
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": ask.text() }, "finish_reason": "stop" }],
            "usage": usage,
        }))
        .into_response();
    }
    // A chunk a piece, then one with the usage, then [DONE] (as OpenAI answers with
    // stream_options.include_usage).
    let chunk = |choices: serde_json::Value, usage: serde_json::Value| {
        event(
            None,
            &serde_json::json!({
                "id": "chatcmpl-demo",
                "object": "chat.completion.chunk",
                "model": ask.model,
                "choices": choices,
                "usage": usage,
            }),
        )
    };
    let mut out: Vec<String> = ask
        .pieces()
        .into_iter()
        .map(|piece| {
            chunk(
                serde_json::json!([{ "index": 0, "delta": { "content": piece } }]),
                serde_json::Value::Null,
            )
        })
        .collect();
    out.push(chunk(serde_json::json!([]), usage));
    out.push("data: [DONE]\n\n".to_owned());
    events(out)
}

/// `POST /v1/responses`, as OpenAI's Responses API answers.
async fn responses(body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some(ask) = Ask::read(&body, &["/max_output_tokens"], None) else {
        return not_json();
    };
    let prompt = ask.input + ask.cached;
    let response = serde_json::json!({
        "id": "resp-demo",
        "object": "response",
        "status": "completed",
        "model": ask.model,
        "output": [{ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": ask.text() }] }],
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": { "cached_tokens": ask.cached },
            "output_tokens": ask.output(),
            "total_tokens": prompt + ask.output(),
        },
    });
    if !ask.stream {
        return Json(response).into_response();
    }
    let mut out: Vec<String> = ask
        .pieces()
        .into_iter()
        .map(|piece| {
            event(
                Some("response.output_text.delta"),
                &serde_json::json!({ "type": "response.output_text.delta", "delta": piece }),
            )
        })
        .collect();
    out.push(event(
        Some("response.completed"),
        &serde_json::json!({ "type": "response.completed", "response": response }),
    ));
    events(out)
}

/// `POST /v1/messages`, as Anthropic's Messages API answers: streamed, the input in
/// `message_start` and the output in the final `message_delta`.
async fn messages(body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some(ask) = Ask::read(&body, &["/max_tokens"], None) else {
        return not_json();
    };
    let usage = |output: u64| {
        serde_json::json!({
            "input_tokens": ask.input,
            "cache_read_input_tokens": ask.cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": output,
        })
    };
    if !ask.stream {
        return Json(serde_json::json!({
            "id": "msg_demo",
            "type": "message",
            "role": "assistant",
            "model": ask.model,
            "content": [{ "type": "text", "text": ask.text() }],
            "stop_reason": "end_turn",
            "usage": usage(ask.output()),
        }))
        .into_response();
    }
    let mut out = vec![event(
        Some("message_start"),
        &serde_json::json!({ "type": "message_start", "message": {
            "id": "msg_demo", "type": "message", "role": "assistant", "model": ask.model,
            "content": [], "usage": usage(1) } }),
    )];
    out.extend(ask.pieces().into_iter().map(|piece| {
        event(
            Some("content_block_delta"),
            &serde_json::json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": piece } }),
        )
    }));
    out.push(event(
        Some("message_delta"),
        &serde_json::json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": ask.output() } }),
    ));
    out.push(event(
        Some("message_stop"),
        &serde_json::json!({ "type": "message_stop" }),
    ));
    events(out)
}

/// `POST /v1beta/models/MODEL:generateContent` (or `:streamGenerateContent`, answered as
/// server-sent events), as Gemini answers: every chunk carries the usage so far.
async fn gemini(
    axum::extract::Path(call): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let (model, stream) = match call.rsplit_once(':') {
        Some((model, "generateContent")) => (model, false),
        Some((model, "streamGenerateContent")) => (model, true),
        _ => return http::StatusCode::NOT_FOUND.into_response(),
    };
    let Some(ask) = Ask::read(&body, &["/generationConfig/maxOutputTokens"], Some(model)) else {
        return not_json();
    };
    let prompt = ask.input + ask.cached;
    let chunk = |text: String, output: u64| {
        serde_json::json!({
            "candidates": [{ "content": { "role": "model", "parts": [{ "text": text }] }, "index": 0 }],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "cachedContentTokenCount": ask.cached,
                "candidatesTokenCount": output,
                "totalTokenCount": prompt + output,
            },
            "modelVersion": ask.model,
        })
    };
    if !stream {
        return Json(chunk(ask.text(), ask.output())).into_response();
    }
    let mut so_far = 0;
    let out = ask
        .words
        .chunks(8)
        .map(|piece| {
            so_far += piece.len() as u64;
            event(None, &chunk(piece.concat(), so_far))
        })
        .collect();
    events(out)
}
