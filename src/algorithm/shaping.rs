//! Shaping: what a token-bucket rule may do besides admit or refuse at once.
//!
//! - [`Delay`] (`on_limit = "delay"`): a request the bucket cannot admit now is admitted
//!   *later*, at the time the GCRA schedule gives it, if that is at most `max_delay` away —
//!   nginx `limit_req` without `nodelay`, Traefik's maximum delay. Its place in the schedule
//!   is taken when it is decided, so held requests leave spaced at the rate.
//! - warm-up (`warmup = "30s"`, [`super::warmup`]): Guava's SmoothWarmingUp.
//!
//! # The delay arithmetic
//!
//! A token bucket of burst `B` and emission interval `T` admits a request when the debt
//! after it (time until the bucket is full again) is at most `B·T`. With a delay, `N` of a
//! burst pass at once (`delay_after = N`, at most `B`, `B` when unset), and the request
//! waits `max(0, debt − N·T)`: the debt beyond the first `N` tokens, spent at the rate. It
//! is admitted when that wait is at most `max_delay`, i.e. when the debt is at most
//! `N·T + max_delay` — the *tolerance* the same GCRA arithmetic uses in place of `B·T`.
//! A request refused even so takes nothing, and its `Retry-After` is the time until one
//! would be admitted (held at most `max_delay`).

use std::time::Duration;

use crate::Quota;

/// `on_limit = "delay"`: hold requests beyond the burst instead of refusing them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Delay;
///
/// let delay = Delay::new(Duration::from_secs(2), Some(3));
/// assert_eq!(delay.max(), Duration::from_secs(2));
/// assert_eq!(delay.after(), Some(3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Delay {
    max: u64,
    after: Option<u32>,
}

impl Delay {
    /// Hold a request at most `max`; `after`: how many of a burst pass at once (`None`:
    /// the whole burst).
    pub fn new(max: Duration, after: Option<u32>) -> Delay {
        Delay {
            max: u64::try_from(max.as_nanos()).unwrap_or(u64::MAX),
            after,
        }
    }

    /// The longest a request is held (`max_delay`).
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max)
    }

    /// How many of a burst pass at once (`delay_after`); `None`: the burst.
    pub fn after(&self) -> Option<u32> {
        self.after
    }

    /// Nanoseconds of debt `quota` lets pass at once: `min(after, burst)` tokens.
    fn at_once(&self, quota: &Quota) -> u64 {
        let tokens = self.after.map_or(quota.burst(), |n| n.min(quota.burst()));
        u64::from(tokens).saturating_mul(quota.interval_nanos())
    }
}

/// How a token-bucket rule shapes its traffic besides refusing: a delay, a warm-up, both or
/// neither. Part of every [`CheckRequest`](crate::store::CheckRequest).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Delay, Shaping};
///
/// let shaping = Shaping::NONE
///     .with_delay(Delay::new(Duration::from_secs(1), None))
///     .with_warmup(Duration::from_secs(30));
/// assert!(shaping.delay().is_some());
/// assert_eq!(shaping.warmup(), Some(Duration::from_secs(30)));
/// assert_eq!(Shaping::NONE.warmup(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shaping {
    delay: Option<Delay>,
    /// Nanoseconds; 0: no warm-up.
    warmup: u64,
}

impl Shaping {
    /// Refuse at once, no warm-up: plain token-bucket or window behaviour.
    pub const NONE: Shaping = Shaping {
        delay: None,
        warmup: 0,
    };

    /// The same, holding requests as `delay` says.
    pub fn with_delay(mut self, delay: Delay) -> Shaping {
        self.delay = Some(delay);
        self
    }

    /// The same, warming up over `period` after idleness (zero: none).
    pub fn with_warmup(mut self, period: Duration) -> Shaping {
        self.warmup = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// The delay, if requests are held rather than refused.
    pub fn delay(&self) -> Option<Delay> {
        self.delay
    }

    /// The warm-up period, if any.
    pub fn warmup(&self) -> Option<Duration> {
        (self.warmup > 0).then(|| Duration::from_nanos(self.warmup))
    }

    pub(crate) fn warmup_nanos(&self) -> u64 {
        self.warmup
    }

    /// The debt (ns) `quota` tolerates: `burst × interval`, or with a delay the part of a
    /// burst passed at once plus `max_delay`.
    pub(crate) fn tolerance(&self, quota: &Quota) -> u64 {
        match &self.delay {
            None => quota.capacity_nanos(),
            Some(delay) => delay.at_once(quota).saturating_add(delay.max),
        }
    }

    /// How long an admitted request with `debt` after it waits under `quota`: the debt
    /// beyond what passes at once (0 without a delay).
    pub(crate) fn hold(&self, quota: &Quota, debt: u64) -> u64 {
        match &self.delay {
            None => 0,
            Some(delay) => debt.saturating_sub(delay.at_once(quota)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::quota::Rate;

    fn quota(rate: &str, burst: u32) -> Quota {
        Quota::new(
            rate.parse::<Rate>().unwrap(),
            NonZeroU32::new(burst).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_tolerance_is_what_passes_at_once_plus_max_delay() {
        let five = quota("5/s", 4);
        let none = Shaping::NONE;
        assert_eq!(none.tolerance(&five), 800_000_000);
        assert_eq!(none.hold(&five, 2_000_000_000), 0);
        let delay = Shaping::NONE.with_delay(Delay::new(Duration::from_secs(2), None));
        assert_eq!(delay.tolerance(&five), 2_800_000_000);
        assert_eq!(delay.hold(&five, 1_000_000_000), 200_000_000);
        let after = Shaping::NONE.with_delay(Delay::new(Duration::from_secs(2), Some(1)));
        assert_eq!(after.tolerance(&five), 2_200_000_000);
        assert_eq!(after.hold(&five, 800_000_000), 600_000_000);
        // delay_after above the burst is the burst.
        let above = Shaping::NONE.with_delay(Delay::new(Duration::ZERO, Some(99)));
        assert_eq!(above.tolerance(&five), 800_000_000);
    }
}
