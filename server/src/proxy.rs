//! The reverse proxy: forwards requests to one upstream and streams the answer back.
//!
//! Method, path, query, headers, bodies and trailers pass through, streamed in both
//! directions; hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and the headers it names,
//! `Keep-Alive`, `Proxy-*`, `TE`, `Transfer-Encoding`, `Upgrade`) do not. The proxy asks the
//! upstream for trailers (`TE: trailers`) whatever the client said, so a cost in a trailer
//! is always read (SPEC §22); they are passed on to a client that asked for them too (and
//! the response's `Trailer` header only then). The
//! client's address is appended to `X-Forwarded-For`, its `Host` is passed on as
//! `X-Forwarded-Host` and the upstream gets its own `Host`. Connections to the upstream are
//! pooled, kept alive, over TLS for an `https://` upstream (its certificate verified against
//! the system's roots or `upstream_ca_file`, SNI its host). An upstream that cannot be
//! reached, or whose certificate does not verify, gives `502`; one that does not send its
//! response headers within the timeout gives `504`. With TLS on the listener
//! (`[gateway.tls]`) the proxy serves HTTPS, and says so upstream in `X-Forwarded-Proto`.
//!
//! [`serve`] is the front end: the proxy behind [`RateLimitLayer`] on a listener, until
//! shutdown. [`Proxy`] and [`handler`] are its parts, for an axum app of your own.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

use super::server::{json_error, serve_http};
pub use super::settings::UpstreamProtocol;
use super::settings::{DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_UPSTREAM_TIMEOUT};
use super::tls::{TlsAcceptor, TlsError};
use super::upstream::{Http1Pool, UPSTREAM_ERRORS, UpstreamError, count_upstream_error};
use super::websocket::{self, is_websocket};

/// The upstream sent no response head in time.
struct TimedOut;
use hyper_rustls::HttpsConnector;
use tollgate::store::Store;
use tollgate::{Limits, RateLimitLayer, ReadBodyLayer};

/// How the proxy front end forwards and serves.
///
/// ```
/// use tollgate_server::proxy::ProxyOptions;
///
/// let options = ProxyOptions::new("http://127.0.0.1:8000".parse()?);
/// assert_eq!(options.upstream_timeout.as_secs(), 30);
/// # Ok::<(), http::uri::InvalidUri>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyOptions {
    /// Where requests go: `http://` or `https://host:port[/prefix]`.
    pub upstream: Uri,
    /// How long to wait for the upstream's response headers (then `504`).
    pub upstream_timeout: Duration,
    /// How long a client has to send a request's headers (slowloris defence); also how
    /// long it has to finish a TLS handshake.
    pub header_read_timeout: Duration,
    /// How the upstream is spoken to.
    pub upstream_protocol: UpstreamProtocol,
    /// CA certificates an `https://` upstream's certificate must chain to; `None`: the
    /// system's roots.
    pub upstream_ca_file: Option<std::path::PathBuf>,
    /// TLS on the listener; `None`: plain HTTP.
    pub tls: Option<Arc<TlsAcceptor>>,
    /// Whether requests get a server span once telemetry exports (`[telemetry]` or
    /// `OTEL_*` name a collector); without it the proxy has no span layer at all.
    pub telemetry: bool,
}

impl ProxyOptions {
    /// Options forwarding to `upstream`, with the default timeouts.
    pub fn new(upstream: Uri) -> ProxyOptions {
        ProxyOptions {
            upstream,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            upstream_protocol: UpstreamProtocol::Http1,
            upstream_ca_file: None,
            tls: None,
            telemetry: false,
        }
    }
}

/// The rate-limiting reverse proxy on `listener`: every request is decided by `limits`
/// and, if admitted, forwarded to the upstream. Runs until `shutdown` completes, then stops
/// accepting and lets requests in flight finish. Fails at once, before serving, if the
/// upstream's TLS cannot be set up (an unreadable `upstream_ca_file`).
///
/// ```no_run
/// use tollgate::Limits;
/// use tollgate_server::proxy::{self, ProxyOptions};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let options = ProxyOptions::new("http://127.0.0.1:8000".parse()?);
/// proxy::serve(limits, listener, options, tollgate_server::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub async fn serve<St: Store>(
    limits: Limits<St>,
    listener: TcpListener,
    options: ProxyOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), TlsError> {
    let proxy = Proxy::from_options(&options)?;
    serve_with(proxy, limits, listener, options, shutdown).await;
    Ok(())
}

