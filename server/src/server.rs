//! Serving an axum app (a `Router`, or a tower service around one) over HTTP/1.1 and HTTP/2 on a bound listener, for the
//! gateway's HTTP front ends (the proxy and the admin listener): each connection's protocol
//! read from its first bytes (prior-knowledge h2c on plain listeners) or from ALPN (`h2` on
//! TLS ones), hyper's header read timeout (HTTP/1.1), bounded streams, header lists and
//! resets (HTTP/2), the peer address as axum's `ConnectInfo`, TLS when the listener has it
//! (the handshake done on the connection's own task, within the same timeout), and a
//! graceful end when shutdown is asked.
//!
//! Not `axum::serve`: it sets no timer, so hyper enforces no header read timeout and a
//! client that never finishes its headers holds a connection forever.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header;
use tokio::net::TcpListener;

use super::tls::TlsAcceptor;

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and waits for
/// the connections' requests in flight to finish. `name` labels the listener in logs.
pub(crate) async fn serve_http<S>(
    listener: TcpListener,
    app: S,
    name: &'static str,
    header_read_timeout: Duration,
    tls: Option<Arc<TlsAcceptor>>,
    shutdown: impl Future<Output = ()> + Send,
) where
    S: tower::Service<http::Request<Body>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let http = builder(header_read_timeout);
    for kind in CLIENT_FAULTS {
        // Series at 0 from the start, so a rate over them is defined before the first.
        metrics::counter!("tollgate_client_connection_errors_total", "listener" => name, "kind" => kind)
            .increment(0);
    }
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
                tower::ServiceExt::oneshot(app.clone(), request.map(Body::new))
            });
        let Some(tls) = &tls else {
            let connection = http
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service)
                .into_owned();
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    ended_with(name, peer, &*error);
                }
            });
            continue;
        };
        let (tls, http, watcher) = (Arc::clone(tls), http.clone(), graceful.watcher());
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(stream, header_read_timeout).await else {
                return;
            };
            let connection =
                http.serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                ended_with(name, peer, &*error);
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Logs a connection's `error` at debug and counts those the client caused in
/// `tollgate_client_connection_errors_total`: `excessive_resets` (an HTTP/2 connection
/// closed for resetting streams in a flood, or provoking resets), `protocol_error` (closed
/// for another HTTP/2 protocol violation), `header_timeout` (HTTP/1.1 headers not sent in
/// time). A client hanging up is not counted.
fn ended_with(
    name: &'static str,
    peer: std::net::SocketAddr,
    error: &(dyn std::error::Error + 'static),
) {
    tracing::debug!(listener = name, %peer, %error, "connection ended with an error");
    if let Some(kind) = client_fault(error) {
        metrics::counter!("tollgate_client_connection_errors_total", "listener" => name, "kind" => kind)
            .increment(1);
    }
}

/// The kinds [`client_fault`] tells apart.
const CLIENT_FAULTS: [&str; 3] = ["excessive_resets", "protocol_error", "header_timeout"];

/// What a connection's `error` says the client did wrong, if anything.
fn client_fault(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(http) = error.downcast_ref::<hyper::Error>()
            && http.is_timeout()
        {
            return Some("header_timeout");
        }
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            // The server's own GOAWAY, for what the client did.
            if !h2.is_go_away() || h2.is_remote() {
                return None;
            }
            return match h2.reason() {
                Some(h2::Reason::ENHANCE_YOUR_CALM) => Some("excessive_resets"),
                Some(h2::Reason::NO_ERROR) | None => None,
                Some(_) => Some("protocol_error"),
            };
        }
        cause = error.source();
    }
    None
}

/// The most streams an HTTP/2 client may have open at once on one connection.
pub(crate) const MAX_CONCURRENT_STREAMS: u32 = 256;
/// The largest header list an HTTP/2 client may send (HTTP/1.1 is bounded by hyper's
/// read buffer).
pub(crate) const MAX_HEADER_LIST: u32 = 64 * 1024;
/// Streams a client may open and reset before the server has answered them, before the
/// connection is closed (the rapid reset attack, CVE-2023-44487).
pub(crate) const MAX_PENDING_RESETS: usize = 20;
/// Streams the server may reset for a client's protocol errors before it closes the
/// connection (CVE-2019-9514-style floods, and the "MadeYouReset" variant).
pub(crate) const MAX_ERROR_RESETS: usize = 64;

/// The connection builder both protocols share.
fn builder(
    header_read_timeout: Duration,
) -> hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor> {
    let mut http =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    http.http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    http.http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_ERROR_RESETS)
        // A client that stops answering pings is gone: its streams and slots are freed.
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    http
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
