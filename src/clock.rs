//! Time sources for deciding.
//!
//! Every decision reads the clock exactly once, and everything the response says
//! (`Retry-After`, `RateLimit`) is computed from that one reading (STYLE habit 4).
//!
//! Time is a [`Timestamp`]: nanoseconds since the UNIX epoch. An absolute timeline, rather
//! than governor's relative instants, is what lets callers pass their own timestamps
//! (replaying an event log), and lets later backends agree with a server's clock.
//! The sources themselves come from governor: [`SystemClock`] reads its quanta clock
//! (a few nanoseconds per reading) anchored to the wall clock once at construction, and
//! [`FakeClock`] wraps its `FakeRelativeClock` so tests step time instead of sleeping.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::clock::{Clock, FakeClock};
//!
//! let clock = FakeClock::new();
//! let before = clock.now();
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(clock.now().saturating_since(before), Duration::from_millis(1500));
//! ```

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::clock::{Clock as _, FakeRelativeClock, QuantaClock, QuantaInstant, Reference as _};

/// A point in time: nanoseconds since the UNIX epoch.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::Timestamp;
///
/// let t = Timestamp::from_unix_nanos(1_000);
/// assert_eq!(t + Duration::from_nanos(500), Timestamp::from_unix_nanos(1_500));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The UNIX epoch itself.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp `nanos` nanoseconds after the UNIX epoch.
    pub const fn from_unix_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// Nanoseconds since the UNIX epoch.
    pub const fn as_unix_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;

    fn add(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_nanos(rhs)))
    }
}

impl From<SystemTime> for Timestamp {
    /// Times before the epoch map to the epoch; times past the year 2554 saturate.
    fn from(time: SystemTime) -> Self {
        Timestamp(
            time.duration_since(UNIX_EPOCH)
                .map(duration_nanos)
                .unwrap_or(0),
        )
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of [`Timestamp`]s.
///
/// Implementations must be cheap to call: the layer calls [`Clock::now`] once per request.
///
/// ```
/// use tollgate::clock::{Clock, Timestamp};
///
/// #[derive(Debug)]
/// struct Frozen;
/// impl Clock for Frozen {
///     fn now(&self) -> Timestamp {
///         Timestamp::from_unix_nanos(42)
///     }
/// }
/// assert_eq!(Frozen.now().as_unix_nanos(), 42);
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The production clock: governor's quanta clock, anchored to the wall clock once.
///
/// Construct it once (construction calibrates quanta) and share it; reading it costs a few
/// nanoseconds. It never goes backwards, even if the wall clock is stepped afterwards.
///
/// ```
/// use tollgate::clock::{Clock, SystemClock};
///
/// let clock = SystemClock::new();
/// assert!(clock.now() <= clock.now());
/// ```
#[derive(Clone)]
pub struct SystemClock {
    quanta: QuantaClock,
    origin: QuantaInstant,
    origin_unix_nanos: u64,
}

impl SystemClock {
    /// A clock reading the wall time now and counting monotonically from there.
    pub fn new() -> Self {
        let quanta = QuantaClock::default();
        let origin = quanta.now();
        let origin_unix_nanos = Timestamp::from(SystemTime::now()).as_unix_nanos();
        SystemClock {
            quanta,
            origin,
            origin_unix_nanos,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl fmt::Debug for SystemClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemClock")
            .field("origin_unix_nanos", &self.origin_unix_nanos)
            .finish_non_exhaustive()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let elapsed = self.quanta.now().duration_since(self.origin).as_u64();
        Timestamp(self.origin_unix_nanos.saturating_add(elapsed))
    }
}

/// A clock that only moves when told to, for tests and benchmarks.
///
/// Clones share one time, so a test can keep a clone and step the clock a limiter uses.
/// It starts at [`FakeClock::START`], a fixed, whole-second point well after the epoch.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::{Clock, FakeClock};
///
/// let clock = FakeClock::new();
/// let shared = clock.clone();
/// shared.advance(Duration::from_secs(1));
/// assert_eq!(clock.now().saturating_since(FakeClock::START), Duration::from_secs(1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FakeClock {
    elapsed: FakeRelativeClock,
}

impl FakeClock {
    /// Where every fake clock starts: 2026-01-01T00:00:00Z.
    pub const START: Timestamp = Timestamp(1_767_225_600 * 1_000_000_000);

    /// A fake clock at [`FakeClock::START`].
    pub fn new() -> Self {
        FakeClock::default()
    }

    /// Moves this clock, and every clone of it, forward.
    pub fn advance(&self, by: Duration) {
        self.elapsed.advance(by);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        Timestamp(Self::START.0.saturating_add(self.elapsed.now().as_u64()))
    }
}
