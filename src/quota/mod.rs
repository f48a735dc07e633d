//! One quota: a rate and a burst.
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
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

mod calendar;
mod rate;

pub use calendar::{Calendar, CalendarError, CalendarUnit};

pub use rate::{Rate, RateError, parse_duration};

use crate::clock::duration_nanos;

/// A rate with its burst, and the nanosecond figures the algorithms use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    rate: Rate,
    burst: NonZeroU32,
    interval: u64,
    capacity: u64,
    period: u64,
    /// `interval` as a small number, so a compact bucket can name it in 4 bytes.
    interval_id: Option<IntervalId>,
    /// Counted per calendar period rather than per `period` from the epoch (windows only).
    calendar: Option<Calendar>,
    /// A sliding window's sub-window length (ns); 0: the two-window counter.
    resolution: u64,
    /// Counts requests, one each, rather than the request's cost (a rule's `requests`
    /// beside a cost settled from the response): untouched by settlements.
    counts_requests: bool,
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
            interval_id: IntervalId::intern(interval),
            calendar: None,
            resolution: 0,
            counts_requests: false,
        })
    }

    /// The same quota counted per calendar period (`calendar = "Europe/Berlin"` on a
    /// rule): its windows are the calendar's days, weeks or months rather than periods
    /// from the epoch.
    pub fn with_calendar(self, calendar: Calendar) -> Quota {
        Quota {
            calendar: Some(calendar),
            ..self
        }
    }

    /// The same quota counted, as a sliding window, in sub-windows of `resolution` (ns;
    /// `resolution = "10s"` on a rule). 0, or the whole period, is the two-window counter.
    pub(crate) fn with_resolution(self, resolution: u64) -> Quota {
        let resolution = if resolution >= self.period {
            0
        } else {
            resolution
        };
        Quota { resolution, ..self }
    }

    /// A sliding window's sub-window length, if it is counted at a finer resolution than
    /// its period.
    pub fn resolution(&self) -> Option<Duration> {
        (self.resolution > 0).then(|| Duration::from_nanos(self.resolution))
    }

    pub(crate) fn resolution_nanos(&self) -> u64 {
        self.resolution
    }

    /// The same quota counting requests, one each, whatever a request costs (a rule's
    /// `requests`): a charge or refund settling a request's cost leaves it alone.
    pub(crate) fn counting_requests(self) -> Quota {
        Quota {
            counts_requests: true,
            ..self
        }
    }

    /// Whether it counts requests rather than their cost.
    pub fn counts_requests(&self) -> bool {
        self.counts_requests
    }

    /// The calendar the quota counts per, if any.
    pub fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// The window containing `now` (ns since the epoch): its start and length. Periods from
    /// the epoch, or the calendar's period.
    pub(crate) fn window_at(&self, now: u64) -> (u64, u64) {
        match self.calendar {
            None => (now - now % self.period, self.period),
            Some(calendar) => {
                let (start, end) = calendar.window_nanos(now);
                (start, end - start)
            }
        }
    }

    /// A caller-defined bucket's numbers (`RL.*`): `refill` tokens every `every`, at most
    /// `max`. Made on the request path from a caller's arguments, so it names no interval
    /// (see [`IntervalId`]) and its figures saturate rather than fail.
    pub(crate) fn discrete(max: NonZeroU32, refill: NonZeroU32, every: Duration) -> Quota {
        let period = duration_nanos(every).max(1);
        let interval = (period / u64::from(refill.get())).max(1);
        Quota {
            rate: Rate::unchecked(refill, every),
            burst: max,
            interval,
            capacity: interval.saturating_mul(u64::from(max.get())),
            period,
            interval_id: None,
            calendar: None,
            resolution: 0,
            counts_requests: false,
        }
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

    /// The interval's number, if the process has room to name it (see [`IntervalId`]).
    pub(crate) fn interval_id(&self) -> Option<IntervalId> {
        self.interval_id
    }
}

/// A refill interval named by a 4-byte number, the same for the life of the process.
///
/// The in-memory store keeps the most common bucket (one GCRA quota, an IPv4 client) in 24
/// bytes; the interval it was measured in is part of that state (a reload that changes the
/// rate is detected by comparing it), and 8 bytes of nanoseconds would not fit. Intervals
/// are named when a [`Quota`] is made, at configuration time, never on the request path.
/// Configurations hold a handful of distinct intervals; past [`IntervalId::MAX_NAMED`] of
/// them (a program minting quotas from untrusted input, say), new quotas get no number and
/// their buckets take the general, larger layout: nothing is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct IntervalId(u32);

/// Every interval named so far: a number is an index. Read without locking (the store
/// reads it while holding a shard); written, rarely, by copying.
static INTERVALS: LazyLock<ArcSwap<Vec<u64>>> = LazyLock::new(ArcSwap::default);
/// Serialises the writers of [`INTERVALS`].
static NAMING: Mutex<()> = Mutex::new(());

impl IntervalId {
    /// How many distinct intervals one process names.
    pub(crate) const MAX_NAMED: usize = 4096;

    /// The number for `interval`, named now if it is new; `None` once
    /// [`MAX_NAMED`](Self::MAX_NAMED) intervals have numbers.
    pub(crate) fn intern(interval: u64) -> Option<IntervalId> {
        let find = |named: &[u64]| {
            let index = named.iter().position(|&n| n == interval)?;
            Some(IntervalId(u32::try_from(index).ok()?))
        };
        if let Some(id) = find(&INTERVALS.load()) {
            return Some(id);
        }
        let _writer = NAMING.lock();
        let named = INTERVALS.load_full();
        if let Some(id) = find(&named) {
            return Some(id);
        }
        if named.len() >= Self::MAX_NAMED {
            return None;
        }
        let id = IntervalId(u32::try_from(named.len()).ok()?);
        let mut more = Vec::with_capacity(named.len() + 1);
        more.extend_from_slice(&named);
        more.push(interval);
        INTERVALS.store(Arc::new(more));
        Some(id)
    }

    /// The number itself, for packing.
    pub(crate) fn get(self) -> u32 {
        self.0
    }

    /// The id behind a packed number.
    pub(crate) fn from_raw(raw: u32) -> IntervalId {
        IntervalId(raw)
    }

    /// The interval this number names, in nanoseconds (0 for a number never handed out).
    pub(crate) fn nanos(self) -> u64 {
        INTERVALS.load().get(self.0 as usize).copied().unwrap_or(0)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} burst {}", self.rate, self.burst)
    }
}
