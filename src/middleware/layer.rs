//! [`RateLimitLayer`]: configuration only; the work happens in [`RateLimit`].
//!
//! With axum, [`RateLimitLayer::axum_body`] keeps axum's response body type (one
//! allocation less per response).
//!
//! ```
//! use axum::{Router, routing::get};
//! use tollgate::{Limits, RateLimitLayer};
//!
//! let limits = Limits::from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limits));
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```

use std::marker::PhantomData;

use tower::Layer;

#[cfg(feature = "axum")]
use super::body::AxumBody;
use super::body::Wrapped;
#[cfg(doc)]
use super::body::{BodyStyle, ResponseBody};
use super::service::RateLimit;
use crate::limits::Limits;
use crate::store::MemoryStore;

/// Wraps a service so each request is checked against the [`Limits`] first.
///
/// Every service the layer produces (axum clones one per route and per connection) shares
/// the same `Limits`, so they all draw on one budget.
///
/// `K` is the [`BodyStyle`] of the responses: [`Wrapped`] ([`ResponseBody`], for any inner
/// body) from [`new`](Self::new), axum's own `Body` from [`axum_body`](Self::axum_body).
pub struct RateLimitLayer<St = MemoryStore, K = Wrapped> {
    limits: Limits<St>,
    style: PhantomData<fn() -> K>,
}

impl<St> RateLimitLayer<St> {
    /// A layer enforcing `limits`, for a service with any response body.
    pub fn new(limits: Limits<St>) -> Self {
        // The decision-latency histogram exists (empty) from the start, not from the first
        // sampled decision: a dashboard sees it on an idle service.
        let _registered = metrics::histogram!("tollgate_decision_seconds");
        RateLimitLayer {
            limits,
            style: PhantomData,
        }
    }
}

impl<St, K> RateLimitLayer<St, K> {
    /// The same layer answering with the body of another [`BodyStyle`].
    ///
    /// ```
    /// use tollgate::{Limits, RateLimitLayer, body::Wrapped};
    ///
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
    /// let layer: RateLimitLayer<_, Wrapped> = RateLimitLayer::new(limits).axum_body().with_body_style();
    /// # let _ = layer;
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn with_body_style<Other>(self) -> RateLimitLayer<St, Other> {
        RateLimitLayer {
            limits: self.limits,
            style: PhantomData,
        }
    }

    /// The same layer keeping axum's `Body` as the response body: the cheaper choice in
    /// front of axum handlers and routers, which otherwise box the layer's
    /// [`ResponseBody`] into a `Body` again on every response. The inner service must
    /// answer with `axum::body::Body` (what axum routes and handlers do).
    ///
    /// ```
    /// use axum::{Router, routing::get};
    /// use tollgate::{Limits, RateLimitLayer};
    ///
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
    /// let app: Router = Router::new()
    ///     .route("/", get(|| async { "hello" }))
    ///     .layer(RateLimitLayer::new(limits).axum_body());
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    #[cfg(feature = "axum")]
    pub fn axum_body(self) -> RateLimitLayer<St, AxumBody> {
        self.with_body_style()
    }
}

impl<St, K> Clone for RateLimitLayer<St, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limits: self.limits.clone(),
            style: PhantomData,
        }
    }
}

impl<St, K> std::fmt::Debug for RateLimitLayer<St, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.limits)
            .finish()
    }
}

impl<S, St, K> Layer<S> for RateLimitLayer<St, K> {
    type Service = RateLimit<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::with_body_style(inner, self.limits.clone())
    }
}
