//! The shared handle and the one decision API: the active rules (behind an atomic swap),
//! the bucket store and the clock. Clones are cheap and share everything, so every clone of
//! the layer — and every front end — draws on one budget.
//!
//! Every decision goes through [`Limits`]: `check`, `check_at`, `peek` and `check_request`
//! for front ends and library users, and the layer's own request plan. The files here:
//! `builder` makes a limiter, `decide` is the decision API, `live` keeps it in step with
//! its config (through [`reload`](crate::reload)), `maintenance` sweeps idle buckets and
//! writes snapshots in the background.
//!
//! ```
//! use tollgate::Limits;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::from_toml(r#"
//!     [limits]
//!     "login" = "2/min"
//! "#)?;
//! assert!(limits.check("login/alice", 1).await?.allowed());
//! assert!(limits.check("login/alice", 1).await?.allowed());
//! assert!(!limits.check("login/alice", 1).await?.allowed());
//! assert!(limits.check("login/bob", 1).await?.allowed());
//! # Ok(()) }
//! ```

mod active;
mod builder;
mod caller;
mod concurrency;
mod decide;
mod deciding;
mod detached;
mod estimate;
mod identity;
mod live;
mod maintenance;
mod many;
mod stack;
#[cfg(feature = "insight")]
mod tuning;
#[cfg(not(feature = "insight"))]
mod untuned;
pub use many::{BucketBy, KeyCheck};

use std::sync::Arc;

use arc_swap::ArcSwap;

pub(crate) use active::Active;
pub use builder::LimitsBuilder;
pub use caller::{CallerBucket, TakeOptions};
pub(crate) use concurrency::{Entry, QueuedPermit};
pub(crate) use decide::{Admission, Charge, Slot};
pub use decide::{RequestCost, Reservation};
pub(crate) use deciding::Deciding;
pub use deciding::DecisionFuture;
pub(crate) use detached::drive_detached;
#[cfg(feature = "insight")]
pub use tuning::Suggestion;

use crate::clock::{Clock, Timestamp};
use crate::config::RuleSet;
use crate::reload::Reloader;
use crate::store::{MemoryStore, Store};
use crate::traffic::Traffic;

/// Rules, buckets and clock, shared by every clone.
pub struct Limits<St = MemoryStore> {
    shared: Arc<Shared<St>>,
}

struct Shared<St> {
    /// The active rules and their counters: one lock-free load per request.
    active: ArcSwap<Active>,
    /// Every rule's traffic over time, by rule name (a reload keeps a rule's history).
    traffic: Traffic,
    store: St,
    clock: Arc<dyn Clock>,
    /// Re-reads the config and swaps new rules in; owns the watcher, if watching, which
    /// stops with the last clone.
    reloader: Reloader,
    /// Requests in flight under concurrency caps.
    in_flight: Arc<crate::concurrency::InFlight>,
    /// Adaptive concurrency limits, by rule.
    controllers: concurrency::Controllers,
    /// When (Unix seconds) a token's unknown `kid` last fetched the key set again.
    keys_fetched: std::sync::atomic::AtomicU64,
    /// Dropping it (with the last clone) wakes and stops the sweeper.
    _sweeper: std::sync::mpsc::Sender<()>,
}

impl<St> Clone for Limits<St> {
    fn clone(&self) -> Self {
        Limits {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<St> std::fmt::Debug for Limits<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("rules", &self.shared.active.load().rules().rules().len())
            .field("clock", &self.shared.clock)
            .finish_non_exhaustive()
    }
}

impl<St: Store> Limits<St> {
    /// The active rule set (a snapshot: it stays consistent while you hold it).
    pub fn rules(&self) -> Arc<RuleSet> {
        Arc::clone(self.shared.active.load().rules())
    }

    /// The active rules with their counters, for one decision.
    pub(crate) fn active(&self) -> arc_swap::Guard<Arc<Active>> {
        self.shared.active.load()
    }

    #[cfg(feature = "insight")]
    /// Every rule's traffic over time, and the clients each refused most: what the
    /// operator's page charts.
    pub fn traffic(&self) -> &Traffic {
        &self.shared.traffic
    }

    /// The bucket store.
    pub fn store(&self) -> &St {
        &self.shared.store
    }

    /// Writes the buckets to `[store] snapshot` now (the gateway does on graceful shutdown);
    /// returns how many were written, 0 when no snapshot is configured.
    pub fn save_snapshot(&self) -> Result<usize, crate::store::SnapshotError> {
        let active = self.active();
        (self.shared.store.snapshots()).map_or(Ok(0), |store| {
            store.save_snapshot(active.store_rules(), self.now())
        })
    }

    /// The current time on this limiter's clock.
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }
}

/// `decision` named after `rule`, and marked as a shadow rule's if it is one.
fn decided_by(
    decision: crate::decision::Decision,
    rule: &crate::config::Rule,
) -> crate::decision::Decision {
    decision
        .with_rule(rule.name_arc())
        .with_shadow(rule.is_shadow())
}

/// The store's request for a bucket of `rule` — `client`'s, or with `None` its one global
/// bucket — taking `cost` at `now` in `mode`; `None` for a rule with no rate (unlimited,
/// or a concurrency cap alone).
#[inline]
pub(crate) fn rule_request<'a>(
    rule: &'a crate::config::Rule,
    client: Option<&'a crate::key::Client<'a>>,
    cost: u64,
    now: Timestamp,
    mode: crate::store::CheckMode,
) -> Option<crate::store::CheckRequest<'a>> {
    let crate::config::Limit::Limited {
        quotas,
        algorithm,
        strict,
        shaping,
        ..
    } = rule.limit()
    else {
        return None;
    };
    (!quotas.is_empty()).then_some(crate::store::CheckRequest {
        bucket: crate::store::BucketRef {
            rule: rule.id(),
            client,
        },
        quotas,
        cost,
        algorithm: *algorithm,
        strict: *strict,
        shaping,
        now,
        mode,
    })
}
