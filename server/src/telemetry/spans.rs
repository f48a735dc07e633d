//! The proxy's spans: a server span per request (around the rate limit, so the decision is
//! its child) continuing the client's `traceparent`, and a client span per upstream call
//! whose context goes upstream in `traceparent`. While telemetry is off no span is made
//! (one flag read), and the request passes through untouched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use opentelemetry::propagation::{Extractor, Injector};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// A span for a proxied request from `headers`' trace, or a disabled one.
fn request_span(method: &Method, path: &str, headers: &HeaderMap) -> Span {
    let span = tracing::debug_span!(
        target: "tollgate_server::otel",
        "request",
        otel.name = method.as_str(),
        otel.kind = "server",
        http.request.method = method.as_str(),
        url.path = path,
        http.response.status_code = Empty,
    );
    continue_trace(&span, headers);
    span
}

/// Makes the trace `headers` carry (`traceparent`, `tracestate`) `span`'s parent, if the
/// span is enabled and they carry one.
fn continue_trace(span: &Span, headers: &HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&Headers(headers))
    });
    let _ = span.set_parent(parent);
}

/// A span for the upstream call of `method` to `address`, or a disabled one.
pub(crate) fn upstream_span(method: &Method, address: &str) -> Span {
    if !super::started() {
        return Span::none();
    }
    tracing::debug_span!(
        target: "tollgate_server::otel",
        "upstream",
        otel.name = method.as_str(),
        otel.kind = "client",
        http.request.method = method.as_str(),
        server.address = address,
        http.response.status_code = Empty,
    )
}

/// A server span for one Redis-protocol command (`command` as the table names it), or a
/// disabled one while telemetry is off.
pub(crate) fn resp_span(command: &'static str) -> Span {
    if !super::started() {
        return Span::none();
    }
    tracing::debug_span!(
        target: "tollgate_server::otel",
        "resp",
        otel.name = command,
        otel.kind = "server",
        db.system.name = "redis",
        db.operation.name = command,
        ratelimit.outcome = Empty,
    )
}

/// A server span for one gRPC `ShouldRateLimit` call of `domain`, continuing the trace
/// Envoy sent in `metadata` (`traceparent`), or a disabled one while telemetry is off.
pub(crate) fn grpc_span(domain: &str, metadata: &HeaderMap) -> Span {
    if !super::started() {
        return Span::none();
    }
    let span = tracing::debug_span!(
        target: "tollgate_server::otel",
        "grpc",
        otel.name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
        rpc.method = "ShouldRateLimit",
        ratelimit.domain = domain,
        ratelimit.outcome = Empty,
    );
    continue_trace(&span, metadata);
    span
}

/// Puts `span`'s trace context into `headers` (`traceparent`, `tracestate`), replacing the
/// client's: the upstream's parent is the proxy's call.
pub(crate) fn inject(span: &Span, headers: &mut HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeadersMut(headers));
    });
}

/// Records a response's status on `span`.
pub(crate) fn record_status(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The layer putting each request in a server span.
///
/// ```
/// use tollgate_server::telemetry::RequestSpanLayer;
///
/// let app: axum::Router = axum::Router::new().layer(RequestSpanLayer);
/// # drop(app);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestSpanLayer;

impl<S> tower::Layer<S> for RequestSpanLayer {
    type Service = RequestSpan<S>;

    fn layer(&self, inner: S) -> RequestSpan<S> {
        RequestSpan { inner }
    }
}

/// A service whose calls run in a server span (see [`RequestSpanLayer`]).
#[derive(Clone, Debug)]
pub struct RequestSpan<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for RequestSpan<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Spanned<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Spanned<S::Future> {
        if !super::started() {
            return Spanned {
                future: self.inner.call(request),
                span: None,
            };
        }
        let span = request_span(request.method(), request.uri().path(), request.headers());
        if span.is_disabled() {
            return Spanned {
                future: self.inner.call(request),
                span: None,
            };
        }
        let future = span.in_scope(|| self.inner.call(request));
        Spanned {
            future,
            span: Some(span),
        }
    }
}

pin_project_lite::pin_project! {
    /// A call's future, polled inside its span (if telemetry is on), which records the
    /// response's status.
    pub struct Spanned<F> {
        #[pin]
        future: F,
        span: Option<Span>,
    }
}

impl<F, R, E> Future for Spanned<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(span) = this.span.as_ref() else {
            return this.future.poll(cx);
        };
        let output = ready!(span.in_scope(|| this.future.poll(cx)));
        if let Ok(response) = &output {
            record_status(span, response.status());
        }
        Poll::Ready(output)
    }
}
