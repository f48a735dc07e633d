#![doc = include_str!("../README.md")]

pub mod body;
pub mod clock;
pub mod config;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod key;
pub mod reload;
pub mod response;
pub mod store;
pub mod traffic;

mod algorithm;
mod atomic_file;
pub mod concurrency;
mod decision;
mod future;
mod layer;
mod limits;
mod outcome;
mod quota;
mod service;

pub use algorithm::{Algorithm, Delay, Shaping};
pub use concurrency::{AdaptiveSettings, Concurrency};
pub use decision::Decision;
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use limits::{CallerBucket, Limits, LimitsBuilder, RequestCost, TakeOptions};
pub use quota::Quota;
pub use service::RateLimit;
