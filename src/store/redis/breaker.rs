//! A circuit breaker, so an outage does not make every request wait out the timeout.
//!
//! Closed: every decision goes to Redis. After `breaker_failures` failures in a row it
//! opens: decisions skip Redis and apply `on_backend_error` at once. After
//! `breaker_cooldown`, exactly one decision probes Redis (half-open); its success closes
//! the breaker, its failure opens it for another cooldown. Recovery needs no one's help.
//!
//! Time here is the monotonic clock, not the limiter's injected one: the breaker measures
//! a real outage, not the time a request is decided at.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The breaker's state, shared by every decision.
#[derive(Debug)]
pub(super) struct Breaker {
    failures: AtomicU32,
    /// Nanoseconds since `origin` until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    origin: Instant,
    open_gauge: metrics::Gauge,
    /// The Redis Cluster slots this breaker guards (`None`: the one server).
    slots: Option<String>,
}

impl Breaker {
    /// The breaker of the one Redis server.
    pub(super) fn new() -> Breaker {
        Breaker {
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            origin: Instant::now(),
            open_gauge: metrics::gauge!("tollgate_backend_breaker_open"),
            slots: None,
        }
    }

    /// The breaker of one Redis Cluster shard: the master (and, after a failover, the
    /// replica) serving `slots` (`"0-5460"`), its gauge labelled with them.
    pub(super) fn for_slots(slots: &str) -> Breaker {
        Breaker {
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            origin: Instant::now(),
            open_gauge: metrics::gauge!("tollgate_backend_breaker_open", "slots" => slots.to_owned()),
            slots: Some(slots.to_owned()),
        }
    }

    /// The breaker's reading of the monotonic clock, to pass to its other methods (tests
    /// pass their own).
    pub(super) fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Whether this decision may try Redis. While open, only the one decision that finds
    /// the cooldown over (and claims the next one) may.
    pub(super) fn allows(&self, now: Duration, cooldown: Duration) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = nanos(now);
        if now < until {
            return false;
        }
        let next = now.saturating_add(nanos(cooldown));
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Redis answered.
    pub(super) fn succeeded(&self) {
        self.failures.store(0, Ordering::Release);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            self.open_gauge.set(0.0);
            tracing::info!(
                slots = self.slots.as_deref().unwrap_or("all"),
                "rate-limit backend answering again; breaker closed"
            );
        }
    }

    /// Redis failed; opens the breaker at the `threshold`th failure in a row.
    pub(super) fn failed(&self, now: Duration, threshold: u32, cooldown: Duration) {
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if failures >= threshold {
            let until = nanos(now).saturating_add(nanos(cooldown));
            if self.open_until.swap(until, Ordering::AcqRel) == 0 {
                self.open_gauge.set(1.0);
            }
        }
    }

    /// Whether decisions are skipping Redis right now.
    pub(super) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }
}

/// `duration` in nanoseconds, never 0 (0 means "closed").
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_probes_once_after_the_cooldown_and_closes_on_success() {
        let breaker = Breaker::new();
        let cooldown = Duration::from_millis(500);
        let at = Duration::from_secs;
        breaker.failed(at(10), 3, cooldown);
        breaker.failed(at(10), 3, cooldown);
        assert!(
            breaker.allows(at(10), cooldown),
            "two failures of three: still closed"
        );
        breaker.failed(at(10), 3, cooldown);
        assert!(breaker.is_open());
        assert!(!breaker.allows(at(10), cooldown), "open: Redis is skipped");
        let later = at(10) + cooldown;
        assert!(
            breaker.allows(later, cooldown),
            "one probe after the cooldown"
        );
        assert!(!breaker.allows(later, cooldown), "and only one");
        breaker.failed(later, 3, cooldown);
        assert!(
            !breaker.allows(later, cooldown),
            "a failed probe reopens it"
        );
        breaker.succeeded();
        assert!(!breaker.is_open());
        assert!(breaker.allows(later, cooldown));
    }
}
