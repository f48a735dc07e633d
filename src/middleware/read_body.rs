//! [`ReadBodyLayer`]: reads a request's JSON body before the rate limit, when the rules
//! need it — `"json:/model"` as a key part or an `also` limit's `per`, or a rule reserving
//! an estimate (`cost = { reserve = "estimate" }`) — and forwards it unchanged.
//!
//! The body is read up to [`MAX_REQUEST_JSON`] (1 MiB), walked once into a
//! [`RequestJson`] put in the request's extensions, and handed on as the same bytes (no
//! copy) followed by whatever was not read. A longer body (by `Content-Length`, or as it
//! arrives) is forwarded as it comes, unread; so is every body while no rule needs one,
//! at the cost of one check. A body that is not JSON, too long or broken reads as absent:
//! its parts are `-` and its estimate is the rule's `max`.
//!
//! Put it outside [`RateLimitLayer`](crate::RateLimitLayer) (layers added later wrap
//! earlier ones):
//!
//! ```
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use tollgate::{Limits, RateLimitLayer, ReadBodyLayer, key::PeerAddr};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::from_toml(concat!(
//!     "[key]\nparts = [\"route\", \"json:/model\", \"client\"]\n",
//!     "[limits]\n\"chat\" = \"100/min\"\n\"chat/gpt-4o\" = \"1/min\"\n",
//! ))?;
//! let app = Router::new()
//!     .route("/chat", post(|body: String| async move { body }))
//!     .layer(RateLimitLayer::new(limits.clone()).axum_body())
//!     .layer(ReadBodyLayer::new(limits).axum_body());
//! let ask = |model: &str| {
//!     let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
//!     let mut request = Request::post("/chat").body(Body::from(body)).unwrap();
//!     request.extensions_mut().insert(PeerAddr("192.0.2.1:1234".parse().unwrap()));
//!     request
//! };
//! assert_eq!(app.clone().oneshot(ask("gpt-4o")).await?.status(), StatusCode::OK);
//! assert_eq!(app.clone().oneshot(ask("gpt-4o")).await?.status(), StatusCode::TOO_MANY_REQUESTS);
//! let other = app.oneshot(ask("gpt-4o-mini")).await?;
//! assert_eq!(other.status(), StatusCode::OK, "another model, another limit");
//! let echoed = axum::body::to_bytes(other.into_body(), 1 << 10).await?;
//! assert_eq!(echoed, r#"{"model":"gpt-4o-mini","messages":[]}"#, "forwarded unchanged");
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use crate::config::BodyNeeds;
use crate::key::{BodyProblem, MAX_REQUEST_JSON, RequestJson};
use crate::limits::Limits;
use crate::store::{MemoryStore, Store};

/// Reads a request's JSON body for the rules that need it — a `json:` key part or an
/// estimate — up to [`MAX_REQUEST_JSON`] (1 MiB), walks it once into a [`RequestJson`] in
/// the request's extensions, and forwards the same bytes. Put it outside
/// [`RateLimitLayer`](crate::RateLimitLayer); while no rule needs a body it reads none.
///
/// `K` says what body the inner service receives: [`Replayed`] (a [`ReplayBody`], any
/// body type) unless [`axum_body`](ReadBodyLayer::axum_body) chose axum's own `Body`.
pub struct ReadBodyLayer<St = MemoryStore, K = Replayed> {
    limits: Limits<St>,
    style: PhantomData<fn() -> K>,
}

impl<St> ReadBodyLayer<St> {
    /// A layer reading bodies for the rules of `limits` (the same `Limits` the rate-limit
    /// layer decides with).
    pub fn new(limits: Limits<St>) -> Self {
        ReadBodyLayer {
            limits,
            style: PhantomData,
        }
    }

    /// The same layer handing the inner service axum's `Body`, so it can sit in an axum
    /// `Router`'s `.layer(...)`.
    #[cfg(feature = "axum")]
    pub fn axum_body(self) -> ReadBodyLayer<St, super::body::AxumBody> {
        ReadBodyLayer {
            limits: self.limits,
            style: PhantomData,
        }
    }
}

impl<St, K> Clone for ReadBodyLayer<St, K> {
    fn clone(&self) -> Self {
        ReadBodyLayer {
            limits: self.limits.clone(),
            style: PhantomData,
        }
    }
}

impl<S, St, K> Layer<S> for ReadBodyLayer<St, K> {
    type Service = ReadBody<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ReadBody {
            inner,
            limits: self.limits.clone(),
            style: PhantomData,
        }
    }
}

/// What body the service inside [`ReadBody`] receives for a request body `B`.
pub trait RequestBodyStyle<B: Body> {
    /// The inner service's request body.
    type Body;

    /// A body not read: passed on as it is.
    fn unread(body: B) -> Self::Body;

    /// A body read (part or all), replayed.
    fn replayed(body: ReplayBody<B>) -> Self::Body;
}

/// The inner service receives a [`ReplayBody`], whatever the request body.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replayed;

impl<B: Body> RequestBodyStyle<B> for Replayed {
    type Body = ReplayBody<B>;

    fn unread(body: B) -> ReplayBody<B> {
        ReplayBody::unread(body)
    }

    fn replayed(body: ReplayBody<B>) -> ReplayBody<B> {
        body
    }
}

#[cfg(feature = "axum")]
impl RequestBodyStyle<axum::body::Body> for super::body::AxumBody {
    type Body = axum::body::Body;

    fn unread(body: axum::body::Body) -> axum::body::Body {
        body
    }

    fn replayed(body: ReplayBody<axum::body::Body>) -> axum::body::Body {
        axum::body::Body::new(body)
    }
}

/// The service [`ReadBodyLayer`] makes.
pub struct ReadBody<S, St = MemoryStore, K = Replayed> {
    inner: S,
    limits: Limits<St>,
    style: PhantomData<fn() -> K>,
}

impl<S: Clone, St, K> Clone for ReadBody<S, St, K> {
    fn clone(&self) -> Self {
        ReadBody {
            inner: self.inner.clone(),
            limits: self.limits.clone(),
            style: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, St, K> std::fmt::Debug for ReadBody<S, St, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, St, K, B> Service<Request<B>> for ReadBody<S, St, K>
where
    S: Service<Request<K::Body>> + Clone,
    St: Store,
    K: RequestBodyStyle<B>,
    B: Body<Data = Bytes>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ReadBodyFuture<S, B, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let needs = self.limits.active().body_needs().cloned();
        let Some(needs) = needs else {
            let future = self.inner.call(request.map(K::unread));
            return ReadBodyFuture {
                state: State::Calling { future },
            };
        };
        let declared = request
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let unread = if declared.is_some_and(|length| length > MAX_REQUEST_JSON as u64) {
            Some(BodyProblem::TooLarge)
        } else if request.body().size_hint().exact() == Some(0) {
            Some(BodyProblem::NotJson)
        } else {
            None
        };
        if let Some(problem) = unread {
            let (mut parts, body) = request.into_parts();
            parts
                .extensions
                .insert(RequestJson::unreadable(problem, &needs.pointers));
            let future = self.inner.call(Request::from_parts(parts, K::unread(body)));
            return ReadBodyFuture {
                state: State::Calling { future },
            };
        }
        // The service made ready is the one that will be called once the body is read.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        ReadBodyFuture {
            state: State::Reading {
                reading: Some(Box::new(Reading {
                    parts,
                    body: Box::pin(body),
                    frames: VecDeque::new(),
                    size: 0,
                    inner: ready,
                    needs,
                })),
            },
        }
    }
}

/// A body on its way in: the request's head, the body being read and what has come.
struct Reading<S, B> {
    parts: http::request::Parts,
    body: Pin<Box<B>>,
    frames: VecDeque<Bytes>,
    size: usize,
    inner: S,
    needs: Arc<BodyNeeds>,
}

pin_project_lite::pin_project! {
    /// The future of [`ReadBody`]: the body read (when the rules need it), then the inner
    /// service's call.
    pub struct ReadBodyFuture<S, B, K>
    where
        S: Service<Request<K::Body>>,
        K: RequestBodyStyle<B>,
        B: Body,
    {
        #[pin]
        state: State<S::Future, Reading<S, B>>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, R> {
        Reading { reading: Option<Box<R>> },
        Calling { #[pin] future: F },
    }
}

impl<S, B, K> Future for ReadBodyFuture<S, B, K>
where
    S: Service<Request<K::Body>>,
    K: RequestBodyStyle<B>,
    B: Body<Data = Bytes>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Calling { future } => return future.poll(cx),
                StateProj::Reading { reading } => {
                    let Some(read) = reading.as_mut() else {
                        // Polled after completion: a caller's bug, never reached by hyper.
                        return Poll::Pending;
                    };
                    let end = ready!(read_some(read, cx));
                    let Some(read) = reading.take() else {
                        return Poll::Pending;
                    };
                    let future = call_with::<S, B, K>(*read, end);
                    state.set(State::Calling { future });
                }
            }
        }
    }
}

