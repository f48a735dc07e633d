//! The layer around a bare hyper service, no axum: peer address via `PeerAddr`.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimitLayer};
use tower::ServiceBuilder;

use crate::support::get;

#[tokio::test]
async fn works_around_a_plain_hyper_service() {
    let limits = Limits::from_toml("[limits]\n\"/\" = \"2/min\"\n").unwrap();
    let layer = RateLimitLayer::new(limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let service = ServiceBuilder::new()
                // What the docs ask hyper users to do: attach the peer address.
                .map_request(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert(PeerAddr(peer));
                    request
                })
                .layer(layer.clone())
                .service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
                });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    let first = get(address, "/", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "hello");
    assert_eq!(first.header("ratelimit"), Some("\"/\";r=1;t=30"));
    assert_eq!(get(address, "/", &[]).await.status, StatusCode::OK);
    let denied = get(address, "/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        denied
            .body
            .starts_with(r#"{"error":"rate_limited","retry_after":"#)
    );
}
