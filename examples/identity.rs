//! Limiting by the user an app's own auth layer established, not by address or header.
//!
//! ```sh
//! cargo run --example identity                    # listens on 127.0.0.1:3000
//! curl -i -H 'authorization: Bearer alice-token' http://127.0.0.1:3000/reports
//! for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' \
//!     -H 'authorization: Bearer alice-token' http://127.0.0.1:3000/reports; done   # 200 200 200 429
//! curl -s -o /dev/null -w '%{http_code}\n' -H 'authorization: Bearer bob-token' \
//!     http://127.0.0.1:3000/reports                                               # 200: bob's own budget
//! ```
//!
//! The auth layer (a stand-in for yours: sessions, JWTs, API keys checked against a
//! database) puts a [`ClientId`] in the request's extensions; `[client] sources =
//! ["extension", "ip"]` makes it the client. A client cannot send one: extensions are not
//! read from the wire. Requests nobody authenticated fall through to the next source, the
//! address. The auth layer runs first, so it is the outer layer: added last.
//!
//! To compute the identity from the request yourself instead (a hash of a token, a tenant
//! from a subdomain), insert the `ClientId` from any layer or `map_request` closure in the
//! same place — that is the whole extension point.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use tollgate::key::ClientId;
use tollgate::{Limits, RateLimitLayer};

const RULES: &str = r#"
[client]
sources = ["extension", "ip"]   # the user the app authenticated, else the address

[limits]
"/" = "60/min"
"reports" = "3/min"             # per user: each has three a minute
"#;

/// The app's auth: a bearer token names a user. Yours would check a session or a JWT.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .and_then(|token| match token {
            "alice-token" => Some("alice"),
            "bob-token" => Some("bob"),
            _ => None,
        });
    if let Some(user) = user {
        request.extensions_mut().insert(ClientId::new(user));
    }
    next.run(request).await
}

/// The app: the limiter inside, the auth layer around it.
fn app(limits: Limits) -> Router {
    Router::new()
        .route("/reports", get(|| async { "your reports\n" }))
        .layer(RateLimitLayer::new(limits).axum_body())
        .layer(middleware::from_fn(authenticate))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = Limits::from_toml(RULES)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    eprintln!("identity: listening on http://{}", listener.local_addr()?);
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
    use http::StatusCode;
    use tollgate::key::PeerAddr;
    use tower::ServiceExt;

    async fn status(app: &Router, token: Option<&str>, peer: &str) -> StatusCode {
        let mut request = Request::get("/reports");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let mut request = request.body(Body::empty()).unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(peer.parse().unwrap()));
        app.clone().oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn each_user_has_a_budget_of_their_own_wherever_they_come_from() {
        let app = app(Limits::from_toml(RULES).unwrap());
        // Alice from two addresses: one budget.
        for peer in ["192.0.2.1:1", "198.51.100.7:1", "192.0.2.1:2"] {
            assert_eq!(
                status(&app, Some("alice-token"), peer).await,
                StatusCode::OK
            );
        }
        assert_eq!(
            status(&app, Some("alice-token"), "203.0.113.5:1").await,
            StatusCode::TOO_MANY_REQUESTS
        );
        // Bob from alice's address: his own.
        assert_eq!(
            status(&app, Some("bob-token"), "192.0.2.1:1").await,
            StatusCode::OK
        );
        // Nobody authenticated, and a forged header changes nothing: by address.
        for _ in 0..3 {
            assert_eq!(
                status(&app, Some("forged"), "192.0.2.1:1").await,
                StatusCode::OK
            );
        }
        assert_eq!(
            status(&app, None, "192.0.2.1:1").await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(status(&app, None, "192.0.2.2:1").await, StatusCode::OK);
    }
}