/// How reading a body stopped.
enum End<E> {
    /// The whole body came (with its trailers, if any).
    Whole(Option<HeaderMap>),
    /// More than the bound: the rest is forwarded unread.
    TooLarge,
    /// The body failed.
    Failed(E),
}

/// Reads frames until the body ends, outgrows the bound or fails.
fn read_some<S, B: Body<Data = Bytes>>(
    read: &mut Reading<S, B>,
    cx: &mut Context<'_>,
) -> Poll<End<B::Error>> {
    loop {
        match ready!(read.body.as_mut().poll_frame(cx)) {
            None => return Poll::Ready(End::Whole(None)),
            Some(Err(error)) => return Poll::Ready(End::Failed(error)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    read.size += data.len();
                    read.frames.push_back(data);
                    if read.size > MAX_REQUEST_JSON {
                        return Poll::Ready(End::TooLarge);
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        return Poll::Ready(End::Whole(Some(trailers)));
                    }
                }
            },
        }
    }
}

/// Reads what came, puts it in the request's extensions and calls the inner service with
/// the body replayed.
fn call_with<S, B, K>(read: Reading<S, B>, end: End<B::Error>) -> S::Future
where
    S: Service<Request<K::Body>>,
    K: RequestBodyStyle<B>,
    B: Body<Data = Bytes>,
{
    let Reading {
        mut parts,
        body,
        frames,
        mut inner,
        needs,
        ..
    } = read;
    let pointers = &needs.pointers;
    let (json, rest) = match end {
        End::Whole(trailers) => {
            let json = match frames.as_slices() {
                ([one], []) => RequestJson::read(one, pointers),
                // Cloning `Bytes` copies a pointer, not the bytes.
                _ => {
                    RequestJson::read_chunks(&frames.iter().cloned().collect::<Vec<_>>(), pointers)
                }
            };
            (json, Rest::Ended { trailers })
        }
        End::TooLarge => (
            RequestJson::unreadable(BodyProblem::TooLarge, pointers),
            Rest::Unread { body },
        ),
        End::Failed(error) => (
            RequestJson::unreadable(BodyProblem::Broken, pointers),
            Rest::Failed { error: Some(error) },
        ),
    };
    parts.extensions.insert(json);
    let body = ReplayBody {
        read: frames,
        rest: Replay::Read { rest },
    };
    inner.call(Request::from_parts(parts, K::replayed(body)))
}

