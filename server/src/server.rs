//! Serving an axum [`Router`] over HTTP/1.1 on a bound listener, for the gateway's HTTP
//! front ends (the proxy and the admin listener): hyper's header read timeout, the peer
//! address as axum's `ConnectInfo`, TLS when the listener has it (the handshake done on the
//! connection's own task, within the same timeout), and a graceful end when shutdown is
//! asked.
//!
//! Not `axum::serve`: it sets no timer, so hyper enforces no header read timeout and a
//! client that never finishes its headers holds a connection forever.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header;
use tokio::net::TcpListener;

use super::tls::TlsAcceptor;

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and waits for
/// the connections' requests in flight to finish. `name` labels the listener in logs.
pub(crate) async fn serve_http(
    listener: TcpListener,
    app: Router,
    name: &'static str,
    header_read_timeout: Duration,
    tls: Option<Arc<TlsAcceptor>>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: say so, breathe, go on.
                    tracing::warn!(listener = name, %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                tower::ServiceExt::oneshot(app.clone(), request.map(axum::body::Body::new))
            });
        let Some(tls) = &tls else {
            let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(listener = name, %peer, %error, "connection ended with an error");
                }
            });
            continue;
        };
        let (tls, http, watcher) = (Arc::clone(tls), http.clone(), graceful.watcher());
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(stream, header_read_timeout).await else {
                return;
            };
            let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(listener = name, %peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A small JSON error answered by the gateway itself: `{"error":"<code>"}`.
pub(crate) fn json_error(status: StatusCode, code: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{{\"error\":\"{code}\"}}"),
    )
        .into_response()
}
