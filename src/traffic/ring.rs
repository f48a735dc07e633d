//! A fixed ring of time slots, each counting what happened to requests during it.
//!
//! The ring has `span / resolution` slots (180 for 15 minutes at 5 s) and never grows:
//! a slot is reused when time comes round to it again, its counts cleared by the first
//! request to find it holding an older slot's numbers. Recording is two atomic operations
//! and never blocks, so it can sit on the request path.
//!
//! A count can be lost at the instant a slot is reused (a request counted between the
//! slot's claim and its clearing), and a request stamped older than the whole ring is not
//! counted: a chart's pixel, not an account.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::clock::Timestamp;
//! use tollgate::traffic::{Seen, TrafficRing};
//!
//! let ring = TrafficRing::new(Duration::from_secs(60), Duration::from_secs(10));
//! let now = Timestamp::from_unix_nanos(1_000_000_000_000);
//! ring.record(now, Seen::Admitted);
//! ring.record(now, Seen::Refused);
//! let series = ring.series(now);
//! assert_eq!(series.len(), 6);
//! let last = series.last().unwrap();
//! assert_eq!((last.counts.admitted, last.counts.refused), (1, 1));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::seen::Seen;

use crate::clock::{Timestamp, duration_nanos};

/// The counts of one slot (or of several added up).
///
/// ```
/// use tollgate::traffic::{Counts, Seen};
///
/// let mut counts = Counts::default();
/// counts.add(Seen::Refused, 2);
/// assert_eq!(counts.refused, 2);
/// assert_eq!(counts.total(), 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests passed (shadow-refused ones aside).
    pub admitted: u64,
    /// Requests refused.
    pub refused: u64,
    /// Requests a shadow rule would have refused.
    pub shadow_refused: u64,
    /// Requests held before passing (also counted as admitted).
    pub delayed: u64,
}

impl Counts {
    /// Adds `n` requests of kind `seen`.
    pub fn add(&mut self, seen: Seen, n: u64) {
        let field = match seen {
            Seen::Admitted => &mut self.admitted,
            Seen::Refused => &mut self.refused,
            Seen::ShadowRefused => &mut self.shadow_refused,
            Seen::Delayed => &mut self.delayed,
        };
        *field = field.saturating_add(n);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Counts) {
        self.add(Seen::Admitted, other.admitted);
        self.add(Seen::Refused, other.refused);
        self.add(Seen::ShadowRefused, other.shadow_refused);
        self.add(Seen::Delayed, other.delayed);
    }

    /// The slots' counts added up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::Timestamp;
    /// use tollgate::traffic::{Counts, Seen, TrafficRing};
    ///
    /// let ring = TrafficRing::new(Duration::from_secs(60), Duration::from_secs(10));
    /// let now = Timestamp::from_unix_nanos(1_000_000_000_000);
    /// ring.record(now, Seen::Delayed);
    /// assert_eq!(Counts::of(&ring.series(now)).delayed, 1);
    /// ```
    pub fn of(slots: &[SlotCounts]) -> Counts {
        let mut sum = Counts::default();
        for slot in slots {
            sum.merge(&slot.counts);
        }
        sum
    }

    /// Requests decided: admitted, refused and shadow-refused (delayed requests are among
    /// the admitted).
    pub fn total(&self) -> u64 {
        self.admitted
            .saturating_add(self.refused)
            .saturating_add(self.shadow_refused)
    }
}

/// One slot of a [`TrafficRing`], from `start` for the ring's resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SlotCounts {
    /// When the slot began.
    #[serde(serialize_with = "unix_seconds")]
    pub start: Timestamp,
    /// What it counted.
    pub counts: Counts,
}

pub(super) fn unix_seconds<S: serde::Serializer>(
    at: &Timestamp,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(at.as_unix_nanos() / 1_000_000_000)
}

struct Slot {
    /// The slot number (time / resolution) plus one whose counts this holds; 0: never used.
    tag: AtomicU64,
    counts: [AtomicU64; 4],
}

/// Counts per time slot over a fixed span; see the [`traffic`](crate::traffic) module docs.
pub struct TrafficRing {
    resolution: u64,
    slots: Box<[Slot]>,
}

impl TrafficRing {
    /// A ring covering `span` in slots of `resolution` (both at least a millisecond; the
    /// span rounded up to whole slots, at most 100,000 of them).
    pub fn new(span: Duration, resolution: Duration) -> TrafficRing {
        let resolution = duration_nanos(resolution).max(1_000_000);
        let count = duration_nanos(span)
            .max(1)
            .div_ceil(resolution)
            .clamp(1, 100_000);
        TrafficRing {
            resolution,
            slots: (0..count)
                .map(|_| Slot {
                    tag: AtomicU64::new(0),
                    counts: Default::default(),
                })
                .collect(),
        }
    }