/// [`serve`] with a [`Proxy`] already made (so a caller sees its errors before it spawns).
pub async fn serve_with<St: Store>(
    proxy: Proxy,
    limits: Limits<St>,
    listener: TcpListener,
    options: ProxyOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    for kind in UPSTREAM_ERRORS {
        // Series at 0 from the start, so a rate over them is defined before the first.
        metrics::counter!("tollgate_upstream_errors_total", "kind" => kind).increment(0);
    }
    let router = Router::new().fallback(handler).with_state(Arc::new(proxy));
    // Around the router, not through `Router::layer`, which boxes each layer's service
    // again and clones it per request.
    let app = tower::ServiceBuilder::new()
        // Outside the rate limit: a request's JSON body is read (when the rules need it)
        // before it is decided.
        .layer(ReadBodyLayer::new(limits.clone()).axum_body())
        .layer(RateLimitLayer::new(limits).axum_body())
        .service(router);
    let (timeout, tls) = (options.header_read_timeout, options.tls);
    if options.telemetry {
        // Outermost: the request's server span, the decision under it.
        let app = tower::Layer::layer(&crate::telemetry::RequestSpanLayer, app);
        serve_http(listener, app, "proxy", timeout, tls, shutdown).await;
    } else {
        serve_http(listener, app, "proxy", timeout, tls, shutdown).await;
    }
}

/// Forwards requests to one upstream. Cheap to clone; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct Proxy {
    client: UpstreamClient,
    /// The upstream's `Host`.
    host: HeaderValue,
    upstream: Uri,
    timeout: Duration,
    /// `X-Forwarded-Proto`: how the client reached the proxy.
    forwarded_proto: HeaderValue,
    /// Whether the upstream is spoken to in HTTP/2.
    http2: bool,
    /// Where WebSocket upgrades go (`None`: an `https://` host that cannot be a TLS name).
    websocket: Option<Arc<websocket::Target>>,
    /// The upstream's host, as spans name it (found once: `Uri::host` searches).
    upstream_host: Box<str>,
}

/// The pooled client: for an `http://` upstream, connections of our own driven by each
/// request's task (`upstream`); for an `https://` one, hyper-util's client over rustls.
#[derive(Clone, Debug)]
enum UpstreamClient {
    Http(Arc<Http1Pool>),
    Https(Box<Client<HttpsConnector<HttpConnector>, Body>>),
    /// HTTP/2 to a plain upstream, by prior knowledge.
    H2c(Box<Client<HttpConnector, Body>>),
}

const HOP_BY_HOP_COUNT: usize = 7;
/// `Trailer` is not among them (RFC 9110 §6.6.2 keeps it end to end): it names the
/// trailer fields hyper may send after a chunked body.
const HOP_BY_HOP: [HeaderName; HOP_BY_HOP_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
];

/// What the proxy says upstream: it takes trailers (and `TE` is for this hop only).
const TE_TRAILERS: HeaderValue = HeaderValue::from_static("trailers");
const CONNECTION_TE: HeaderValue = HeaderValue::from_static("te");

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

impl Proxy {
    /// A proxy to `upstream` (`http://` or `https://host:port[/prefix]`) waiting at most
    /// `timeout` for response headers; an `https://` upstream is verified against the
    /// system's roots.
    pub fn new(upstream: Uri, timeout: Duration) -> Result<Proxy, TlsError> {
        Proxy::from_options(&ProxyOptions {
            upstream_timeout: timeout,
            ..ProxyOptions::new(upstream)
        })
    }

