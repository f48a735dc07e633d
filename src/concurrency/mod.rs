//! Concurrency limits: at most `N` requests in flight per bucket (`concurrency = N`), or a
//! limit that follows the upstream (`concurrency = "adaptive"`).
//!
//! - `slots`: the in-flight table and its guards ([`Slot`]), with a queue in arrival
//!   order for rules that may wait (`on_limit = "delay"`).
//! - [`adaptive`]: the gradient controller and its baseline probes, pure arithmetic over
//!   injected times.
//!
//! Rates protect against too many requests; these protect an upstream from too many at
//! once. The layer takes a slot before the rate check (a refusal by either takes nothing)
//! and gives it back when the response body has been sent or dropped.

pub mod adaptive;
mod permit;
mod slots;

pub use adaptive::{AdaptiveSettings, Controller, Sample};
pub use permit::Permit;
pub(crate) use permit::{BodyObserver, Sampler};
pub(crate) use slots::{Acquired, SlotKey, SlotWait};
pub use slots::{InFlight, Slot};

/// A rule's cap on requests in flight.
///
/// ```
/// use tollgate::Concurrency;
///
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[limits]\nupload = { concurrency = 2 }\nsearch = { rate = \"50/s\", concurrency = \"adaptive\" }\n",
/// )?;
/// assert_eq!(rules.get("upload").unwrap().concurrency(), Some(Concurrency::Fixed(2)));
/// assert!(matches!(rules.get("search").unwrap().concurrency(), Some(Concurrency::Adaptive(_))));
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Concurrency {
    /// At most this many in flight per bucket (per client, or per rule with `per = "global"`).
    Fixed(u32),
    /// A limit for the rule as a whole that follows the upstream's latency, per instance.
    Adaptive(AdaptiveSettings),
}
