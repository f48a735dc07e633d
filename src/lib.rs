#![doc = include_str!("../README.md")]

pub mod clock;
pub mod concurrency;
pub mod config;
pub mod key;
pub mod middleware;
pub mod reload;
pub mod store;
pub mod traffic;

mod algorithm;
mod atomic_file;
mod decision;
mod limits;
mod quota;

pub use algorithm::{Algorithm, Delay, Shaping};
pub use concurrency::{AdaptiveSettings, Concurrency};
pub use decision::Decision;
pub use limits::{
    BucketBy, CallerBucket, DecisionFuture, KeyCheck, Limits, LimitsBuilder, RequestCost,
    Reservation, Suggestion, TakeOptions,
};
pub use middleware::{
    RateLimit, RateLimitLayer, ReadBody, ReadBodyLayer, ResponseFuture, body, response,
};
pub use quota::Quota;
