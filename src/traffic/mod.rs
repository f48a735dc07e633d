//! Traffic over time, for the operator: per rule, what happened to requests over
//! the last 15 minutes at a few seconds' resolution ([`TrafficRing`]), and the clients it
//! refused most ([`WindowedTop`], a bounded space-saving sketch). Both are fixed-size,
//! whatever the traffic: a ring of slots per rule, `k` counters per third of the window.
//!
//! [`Traffic`] holds them by rule name, so a reload that keeps a rule keeps its history; each
//! [`Limits`](crate::Limits) has its own ([`Limits::traffic`](crate::Limits::traffic)), and
//! the per-rule `counters` count into it beside the metrics — every request while someone
//! reads the history, else a sample (see `TrafficReport::exact_since`);
//! at most [`Traffic::MAX_RULES`] rules are tracked (more is a config no chart helps with:
//! the rest are not charted, and count in the metrics only).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::clock::Timestamp;
//! use tollgate::key::Client;
//! use tollgate::traffic::{Seen, Traffic};
//!
//! let traffic = Traffic::new(Duration::from_secs(900), Duration::from_secs(5));
//! let now = Timestamp::from_unix_nanos(1_767_225_600_000_000_000);
//! let login = traffic.rule("login").unwrap();
//! // Nobody has read the history yet: one admission in 64 is counted, as 64, and one
//! // refusal in 8, as 8.
//! login.record(now, Seen::Admitted);
//! login.refused(now, &Client::from_segment("203.0.113.7"));
//! let report = traffic.report(now, 10);
//! assert_eq!((report.total.admitted, report.total.refused), (64, 8));
//! assert_eq!(report.rules[0].top_refused[0].client, "203.0.113.7");
//! // Reading turned exact counting on for the next 15 minutes.
//! login.record(now, Seen::Admitted);
//! assert_eq!(traffic.report(now, 10).total.admitted, 65);
//! ```

#[cfg(feature = "insight")]
mod candidates;
mod counters;
#[cfg(feature = "insight")]
mod heavy;
#[cfg(feature = "insight")]
mod history;
#[cfg(not(feature = "insight"))]
mod off;
#[cfg(feature = "insight")]
mod peaks;
#[cfg(feature = "insight")]
mod ring;
// Without `insight` the module is private: `Seen` is the counters' alone.
#[cfg_attr(not(feature = "insight"), allow(unreachable_pub))]
mod seen;
#[cfg(feature = "insight")]
mod watch;

#[cfg(feature = "insight")]
pub use candidates::{CandidateReport, CandidateTraffic, CandidateWindow};
pub(crate) use counters::{Fault, Reserves, RuleCounters};
#[cfg(feature = "insight")]
pub use heavy::{Heavy, SpaceSaving, WindowedTop};
#[cfg(feature = "insight")]
pub use history::{RuleReport, RuleTraffic, Tokens, Traffic, TrafficReport};
#[cfg(not(feature = "insight"))]
pub(crate) use off::{RuleTraffic, Traffic};
#[cfg(feature = "insight")]
pub use peaks::{PeakClient, PeakDistribution, PeakSuggestion, PeakTracker};
#[cfg(feature = "insight")]
pub use ring::{Counts, SlotCounts, TrafficRing};
#[cfg_attr(not(feature = "insight"), allow(unreachable_pub))]
pub use seen::Seen;
