//! One quota: a rate and a burst (SPEC §3).
//!
//! A quota is what one entry of a rule's `rate` enforces: a bucket of `burst` tokens that
//! refills one token every `interval` (the rate's period divided by its count). It mirrors
//! governor's [`Quota`](governor::Quota) and converts to one, so the two can be compared
//! number for number.
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use tollgate::Quota;
//!
//! let quota = Quota::new("100/min".parse()?, NonZeroU32::new(100).unwrap()).unwrap();
//! assert_eq!(quota.interval(), Duration::from_millis(600));
//! assert_eq!(quota.window(), Duration::from_secs(60));
//! assert_eq!(quota.to_governor().replenish_interval(), quota.interval());
//! # Ok::<(), tollgate::config::RateError>(())
//! ```

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::clock::duration_nanos;
use crate::config::Rate;

/// A rate with its burst, and the nanosecond figures the algorithms use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    rate: Rate,
    burst: NonZeroU32,
    interval: u64,
    capacity: u64,
    period: u64,
}

impl Quota {
    /// `rate` with room for `burst` tokens; `None` if `burst` full intervals would not fit
    /// in 584 years of nanoseconds.
    pub fn new(rate: Rate, burst: NonZeroU32) -> Option<Quota> {
        let interval = duration_nanos(rate.interval()).max(1);
        let capacity = interval.checked_mul(u64::from(burst.get()))?;
        let period = duration_nanos(rate.period());
        Some(Quota {
            rate,
            burst,
            interval,
            capacity,
            period,
        })
    }

    /// The rate as configured.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Tokens the bucket holds when full.
    pub fn burst(&self) -> u32 {
        self.burst.get()
    }

    /// Time to earn one token.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// Time to refill a whole burst from empty: the `w` of the `RateLimit-Policy` header.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.capacity)
    }

    /// The same quota expressed for governor.
    pub fn to_governor(&self) -> governor::Quota {
        governor::Quota::with_period(self.interval())
            .unwrap_or_else(|| governor::Quota::per_second(NonZeroU32::MIN))
            .allow_burst(self.burst)
    }

    pub(crate) fn interval_nanos(&self) -> u64 {
        self.interval
    }

    pub(crate) fn capacity_nanos(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn period_nanos(&self) -> u64 {
        self.period
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} burst {}", self.rate, self.burst)
    }
}
