//! [`Watch`]: whether anyone reads the traffic history, and so whether each request is
//! counted one by one or sampled ([`Sampler`]).
//!
//! Counting every admitted request into a rule's ring and the total costs two atomic
//! updates a request — about 70 instructions, a twentieth of the whole layer — for charts
//! nobody may open; a refusal also goes into the most-refused sketch under a lock (about
//! 250 more), which is what a flood of refused requests pays most for. So while no one has
//! read the history for a whole span (the page, the `/traffic` endpoint,
//! [`Traffic::report`](super::Traffic::report)), a rule counts one admitted, delayed or
//! shadow-refused request in [`SAMPLE`], as [`SAMPLE`] requests, and one refusal in
//! [`REFUSAL_SAMPLE`], as that many, in its chart and its sketch: the charts keep their
//! shape (a slot with a few hundred requests is within a few tens of percent; one with a
//! handful is noise), a client refused often stays at the top of a uniform sample of the
//! refusals, and the first read turns exact counting on for the next span.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::clock::{Timestamp, duration_nanos};

/// One request in `SAMPLE` is counted, as `SAMPLE`, while nobody reads the history.
pub(super) const SAMPLE: u32 = 64;

/// One refusal in `REFUSAL_SAMPLE` is counted, as that many, while nobody reads the
/// history: finer than admissions, as refusals are fewer and name who was refused.
pub(super) const REFUSAL_SAMPLE: u32 = 8;

/// Until when every request is counted, and since when (shared by a [`Traffic`]'s rules).
///
/// [`Traffic`]: super::Traffic
#[derive(Debug)]
pub(super) struct Watch {
    /// Nanoseconds: every request is counted while the clock is below this.
    until: AtomicU64,
    /// Nanoseconds: when the current stretch of exact counting began (`u64::MAX`: never).
    since: AtomicU64,
}

impl Watch {
    /// Nobody has read anything yet.
    pub(super) fn new() -> Watch {
        Watch {
            until: AtomicU64::new(0),
            since: AtomicU64::new(u64::MAX),
        }
    }

    /// Whether requests decided at `now` are counted one by one.
    #[inline]
    pub(super) fn watched(&self, now: Timestamp) -> bool {
        now.as_unix_nanos() < self.until.load(Relaxed)
    }

    /// Someone reads the history at `now`: every request is counted for the next `span`.
    /// Returns since when counting has been exact (`now` if it was sampling until now).
    pub(super) fn read(&self, now: Timestamp, span: Duration) -> Timestamp {
        let nanos = now.as_unix_nanos();
        if !self.watched(now) {
            self.since.store(nanos, Relaxed);
        }
        self.until
            .fetch_max(nanos.saturating_add(duration_nanos(span)), Relaxed);
        Timestamp::from_unix_nanos(self.since.load(Relaxed).min(nanos))
    }
}

/// Picks which requests a sampling rule counts: the first, then every `every`th.
#[derive(Debug, Default)]
pub(super) struct Sampler(AtomicU32);

impl Sampler {
    /// Whether to count this request (as `every` of them). Two threads racing may both
    /// skip or both count a turn: a sample, not an account, so no read-modify-write.
    #[inline]
    pub(super) fn take(&self, every: u32) -> bool {
        let turn = self.0.load(Relaxed);
        self.0.store(turn.wrapping_add(1), Relaxed);
        turn.is_multiple_of(every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPAN: Duration = Duration::from_secs(900);

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_unix_nanos(secs * 1_000_000_000)
    }

    #[test]
    fn a_read_turns_exact_counting_on_for_one_span_and_says_since_when() {
        let watch = Watch::new();
        assert!(!watch.watched(at(100)), "nobody has read anything yet");
        assert_eq!(watch.read(at(100), SPAN), at(100));
        assert!(watch.watched(at(100)) && watch.watched(at(999)));
        // A later read within the span extends it and keeps the start.
        assert_eq!(watch.read(at(900), SPAN), at(100));
        assert!(watch.watched(at(1_799)));
        assert!(!watch.watched(at(1_800)), "a span after the last read");
        // Read again after a lapse: exact from then.
        assert_eq!(watch.read(at(5_000), SPAN), at(5_000));
    }

    #[test]
    fn the_sampler_takes_the_first_request_then_one_in_sample() {
        let sampler = Sampler::default();
        let taken: Vec<usize> = (0..3 * SAMPLE as usize)
            .filter(|_| sampler.take(SAMPLE))
            .collect();
        assert_eq!(taken, [0, SAMPLE as usize, 2 * SAMPLE as usize]);
    }
}
