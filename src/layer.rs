//! [`RateLimitLayer`]: configuration only; the work happens in [`RateLimit`].
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

use tower::Layer;

use crate::limits::Limits;
use crate::service::RateLimit;
use crate::store::MemoryStore;

/// Wraps a service so each request is checked against the [`Limits`] first.
///
/// Every service the layer produces (axum clones one per route and per connection) shares
/// the same `Limits`, so they all draw on one budget.
pub struct RateLimitLayer<St = MemoryStore> {
    limits: Limits<St>,
}

impl<St> RateLimitLayer<St> {
    /// A layer enforcing `limits`.
    pub fn new(limits: Limits<St>) -> Self {
        RateLimitLayer { limits }
    }
}

impl<St> Clone for RateLimitLayer<St> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limits: self.limits.clone(),
        }
    }
}

impl<St> std::fmt::Debug for RateLimitLayer<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.limits)
            .finish()
    }
}

impl<S, St> Layer<S> for RateLimitLayer<St> {
    type Service = RateLimit<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.limits.clone())
    }
}
