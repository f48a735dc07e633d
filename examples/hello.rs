//! The smallest axum app behind tollgate.
//!
//! ```sh
//! cargo run --example hello                       # listens on 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/                  # 200, with RateLimit headers
//! for i in $(seq 45); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:3000/; done
//! ```
//!
//! Limits come from `config/limits.toml` (or the files named as arguments), and are
//! watched: edit the file while this runs and the next request sees the change.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use tollgate::{Limits, RateLimitLayer};

/// The app: two routes behind one limiter.
fn app(limits: Limits) -> Router {
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/login", get(|| async { "welcome\n" }))
        .layer(RateLimitLayer::new(limits).axum_body())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        files.push("config/limits.toml".into());
    }
    let limits = match Limits::watch(&files) {
        Ok(limits) => limits,
        Err(error) => {
            eprintln!("invalid limits:\n{error}");
            std::process::exit(1);
        }
    };
    // Say what each reload did, or why a save was refused.
    let mut reloads = limits.subscribe();
    tokio::spawn(async move {
        while reloads.changed().await.is_ok() {
            let status = reloads.borrow_and_update().clone();
            match status.last_error {
                Some(error) => eprintln!(
                    "hello: config refused, still on generation {}:\n{error}",
                    status.generation
                ),
                None => eprintln!("hello: config generation {} applied", status.generation),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    eprintln!("hello: listening on http://{}", listener.local_addr()?);
    // Peer addresses are what the limiter keys clients by.
    axum::serve(
        listener,
        app(limits).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::{Request, StatusCode};
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_login_route_is_limited_per_client() {
        let limits = Limits::from_toml("[limits]\nlogin = \"1/min\"\n").unwrap();
        let app = app(limits);
        let request = || {
            let mut request = Request::get("/login").body(Body::empty()).unwrap();
            request
                .extensions_mut()
                .insert(tollgate::key::PeerAddr("192.0.2.1:1".parse().unwrap()));
            request
        };
        assert_eq!(
            app.clone().oneshot(request()).await.unwrap().status(),
            StatusCode::OK
        );
        assert_eq!(
            app.oneshot(request()).await.unwrap().status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}