    /// The proxy `options` describe.
    pub fn from_options(options: &ProxyOptions) -> Result<Proxy, TlsError> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let builder = || {
            let mut builder = Client::builder(TokioExecutor::new());
            builder.pool_idle_timeout(Duration::from_secs(60));
            builder
        };
        let http2 = options.upstream_protocol == UpstreamProtocol::Http2;
        let upstream_host = options.upstream.host().unwrap_or("127.0.0.1");
        let websocket;
        let client = if options.upstream.scheme_str() == Some("https") {
            connector.enforce_http(false);
            let tls = crate::tls::client_config(options.upstream_ca_file.as_deref())?;
            let port = options.upstream.port_u16().unwrap_or(443);
            websocket = websocket::Target::tls(upstream_host, port, &tls).map(Arc::new);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*tls).clone())
                .https_only();
            let mut builder = builder();
            let connector = if http2 {
                builder.http2_only(true);
                https.enable_http2().wrap_connector(connector)
            } else {
                https.enable_http1().wrap_connector(connector)
            };
            UpstreamClient::Https(Box::new(builder.build(connector)))
        } else if http2 {
            let port = options.upstream.port_u16().unwrap_or(80);
            websocket = Some(Arc::new(websocket::Target::plain(upstream_host, port)));
            let mut builder = builder();
            builder.http2_only(true);
            UpstreamClient::H2c(Box::new(builder.build(connector)))
        } else {
            let host = upstream_host;
            let port = options.upstream.port_u16().unwrap_or(80);
            websocket = Some(Arc::new(websocket::Target::plain(host, port)));
            UpstreamClient::Http(Arc::new(Http1Pool::new(
                host,
                port,
                Duration::from_secs(60),
                options.upstream_timeout,
            )))
        };
        let host = options
            .upstream
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        Ok(Proxy {
            client,
            host,
            upstream: options.upstream.clone(),
            timeout: options.upstream_timeout,
            http2,
            websocket,
            upstream_host: upstream_host.into(),
            forwarded_proto: HeaderValue::from_static(if options.tls.is_some() {
                "https"
            } else {
                "http"
            }),
        })
    }

    /// The upstream requests go to.
    pub fn upstream(&self) -> &Uri {
        &self.upstream
    }

    /// Forwards `request` from `peer` and returns the upstream's response, or a 502/504.
    pub async fn forward(&self, request: Request, peer: Option<SocketAddr>) -> Response {
        let (mut parts, body) = request.into_parts();
        let websocket = parts.version == http::Version::HTTP_11 && is_websocket(&parts.headers);
        let Some(uri) = self.upstream_uri(&parts.uri) else {
            return json_error(StatusCode::BAD_REQUEST, "bad_request");
        };
        // HTTP/2 names the host in `:authority` (the URI), not in a `Host` header.
        let authority = parts
            .uri
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok());
        parts.uri = uri;
        // Whatever the client spoke, the upstream is spoken to in HTTP/1.1.
        parts.version = http::Version::HTTP_11;
        let original_host = parts.headers.remove(header::HOST).or(authority);
        let client_takes_trailers = accepts_trailers(&parts.headers);
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(header::TE, TE_TRAILERS);
        // HTTP/2 has no connection-specific headers: `TE: trailers` is allowed alone.
        if !self.http2 {
            parts.headers.insert(header::CONNECTION, CONNECTION_TE);
        }
        if let Some(peer) = peer {
            append_forwarded_for(&mut parts.headers, peer);
        }
        if let Some(host) = original_host {
            parts.headers.insert(X_FORWARDED_HOST, host);
        }
        parts
            .headers
            .insert(X_FORWARDED_PROTO, self.forwarded_proto.clone());
        if websocket {
            let Some(target) = &self.websocket else {
                count_upstream_error("unavailable");
                return json_error(StatusCode::BAD_GATEWAY, "upstream_unavailable");
            };
            self.origin_form(&mut parts);
            parts.headers.remove(header::TE);
            // Boxed: the relay's state is some 6 KiB, and unboxed it would make every
            // request's future that large — moved, and boxed by axum, on each request.
            return Box::pin(websocket::relay(
                Request::from_parts(parts, body),
                target,
                self.timeout,
                websocket::IDLE_TIMEOUT,
            ))
            .await;
        }
        let span = crate::telemetry::upstream_span(&parts.method, &self.upstream_host);
        if span.is_disabled() {
            return self.send(parts, body, client_takes_trailers).await;
        }
        // Telemetry on: the call is a client span, and the upstream's parent.
        crate::telemetry::inject(&span, &mut parts.headers);
        let send = self.send(parts, body, client_takes_trailers);
        let response = tracing::Instrument::instrument(send, span.clone()).await;
        crate::telemetry::record_status(&span, response.status());
        response
    }

    /// `parts` and `body`, prepared, to the upstream.
    async fn send(
        &self,
        mut parts: http::request::Parts,
        body: Body,
        client_takes_trailers: bool,
    ) -> Response {
        match &self.client {
            UpstreamClient::Http(pool) => {
                self.origin_form(&mut parts);
                // The pool bounds the wait itself (a timer per connection).
                let sent = match pool.send(Request::from_parts(parts, body)).await {
                    Ok(response) => Ok(Ok(response)),
                    Err(UpstreamError::TimedOut(_)) => Err(TimedOut),
                    Err(failure) => Ok(Err(failure)),
                };
                self.answer(sent, client_takes_trailers)
            }
            UpstreamClient::Https(client) => {
                let request = Request::from_parts(parts, body);
                self.through(client, request, client_takes_trailers).await
            }
            UpstreamClient::H2c(client) => {
                let request = Request::from_parts(parts, body);
                self.through(client, request, client_takes_trailers).await
            }
        }
    }

    /// Origin form on a connection of our own: the path and query, and `Host` set here.
    fn origin_form(&self, parts: &mut http::request::Parts) {
        parts.uri = parts
            .uri
            .path_and_query()
            .cloned()
            .map_or_else(|| Uri::from_static("/"), Uri::from);
        parts.headers.insert(header::HOST, self.host.clone());
    }

    /// `request` through hyper-util's pooled `client` (TLS, or HTTP/2), within the timeout.
    async fn through<C>(
        &self,
        client: &Client<C, Body>,
        request: Request,
        client_takes_trailers: bool,
    ) -> Response
    where
        C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
    {
        let sent = tokio::time::timeout(self.timeout, client.request(request))
            .await
            .map_err(|_| TimedOut);
        self.answer(sent, client_takes_trailers)
    }

    /// The client's response, hop-by-hop headers dropped (and `Trailer` unless the client
    /// takes trailers), or a 504 (`sent` timed out) or 502 (it failed). A body that breaks
    /// off (a reset stream, malformed trailers) is counted as it does.
    fn answer<B, E: std::fmt::Display>(
        &self,
        sent: Result<Result<http::Response<B>, E>, TimedOut>,
        client_takes_trailers: bool,
    ) -> Response
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        match sent {
            Err(TimedOut) => {
                tracing::warn!(upstream = %self.upstream, timeout = ?self.timeout, "upstream timed out");
                count_upstream_error("timeout");
                json_error(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
            }
            Ok(Err(failure)) => {
                tracing::warn!(upstream = %self.upstream, error = %failure, "upstream unreachable");
                count_upstream_error("unavailable");
                json_error(StatusCode::BAD_GATEWAY, "upstream_unavailable")
            }
            Ok(Ok(response)) => {
                let (mut parts, inner) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if !client_takes_trailers {
                    parts.headers.remove(header::TRAILER);
                }
                let inner = http_body_util::BodyExt::map_err(inner, |error| {
                    count_upstream_error("broken");
                    error
                });
                Response::from_parts(parts, Body::new(inner))
            }
        }
    }

    /// The upstream's scheme and authority, its path prefix, then the request's path and query.
    fn upstream_uri(&self, requested: &Uri) -> Option<Uri> {
        let prefix = self.upstream.path().trim_end_matches('/');
        let path_and_query = match requested.path_and_query() {
            // No prefix to add: the request's own path and query, shared, not re-parsed.
            Some(path_and_query) if prefix.is_empty() => path_and_query.clone(),
            None if prefix.is_empty() => PathAndQuery::from_static("/"),
            requested => {
                let requested = requested.map_or("/", PathAndQuery::as_str);
                let mut joined = String::with_capacity(prefix.len() + requested.len());
                joined.push_str(prefix);
                joined.push_str(requested);
                PathAndQuery::from_maybe_shared(joined).ok()?
            }
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = self.upstream.scheme().cloned();
        parts.authority = self.upstream.authority().cloned();
        parts.path_and_query = Some(path_and_query);
        Uri::from_parts(parts).ok()
    }
}