    /// The slot length.
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(self.resolution)
    }

    /// Counts one request of kind `seen` decided at `now`.
    pub fn record(&self, now: Timestamp, seen: Seen) {
        self.add(now, seen, 1);
    }

    /// Counts `n` requests of kind `seen` decided at `now` (a sample standing for them).
    pub fn add(&self, now: Timestamp, seen: Seen, n: u64) {
        let number = now.as_unix_nanos() / self.resolution;
        let tag = number.saturating_add(1);
        let Some(slot) = self.slot(number) else {
            return;
        };
        let held = slot.tag.load(Ordering::Acquire);
        if held != tag {
            if held > tag {
                // Older than anything the ring still holds for this slot.
                return;
            }
            if slot
                .tag
                .compare_exchange(held, tag, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                for count in &slot.counts {
                    count.store(0, Ordering::Relaxed);
                }
            }
        }
        slot.counts[seen.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Every slot of the span ending at `now`, oldest first; slots nothing was recorded in
    /// (or whose numbers belong to another time) count zero.
    pub fn series(&self, now: Timestamp) -> Vec<SlotCounts> {
        let last = now.as_unix_nanos() / self.resolution;
        let len = self.slots.len() as u64;
        let first = last.saturating_sub(len - 1);
        (first..=last)
            .map(|number| {
                let mut counts = Counts::default();
                if let Some(slot) = self.slot(number)
                    && slot.tag.load(Ordering::Acquire) == number.saturating_add(1)
                {
                    for (seen, count) in Seen::ALL.iter().zip(&slot.counts) {
                        counts.add(*seen, count.load(Ordering::Relaxed));
                    }
                }
                SlotCounts {
                    start: Timestamp::from_unix_nanos(number.saturating_mul(self.resolution)),
                    counts,
                }
            })
            .collect()
    }

    /// The counts of the whole span ending at `now`.
    pub fn sum(&self, now: Timestamp) -> Counts {
        Counts::of(&self.series(now))
    }

    fn slot(&self, number: u64) -> Option<&Slot> {
        let len = self.slots.len() as u64;
        usize::try_from(number % len)
            .ok()
            .and_then(|index| self.slots.get(index))
    }
}

impl std::fmt::Debug for TrafficRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrafficRing")
            .field("resolution", &self.resolution())
            .field("slots", &self.slots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_ring_never_grows_and_holds_exactly_its_span() {
        let ring = TrafficRing::new(15 * 60 * SECOND, 5 * SECOND);
        assert_eq!(ring.slots.len(), 180);
        let clock = FakeClock::new();
        // Two hours of traffic, one request a second: the ring still has 180 slots, and
        // its series covers the last 15 minutes only.
        for _ in 0..7_200 {
            ring.record(clock.now(), Seen::Admitted);
            clock.advance(SECOND);
        }
        assert_eq!(ring.slots.len(), 180);
        let series = ring.series(clock.now());
        assert_eq!(series.len(), 180);
        // The newest slot has just begun and holds nothing yet; the other 179 hold 5 each.
        let admitted: Vec<u64> = series.iter().map(|s| s.counts.admitted).collect();
        assert_eq!(admitted[179], 0);
        assert!(admitted[..179].iter().all(|&n| n == 5), "{admitted:?}");
        assert_eq!(ring.sum(clock.now()).admitted, 179 * 5);
    }

    #[test]
    fn a_reused_slot_forgets_what_it_held_a_lap_ago() {
        let ring = TrafficRing::new(60 * SECOND, 10 * SECOND);
        let clock = FakeClock::new();
        for _ in 0..7 {
            ring.record(clock.now(), Seen::Refused);
        }
        // One lap later the same slot is reused: the old refusals are gone, not added to.
        clock.advance(60 * SECOND);
        ring.record(clock.now(), Seen::Admitted);
        let series = ring.series(clock.now());
        let last = series.last().copied();
        assert_eq!(
            last.map(|s| s.counts),
            Some(Counts {
                admitted: 1,
                ..Counts::default()
            })
        );
        assert_eq!(ring.sum(clock.now()).refused, 0);
    }

    #[test]
    fn after_a_quiet_spell_old_slots_read_as_zero_and_late_stamps_are_dropped() {
        let ring = TrafficRing::new(60 * SECOND, 10 * SECOND);
        let clock = FakeClock::new();
        let long_ago = clock.now();
        ring.record(long_ago, Seen::Delayed);
        clock.advance(30 * SECOND);
        ring.record(clock.now(), Seen::ShadowRefused);
        // 40 seconds of silence: the slot with the delayed request is still in the span.
        clock.advance(25 * SECOND);
        let sum = ring.sum(clock.now());
        assert_eq!((sum.delayed, sum.shadow_refused), (1, 1));
        // Ten minutes of silence: nothing is in the span, though the slots were never
        // overwritten.
        clock.advance(600 * SECOND);
        assert_eq!(ring.sum(clock.now()), Counts::default());
        // A request stamped a lap before what its slot holds neither counts nor clears it.
        ring.record(clock.now(), Seen::Admitted);
        let a_lap_before = Timestamp::from_unix_nanos(clock.now().as_unix_nanos() - 60_000_000_000);
        ring.record(a_lap_before, Seen::Refused);
        let sum = ring.sum(clock.now());
        assert_eq!((sum.admitted, sum.refused), (1, 0));
        // Slot starts are aligned to the resolution and consecutive.
        let series = ring.series(clock.now());
        let starts: Vec<u64> = series.iter().map(|s| s.start.as_unix_nanos()).collect();
        assert!(starts.windows(2).all(|w| w[1] - w[0] == 10_000_000_000));
        assert_eq!(starts[0] % 10_000_000_000, 0);
    }

    #[test]
    fn counting_from_many_threads_loses_nothing_within_a_slot() {
        let ring = std::sync::Arc::new(TrafficRing::new(60 * SECOND, 10 * SECOND));
        let now = FakeClock::new().now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ring = std::sync::Arc::clone(&ring);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        ring.record(now, Seen::Admitted);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(ring.sum(now).admitted, 40_000);
    }
}
