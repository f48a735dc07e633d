//! [`RateLimit`]: the service that decides, in `call`, whether a request passes.
//!
//! Rejections are responses, never errors: `Error = S::Error`, and a denied request never
//! reaches the inner service. `poll_ready` just delegates (so this works under axum, which
//! treats services as always ready — unlike tower's own `RateLimit`).
//!
//! ```
//! use std::convert::Infallible;
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use tower::{Service, ServiceExt};
//! use tollgate::{Limits, RateLimit, key::PeerAddr};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::from_toml("[limits]\n\"/\" = \"1/min\"\n")?;
//! let hello = tower::service_fn(|_: Request<()>| async {
//!     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
//! });
//! let mut service = RateLimit::new(hello, limits);
//! let request = || {
//!     let mut request = Request::new(());
//!     request.extensions_mut().insert(PeerAddr("192.0.2.1:1234".parse().unwrap()));
//!     request
//! };
//! let first = service.ready().await?.call(request()).await?;
//! assert_eq!(first.status(), StatusCode::OK);
//! let second = service.ready().await?.call(request()).await?;
//! assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(second.headers()["retry-after"], "60");
//! # Ok(()) }
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tower::Service;

#[cfg(doc)]
use super::body::ResponseBody;
use super::body::{BodyStyle, Wrapped};
use super::charge::PendingCharge;
use super::future::{Carried, ResponseFuture};
use super::outcome::Outcome;
use super::ready::{InPlace, ReadyService as _};
use super::response::{busy, refusal_for, unauthorized};
use super::trace::DecisionSpan;
use crate::key::{Invalid, Verified};
use crate::limits::{Admission, Limits, Slot};
use crate::store::{MemoryStore, Store};

/// A service behind rate limits. Made by [`RateLimitLayer`](crate::RateLimitLayer).
///
/// `K` is the [`BodyStyle`] of its responses: [`Wrapped`] (any body, answered as
/// [`ResponseBody`]) unless the layer chose another.
pub struct RateLimit<S, St = MemoryStore, K = Wrapped> {
    inner: S,
    limits: Limits<St>,
    style: PhantomData<fn() -> K>,
}

impl<S, St> RateLimit<S, St> {
    /// Wraps `inner` with `limits`; responses carry a [`ResponseBody`].
    pub fn new(inner: S, limits: Limits<St>) -> Self {
        Self::with_body_style(inner, limits)
    }
}

impl<S, St, K> RateLimit<S, St, K> {
    /// Wraps `inner` with `limits`; responses carry the body of the [`BodyStyle`] `K`.
    ///
    /// ```
    /// use tollgate::{Limits, RateLimit, body::AxumBody};
    ///
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
    /// let hello: axum::routing::MethodRouter = axum::routing::get(|| async { "hello" });
    /// let service: RateLimit<_, _, AxumBody> = RateLimit::with_body_style(hello, limits);
    /// # let _ = service;
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn with_body_style(inner: S, limits: Limits<St>) -> Self {
        RateLimit {
            inner,
            limits,
            style: PhantomData,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, St, K> Clone for RateLimit<S, St, K> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limits: self.limits.clone(),
            style: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, St, K> std::fmt::Debug for RateLimit<S, St, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Times one decision in [`SAMPLE_EVERY`] for the `tollgate_decision_seconds` histogram:
/// timing costs two clock reads, too much to pay on every request.
struct DecisionTimer(Option<std::time::Instant>);

/// One decision in this many is timed (per thread, so no shared counter is contended).
const SAMPLE_EVERY: u32 = 64;

impl DecisionTimer {
    fn sample() -> DecisionTimer {
        thread_local! {
            static COUNT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let due = COUNT.with(|count| {
            let next = count.get().wrapping_add(1);
            count.set(next);
            next % SAMPLE_EVERY == 0
        });
        DecisionTimer(due.then(std::time::Instant::now))
    }

    fn record(self) {
        if let Some(started) = self.0 {
            metrics::histogram!("tollgate_decision_seconds")
                .record(started.elapsed().as_secs_f64());
        }
    }
}

impl<S, St, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, St, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    St: Store,
    K: BodyStyle<ResBody>,
{
    type Response = Response<K::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, St, ReqBody, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let timer = DecisionTimer::sample();
        let span = DecisionSpan::start(self.limits.store().kind());
        let rules = self.limits.active();
        // Verified once, here: every source, key part and plan reads what was found.
        if let Some(verifier) = &rules.client_settings().jwt {
            let verified = verifier.verify(&request);
            if verifier.refreshes() && verified == Verified::Invalid(Invalid::UnknownSigningKey) {
                self.limits.unknown_signing_key();
            }
            request.extensions_mut().insert(verified);
        }
        let (outcome, charge, permit) = match self.limits.admit(&rules, &request, Slot::Ask) {
            Admission::Pass(permit) => (Outcome::Admit(None), None, permit),
            Admission::Check {
                index,
                mut decision,
                charge,
                permit,
                now,
                client,
            } => {
                let charge = PendingCharge::boxed(&self.limits, &rules, index, charge);
                // Stores that answer at once (the in-memory one) are settled here, in place.
                let mut cx = Context::from_waker(Waker::noop());
                // In the decision's span: a remote store's call (a Redis span) is its child.
                let first = span.in_scope(|| Pin::new(&mut decision).poll(&mut cx));
                let Poll::Ready(result) = first else {
                    // A remote store: park the request with the service made ready for it.
                    drop(client);
                    let ready = InPlace(&mut self.inner).take();
                    let carried = Carried::new(ready, request, charge, permit);
                    let rule = (arc_swap::Guard::into_inner(rules), index);
                    return ResponseFuture::deciding(decision, carried, rule, now, span);
                };
                timer.record();
                let outcome = Outcome::decided(result, &rules, index, now, &client, &span);
                drop(span);
                // A refusal drops the permit: a request refused by the rate takes no slot.
                (outcome, charge, permit)
            }
            Admission::Busy => {
                let refusal = refusal_for(busy(rules.response()), &request);
                return ResponseFuture::rejected(refusal);
            }
            Admission::Unauthorized(invalid) => {
                let refusal = refusal_for(unauthorized(invalid), &request);
                return ResponseFuture::rejected(refusal);
            }
            Admission::Queue { index, wait } => {
                // A local queue waits max_delay; a shared store's answer is bounded by its own
                // timeout, so the minute here never runs out first.
                let max_wait = rules
                    .rule(index)
                    .and_then(|rule| rule.shaping())
                    .and_then(|shaping| shaping.delay())
                    .map_or(std::time::Duration::from_secs(60), |delay| delay.max());
                let ready = InPlace(&mut self.inner).take();
                let carried = Carried::new(ready, request, None, None);
                let rule = (arc_swap::Guard::into_inner(rules), index);
                let limits = self.limits.clone();
                return ResponseFuture::queued(*wait, max_wait, carried, limits, rule);
            }
        };
        ResponseFuture::settled(outcome, InPlace(&mut self.inner), request, charge, permit)
    }
}