/// The axum handler: every path goes to the upstream.
pub async fn handler(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    proxy.forward(request, peer).await
}

/// Whether a request's `TE` says its client takes trailers (`TE: trailers`, RFC 9110 §10.1.4).
fn accepts_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|coding| {
            coding
                .split(';')
                .next()
                .is_some_and(|name| name.trim().eq_ignore_ascii_case("trailers"))
        })
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none of these, or only `Connection: keep-alive` (every nginx
    // response does): one pass over the names finds which are there, and only those pay a
    // hashed removal.
    let mut present = [false; HOP_BY_HOP_COUNT];
    let mut upgrade = false;
    for name in headers.keys() {
        if let Some(index) = HOP_BY_HOP.iter().position(|hop| hop == name) {
            present[index] = true;
        } else if name == header::UPGRADE {
            upgrade = true;
        }
    }
    if !upgrade && !present.contains(&true) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        // Connection options, not header names (`Keep-Alive` goes anyway, below).
        .filter(|token| {
            !token.eq_ignore_ascii_case("keep-alive") && !token.eq_ignore_ascii_case("close")
        })
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    for name in &named {
        headers.remove(name);
    }
    for (name, _) in HOP_BY_HOP
        .iter()
        .zip(present)
        .filter(|(_, present)| *present)
    {
        headers.remove(name);
    }
    if upgrade {
        headers.remove(header::UPGRADE);
    }
}