pin_project_lite::pin_project! {
    /// A request body as the service inside [`ReadBody`] receives it: what was read, in
    /// order, then the rest of the original body (or its trailers, or its error).
    pub struct ReplayBody<B: Body> {
        read: VecDeque<Bytes>,
        #[pin]
        rest: Replay<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = ReplayProj]
    enum Replay<B: Body> {
        /// Never read: the body itself.
        Direct { #[pin] body: B },
        /// Read (part or all).
        Read { rest: Rest<B> },
    }
}

enum Rest<B: Body> {
    Unread { body: Pin<Box<B>> },
    Ended { trailers: Option<HeaderMap> },
    Failed { error: Option<B::Error> },
}

impl<B: Body> ReplayBody<B> {
    /// A body passed on unread.
    pub fn unread(body: B) -> ReplayBody<B> {
        ReplayBody {
            read: VecDeque::new(),
            rest: Replay::Direct { body },
        }
    }
}

impl<B: Body + std::fmt::Debug> std::fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayBody")
            .field("read", &self.read.len())
            .finish_non_exhaustive()
    }
}

impl<B: Body<Data = Bytes>> Body for ReplayBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if let Some(data) = this.read.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match this.rest.project() {
            ReplayProj::Direct { body } => body.poll_frame(cx),
            ReplayProj::Read { rest } => match rest {
                Rest::Unread { body } => body.as_mut().poll_frame(cx),
                Rest::Ended { trailers } => {
                    Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
                }
                Rest::Failed { error } => Poll::Ready(error.take().map(Err)),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty()
            && match &self.rest {
                Replay::Direct { body } => body.is_end_stream(),
                Replay::Read { rest } => match rest {
                    Rest::Unread { body } => body.is_end_stream(),
                    Rest::Ended { trailers } => trailers.is_none(),
                    Rest::Failed { error } => error.is_none(),
                },
            }
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self.read.iter().map(|b| b.len() as u64).sum();
        let rest = match &self.rest {
            Replay::Direct { body } => body.size_hint(),
            Replay::Read { rest } => match rest {
                Rest::Unread { body } => body.size_hint(),
                Rest::Ended { .. } => SizeHint::with_exact(0),
                Rest::Failed { .. } => SizeHint::default(),
            },
        };
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(read));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(read));
        }
        hint
    }
}
