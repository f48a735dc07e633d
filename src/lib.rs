//! A rate limiter for HTTP services: a [`tower`] layer ([`RateLimitLayer`]) that any axum or
//! hyper service wraps with `.layer(...)`.
//!
//! Each request gets a key — its route and its client, `api/search/203.0.113.7` — and the
//! rule with the longest matching segment prefix, from TOML, decides its limit. A client
//! over budget gets a `429` with `Retry-After` and the IETF `RateLimit` headers. The rules
//! may be edited while the service runs ([`Limits::watch`]): every valid save applies
//! within a second without resetting anyone's budget; an invalid one changes nothing and
//! says why.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use tollgate::{Limits, RateLimitLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::watch(["config/limits.toml"])?;
//! let app = Router::new()
//!     .route("/api/search", get(|| async { "results" }))
//!     .layer(RateLimitLayer::new(limits).axum_body());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // Peer addresses identify clients: serve with connect info.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! Without HTTP, [`Limits`] decides keys directly — now, at a time you supply, or without
//! taking anything:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = tollgate::Limits::from_toml("[limits]\n\"reports\" = \"2/h\"\n")?;
//! assert!(limits.check("reports/tenant-7", 1).await?.allowed());
//! assert!(limits.check("reports/tenant-7", 1).await?.allowed());
//! let third = limits.check("reports/tenant-7", 1).await?;
//! assert!(!third.allowed());
//! assert_eq!(third.retry_after_secs(), 1800);
//! # Ok(()) }
//! ```
//!
//! # Where to look
//!
//! - [`Limits`]: the shared handle — decisions ([`Limits::check`], [`Limits::check_at`],
//!   [`Limits::peek`], [`Limits::check_request`], [`Limits::check_keys`]), reloads and
//!   status. Built from TOML, files or URLs with [`Limits::builder`].
//! - [`RateLimitLayer`] and [`ReadBodyLayer`]: the tower front end; [`response`] the
//!   headers and denials; [`body`] response bodies.
//! - [`config`]: the config model and its errors; [`key`]: how a request becomes a key.
//! - [`store`]: where buckets live — in memory, on disk (feature `disk`), in Redis, a
//!   Cluster or behind Sentinel (feature `redis`) — and the [`store::Store`] trait.
//! - [`reload`]: live configuration's status and events; [`clock`]: time, injected.
//! - Feature `insight`: the console's measurements — each rule's traffic over time
//!   (`Limits::traffic`, the `traffic` module), candidate limits and suggested limits
//!   (`Limits::candidates`, `Limits::suggest`); off by default, on in the service.
//!
//! The repository's README and its `docs/` folder are the manual (keys and rules, identity,
//! configuration, stores, live configuration, how limiting works); its `server/` crate,
//! `tollgate-server`, is the same limiter as a service.

// The manual's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/using-the-layer.md")]
struct UsingTheLayerDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/rules.md")]
struct RulesDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/keys-and-identity.md")]
struct KeysAndIdentityDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/configuration.md")]
struct ConfigurationDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/stores.md")]
struct StoresDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/live-configuration.md")]
struct LiveConfigurationDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/limiting.md")]
struct LimitingDoctests;

pub mod clock;
pub mod concurrency;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
pub mod key;
pub mod middleware;
pub mod reload;
pub mod store;
#[cfg(feature = "insight")]
pub mod traffic;
#[cfg(not(feature = "insight"))]
mod traffic;

mod algorithm;
mod atomic_file;
mod decision;
mod limits;
mod quota;

pub use algorithm::{Algorithm, Delay, Shaping};
pub use concurrency::{AdaptiveSettings, Concurrency};
pub use decision::Decision;
#[cfg(feature = "insight")]
pub use limits::Suggestion;
pub use limits::{
    BucketBy, CallerBucket, DecisionFuture, KeyCheck, Limits, LimitsBuilder, RequestCost,
    Reservation, TakeOptions,
};
pub use middleware::{
    RateLimit, RateLimitLayer, ReadBody, ReadBodyLayer, ResponseFuture, body, response,
};
pub use quota::Quota;
