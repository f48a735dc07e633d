//! The tower front end: [`RateLimitLayer`] wraps any axum or hyper service in a
//! [`RateLimit`], which decides every request in `call` through [`Limits`](crate::Limits)
//! and answers a refusal itself, as a response.
//!
//! One file a job, as tower-http's middleware are: `layer` (configuration only),
//! `service` (decides in `call`; `poll_ready` just delegates), `future` (the
//! [`ResponseFuture`]: the inner call, a ready-made refusal, a decision on its way, a request
//! held for its turn or waiting for a slot), `outcome` (what a decision means for the
//! response, and the one place an outcome becomes a future's state), `body` (the response
//! body, holding a concurrency slot until it ends), `response` (the 429 and the rate-limit
//! headers).
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use http::{Request, StatusCode};
//! use tollgate::{Limits, RateLimitLayer, key::PeerAddr};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::from_toml("[limits]\n\"/\" = \"1/min\"\n")?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limits));
//! let request = || {
//!     let mut request = Request::get("/").body(Body::empty()).unwrap();
//!     request.extensions_mut().insert(PeerAddr("192.0.2.1:1234".parse().unwrap()));
//!     request
//! };
//! assert_eq!(app.clone().oneshot(request()).await?.status(), StatusCode::OK);
//! let refused = app.oneshot(request()).await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "60");
//! # Ok(()) }
//! ```

pub mod body;
mod charge;
mod figure;
mod future;
mod layer;
mod outcome;
mod read_body;
mod ready;
pub mod response;
mod service;
pub(crate) mod settle;
mod trace;
mod upgrade;
mod usage;

pub(crate) use figure::{BodyReader, Figure};
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use read_body::{
    ReadBody, ReadBodyFuture, ReadBodyLayer, ReplayBody, Replayed, RequestBodyStyle,
};
pub use service::RateLimit;
pub(crate) use usage::MAX_COUNT as MAX_USAGE_COUNT;
