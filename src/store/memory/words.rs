//! How the general layout's words are tagged and packed: each quota's tag says what
//! measured it (a GCRA interval, or a window's period with a kind bit), a window's two
//! counts share one word, a warming bucket's words read back as its state and ramp, and a
//! caller-defined bucket's numbers come from its one quota.

use crate::Quota;
use crate::algorithm::warmup::{Ramp, Warm};
use crate::algorithm::{Algorithm, discrete, window};

/// Whether `quotas`, counted as a sliding window, need rings (some has a resolution).
pub(super) fn in_rings(algorithm: Algorithm, quotas: &[Quota]) -> bool {
    algorithm == Algorithm::SlidingWindow && quotas.iter().any(|q| q.resolution_nanos() > 0)
}

/// A warming bucket's words, read.
pub(super) fn warm_of(words: &[u64; 4]) -> (Warm, Ramp) {
    let state = Warm {
        tat: words[0],
        stored: f64::from_bits(words[1]),
    };
    (state, Ramp::new(words[2], words[3]))
}

pub(super) const SLIDING_BIT: u64 = 1 << 63;
pub(super) const FIXED_BIT: u64 = 1 << 62;
/// A fixed window counted per calendar period: its real length varies (23 to 25 hours a
/// day, 28 to 31 days and an hour a month), so the tag's period is only nominal.
pub(super) const CALENDAR_BIT: u64 = 1 << 61;
/// The tag bits that are not the period.
pub(super) const KIND_BITS: u64 = SLIDING_BIT | FIXED_BIT | CALENDAR_BIT;

pub(super) fn tag(algorithm: Algorithm, quota: &Quota) -> u64 {
    match algorithm {
        Algorithm::SlidingWindow => quota.period_nanos() | SLIDING_BIT,
        Algorithm::FixedWindow if quota.calendar().is_some() => {
            quota.period_nanos() | FIXED_BIT | CALENDAR_BIT
        }
        Algorithm::FixedWindow => quota.period_nanos() | FIXED_BIT,
        // A discrete bucket or a log keeps its numbers in its own layout; the tag is unused.
        Algorithm::Gcra | Algorithm::DiscreteRefill | Algorithm::SlidingLog => {
            quota.interval_nanos()
        }
    }
}

/// A caller-defined bucket's numbers, as its one quota carries them: `refill` per
/// `every`, at most `burst`.
pub(super) fn discrete_params(quotas: &[Quota]) -> discrete::Params {
    quotas.first().map_or(
        discrete::Params {
            max: 0,
            refill: 1,
            every: 1,
        },
        |quota| discrete::Params {
            max: u64::from(quota.burst()),
            refill: u64::from(quota.rate().count()),
            every: quota.period_nanos(),
        },
    )
}

pub(super) fn unpack(start: u64, counts: u64) -> window::Counter {
    window::Counter {
        start,
        previous: counts >> 32,
        current: counts & u64::from(u32::MAX),
    }
}

pub(super) fn pack(counter: &window::Counter) -> u64 {
    let clamp = |n: u64| n.min(u64::from(u32::MAX));
    (clamp(counter.previous) << 32) | clamp(counter.current)
}
