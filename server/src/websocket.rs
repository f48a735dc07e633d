//! WebSocket through the proxy: an HTTP/1.1 `Upgrade: websocket` request, once admitted,
//! is sent to the upstream on a connection of its own; a `101 Switching Protocols` answer
//! is passed back, and the two upgraded connections are relayed both ways until either side
//! closes — a side that stops sending is half-closed towards the other, and a relay with no
//! byte either way for the idle timeout is closed. The 101 carries an [`UpgradeSlot`], so a
//! concurrency cap counts the open socket until the relay ends, however it ends.
//!
//! The upgrade is always HTTP/1.1 (RFC 6455), over TLS to an `https://` upstream (ALPN
//! `http/1.1`, its certificate verified as the proxy's other requests are), whatever
//! `upstream_protocol` says for other requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::time::Instant;
use tollgate::body::UpgradeSlot;

use super::server::json_error;
use super::upstream::count_upstream_error;

/// How long a relayed WebSocket may carry nothing either way before it is closed.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether `headers` ask to upgrade to a WebSocket (`Upgrade: websocket`, `Connection:
/// upgrade`).
pub(crate) fn is_websocket(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("websocket"));
    if !upgrade {
        // Most requests: no `Connection` list read.
        return false;
    }
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where upgrades go: the upstream's host and port, and TLS to it for an `https://` one.
#[derive(Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Target {
    /// Plain TCP to `host:port`.
    pub(crate) fn plain(host: &str, port: u16) -> Target {
        Target {
            host: host.to_owned(),
            port,
            tls: None,
        }
    }

    /// TLS to `host:port` with `config` (its ALPN replaced by `http/1.1`), SNI `host`.
    /// `None` if `host` cannot be a TLS server name.
    pub(crate) fn tls(host: &str, port: u16, config: &rustls::ClientConfig) -> Option<Target> {
        let name = ServerName::try_from(host.to_owned()).ok()?;
        let mut config = config.clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Some(Target {
            host: host.to_owned(),
            port,
            tls: Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name)),
        })
    }

    /// `request` sent on a new connection to the target, the connection driven with
    /// upgrades on a task of its own.
    async fn send(
        &self,
        request: Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        let _ = stream.set_nodelay(true);
        match &self.tls {
            None => send_over(stream, request).await,
            Some((connector, name)) => {
                send_over(connector.connect(name.clone(), stream).await?, request).await
            }
        }
    }
}

async fn send_over<T>(
    io: T,
    request: Request<Body>,
) -> Result<http::Response<hyper::body::Incoming>, BoxError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection.with_upgrades());
    Ok(sender.send_request(request).await?)
}

/// Sends the upgrade `request` (its headers prepared for the upstream, `Upgrade` and
/// `Connection` restored here) to `target` within `timeout`, and relays the upgraded
/// connections if the upstream agrees.
pub(crate) async fn relay(
    mut request: Request<Body>,
    target: &Target,
    timeout: Duration,
    idle: Duration,
) -> Response {
    let client_upgrade = hyper::upgrade::on(&mut request);
    request
        .headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    request
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    let mut response = match tokio::time::timeout(timeout, target.send(request)).await {
        Err(_) => {
            count_upstream_error("timeout");
            return json_error(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout");
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "websocket upstream failed");
            count_upstream_error("unavailable");
            return json_error(StatusCode::BAD_GATEWAY, "upstream_unavailable");
        }
        Ok(Ok(response)) => response,
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The upstream refused the upgrade: its answer, as any response.
        return response.map(Body::new);
    }
    let upstream_upgrade = hyper::upgrade::on(&mut response);
    let slot = UpgradeSlot::new();
    let (parts, _) = response.into_parts();
    let mut answer = Response::from_parts(parts, Body::empty());
    answer.extensions_mut().insert(slot.clone());
    tokio::spawn(async move {
        // Held until the relay ends: the request's concurrency slot, if it had one.
        let _slot = slot;
        let (Ok(client), Ok(upstream)) = tokio::join!(client_upgrade, upstream_upgrade) else {
            return;
        };
        pump(TokioIo::new(client), TokioIo::new(upstream), idle).await;
    });
    answer
}

/// Copies both ways between `a` and `b` until both directions have ended, or nothing has
/// moved either way for `idle`. A direction that ends shuts down the other side's writing.
pub(crate) async fn pump<A, B>(a: A, b: B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Send,
    B: AsyncRead + AsyncWrite + Send,
{
    let started = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    let forward = one_way(a_read, b_write, &last, started, idle);
    let backward = one_way(b_read, a_write, &last, started, idle);
    tokio::join!(forward, backward);
}

/// Copies `from` into `to` until `from` ends (then shuts `to` down) or the relay has been
/// idle for `idle` (`last`: milliseconds after `started` of the last byte either way).
async fn one_way<R: AsyncRead, W: AsyncWrite>(
    from: R,
    to: W,
    last: &AtomicU64,
    started: Instant,
    idle: Duration,
) {
    tokio::pin!(from);
    tokio::pin!(to);
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match tokio::time::timeout(idle, from.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(read)) => {
                last.store(elapsed_ms(started), Ordering::Relaxed);
                if to.write_all(&buffer[..read]).await.is_err() {
                    break;
                }
            }
            Err(_) => {
                // Quiet this way; the relay is idle only if the other way is quiet too.
                let since = elapsed_ms(started).saturating_sub(last.load(Ordering::Relaxed));
                if u128::from(since) >= idle.as_millis() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_websocket_upgrade_is_one() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert!(is_websocket(&headers(&[
            ("upgrade", "WebSocket"),
            ("connection", "keep-alive, Upgrade")
        ])));
        assert!(!is_websocket(&headers(&[("upgrade", "websocket")])));
        assert!(!is_websocket(&headers(&[
            ("upgrade", "h2c"),
            ("connection", "upgrade")
        ])));
    }

    #[tokio::test(start_paused = true)]
    async fn a_relay_carries_both_ways_half_closes_and_ends_when_idle() {
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (upstream, mut upstream_far) = tokio::io::duplex(1024);
        let relay = tokio::spawn(pump(client, upstream, Duration::from_secs(60)));
        client_far.write_all(b"ping").await.unwrap();
        let mut read = [0u8; 4];
        upstream_far.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"ping");
        // The upstream stops sending: the client sees its end, and can still send.
        upstream_far.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client_far.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        client_far.write_all(b"late").await.unwrap();
        upstream_far.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"late");
        // Then nothing either way for the idle timeout: the relay ends.
        tokio::time::sleep(Duration::from_secs(61)).await;
        tokio::time::timeout(Duration::from_secs(1), relay)
            .await
            .unwrap()
            .unwrap();
    }
}
