//! The built-in demo upstream: what the gateway proxies to when no upstream is configured,
//! so `cargo run --example gateway` is useful on its own.
//!
//! It answers every request with a small JSON description of what it received, including
//! the `X-Forwarded-For` the gateway added.

use std::net::SocketAddr;

use axum::Json;
use axum::Router;
use axum::extract::Request;

/// Starts the demo upstream on a free loopback port; it runs until the runtime stops.
pub async fn start() -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let app = Router::new().fallback(describe);
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