fn append_forwarded_for(headers: &mut HeaderMap, peer: SocketAddr) {
    let peer = match peer.ip().to_canonical() {
        // The common case, without the formatting machinery.
        std::net::IpAddr::V4(v4) => {
            let mut octet = itoa::Buffer::new();
            let mut printed = String::with_capacity(15);
            for (index, byte) in v4.octets().into_iter().enumerate() {
                if index > 0 {
                    printed.push('.');
                }
                printed.push_str(octet.format(byte));
            }
            printed
        }
        v6 => v6.to_string(),
    };
    let mut chain: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    let value = if chain.is_empty() {
        HeaderValue::from_maybe_shared(peer)
    } else {
        chain.push(&peer);
        HeaderValue::from_maybe_shared(chain.join(", "))
    };
    if let Ok(value) = value {
        headers.insert(X_FORWARDED_FOR, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_uris_keep_the_prefix_path_and_query() {
        let proxy = Proxy::new(
            "http://127.0.0.1:9/base/".parse().unwrap(),
            Duration::from_secs(1),
        )
        .unwrap();
        let uri = proxy
            .upstream_uri(&"/api/x?q=1&r=2".parse().unwrap())
            .unwrap();
        assert_eq!(uri, "http://127.0.0.1:9/base/api/x?q=1&r=2");
        let bare = Proxy::new(
            "http://127.0.0.1:9".parse().unwrap(),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(
            bare.upstream_uri(&"/".parse().unwrap()).unwrap(),
            "http://127.0.0.1:9/"
        );
    }

    /// axum boxes the handler's future on every request, and each await moves it: a
    /// rarely taken branch with a large state (the WebSocket relay's, ~6 KiB) must be
    /// boxed on its own, not make every request's future that large.
    #[test]
    fn a_proxied_requests_future_stays_small() {
        let proxy = Arc::new(
            Proxy::new(
                "http://127.0.0.1:9".parse().unwrap(),
                Duration::from_secs(1),
            )
            .unwrap(),
        );
        let future = handler(State(proxy), Request::new(Body::empty()));
        let size = std::mem::size_of_val(&future);
        assert!(size <= 3 * 1024, "the handler's future is {size} bytes");
    }

    #[test]
    fn messages_without_hop_by_hop_headers_are_left_alone() {
        let mut headers = HeaderMap::new();
        headers.insert("x-kept", HeaderValue::from_static("1"));
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 2);
        let mut upgrade = headers.clone();
        upgrade.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        strip_hop_by_hop(&mut upgrade);
        assert_eq!(upgrade, headers);
    }

    #[test]
    fn ipv6_peers_are_forwarded_in_their_canonical_form() {
        let mut headers = HeaderMap::new();
        append_forwarded_for(&mut headers, "[2001:db8::1]:5".parse().unwrap());
        assert_eq!(headers[X_FORWARDED_FOR], "2001:db8::1");
    }

    #[test]
    fn hop_by_hop_headers_are_dropped_including_those_named_in_connection() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(
            headers.keys().map(HeaderName::as_str).collect::<Vec<_>>(),
            ["x-kept"]
        );
    }

    #[test]
    fn every_hop_by_hop_header_goes_with_all_its_values_and_the_rest_stays() {
        let mut headers = HeaderMap::new();
        for name in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
            headers.append(name, HeaderValue::from_static("a"));
            headers.append(name, HeaderValue::from_static("b"));
        }
        headers.insert("x-kept", HeaderValue::from_static("1"));
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["host", "x-kept"]);
        let mut keep_alive = HeaderMap::new();
        keep_alive.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        keep_alive.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        strip_hop_by_hop(&mut keep_alive);
        assert_eq!(keep_alive.len(), 1, "only Connection goes");
    }

    #[test]
    fn forwarded_for_is_appended() {
        let mut headers = HeaderMap::new();
        append_forwarded_for(&mut headers, "192.0.2.1:5".parse().unwrap());
        assert_eq!(headers[X_FORWARDED_FOR], "192.0.2.1");
        headers.append(X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.1"));
        append_forwarded_for(&mut headers, "[::ffff:192.0.2.2]:5".parse().unwrap());
        assert_eq!(headers[X_FORWARDED_FOR], "192.0.2.1, 10.0.0.1, 192.0.2.2");
    }
}
