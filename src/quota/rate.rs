//! The rate grammar: `N/PERIOD`.
//!
//! `PERIOD` is an optional whole multiplier followed by a unit: `s sec second ms m min minute
//! h hour d day` (plurals such as `secs`, `minutes` are accepted too). Spaces around the parts
//! are ignored. Examples: `5/10s`, `100/min`, `1/sec`, `20 / 1 s`.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::config::Rate;
//!
//! let rate: Rate = "5/10s".parse()?;
//! assert_eq!(rate.count(), 5);
//! assert_eq!(rate.period(), Duration::from_secs(10));
//! assert_eq!(rate.interval(), Duration::from_secs(2));
//! assert!("0/s".parse::<Rate>().is_err());
//! # Ok::<(), tollgate::config::RateError>(())
//! ```

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

/// `count` events per `period`, as written in config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU32,
    period: Duration,
}

/// Why a rate string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// No `/` between the count and the period.
    #[error("expected a rate like \"100/min\" or \"5/10s\", found \"{0}\"")]
    MissingSlash(String),
    /// The count is not a whole number.
    #[error("rate count \"{0}\" is not a whole number")]
    BadCount(String),
    /// The count is zero.
    #[error("rate count must be at least 1 in \"{0}\" (to exempt a route use `unlimited = true`)")]
    ZeroCount(String),
    /// The count does not fit in 32 bits.
    #[error("rate count in \"{0}\" is larger than 4294967295")]
    CountTooLarge(String),
    /// The period's multiplier is not a whole number or is zero.
    #[error("period multiplier in \"{0}\" must be a whole number of at least 1")]
    BadMultiplier(String),
    /// The period's unit is not one of the known units.
    #[error("unknown time unit \"{unit}\" in \"{rate}\" (use ms, s, m/min, h, d, w or month)")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole rate as written.
        rate: String,
    },
    /// The period is longer than this crate can count in nanoseconds.
    #[error("period in \"{0}\" is too long")]
    PeriodTooLong(String),
    /// More than one event per nanosecond.
    #[error("rate \"{0}\" is faster than one per nanosecond")]
    TooFast(String),
}

impl Rate {
    /// A rate of `count` per `period`.
    ///
    /// Returns `None` for a zero period or one shorter than `count` nanoseconds.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tollgate::config::Rate;
    ///
    /// let rate = Rate::new(NonZeroU32::new(100).unwrap(), Duration::from_secs(60)).unwrap();
    /// assert_eq!(rate.to_string(), "100/1m");
    /// ```
    pub fn new(count: NonZeroU32, period: Duration) -> Option<Rate> {
        let nanos = period.as_nanos();
        if nanos < u128::from(count.get()) || nanos > u128::from(u64::MAX) {
            return None;
        }
        Some(Rate { count, period })
    }

    /// `count` per `period` without the checks of [`Rate::new`], for numbers that only
    /// describe a caller-defined bucket.
    pub(crate) const fn unchecked(count: NonZeroU32, period: Duration) -> Rate {
        Rate { count, period }
    }

    /// Events per period.
    pub fn count(&self) -> u32 {
        self.count.get()
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Time to earn one token: `period / count`, rounded down to whole nanoseconds.
    pub fn interval(&self) -> Duration {
        self.period / self.count.get()
    }
}

impl fmt::Display for Rate {
    /// Writes the rate in canonical form, with the largest unit that divides the period.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.period.as_nanos();
        let units: [(u128, &str); 5] = [
            (86_400_000_000_000, "d"),
            (3_600_000_000_000, "h"),
            (60_000_000_000, "m"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
        ];
        for (size, unit) in units {
            if nanos.is_multiple_of(size) {
                return write!(f, "{}/{}{}", self.count, nanos / size, unit);
            }
        }
        write!(f, "{}/{}ns", self.count, nanos)
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Rate, RateError> {
        let owned = || text.trim().to_owned();
        let (count, period) = text
            .split_once('/')
            .ok_or_else(|| RateError::MissingSlash(owned()))?;
        let count = count.trim();
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RateError::BadCount(count.to_owned()));
        }
        let count: u64 = count
            .parse()
            .map_err(|_| RateError::CountTooLarge(owned()))?;
        let count = u32::try_from(count).map_err(|_| RateError::CountTooLarge(owned()))?;
        let count = NonZeroU32::new(count).ok_or_else(|| RateError::ZeroCount(owned()))?;

        let period = period.trim();
        let digits = period.bytes().take_while(u8::is_ascii_digit).count();
        let (multiplier, unit) = period.split_at(digits);
        let multiplier: u64 = if multiplier.is_empty() {
            1
        } else {
            match multiplier.parse() {
                Ok(0) | Err(_) => return Err(RateError::BadMultiplier(owned())),
                Ok(n) => n,
            }
        };
        let unit_nanos = unit_nanos(unit.trim()).ok_or_else(|| RateError::UnknownUnit {
            unit: unit.trim().to_owned(),
            rate: owned(),
        })?;
        let nanos = multiplier
            .checked_mul(unit_nanos)
            .ok_or_else(|| RateError::PeriodTooLong(owned()))?;
        Rate::new(count, Duration::from_nanos(nanos)).ok_or_else(|| RateError::TooFast(owned()))
    }
}

/// A duration written as `[N]unit` with the rate grammar's units: `30s`, `500ms`, `2m`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::config::parse_duration;
///
/// assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
/// assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_duration("soon"), None);
/// ```
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let nanos = number.checked_mul(unit_nanos(unit.trim())?)?;
    Some(Duration::from_nanos(nanos))
}

fn unit_nanos(unit: &str) -> Option<u64> {
    const SECOND: u64 = 1_000_000_000;
    Some(match unit {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * SECOND,
        "h" | "hr" | "hour" | "hours" => 3_600 * SECOND,
        "d" | "day" | "days" => 86_400 * SECOND,
        "w" | "week" | "weeks" => 7 * 86_400 * SECOND,
        // Nominal: with a rule's `calendar`, a month is the calendar's.
        "month" | "months" => 30 * 86_400 * SECOND,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (u32, Duration) {
        let rate: Rate = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        (rate.count(), rate.period())
    }

    #[test]
    fn accepts_the_documented_forms() {
        let s = Duration::from_secs;
        assert_eq!(parse("5/10s"), (5, s(10)));
        assert_eq!(parse("100/min"), (100, s(60)));
        assert_eq!(parse("1/sec"), (1, s(1)));
        assert_eq!(parse("20/s"), (20, s(1)));
        assert_eq!(parse("3/second"), (3, s(1)));
        assert_eq!(parse("7/m"), (7, s(60)));
        assert_eq!(parse("7/minute"), (7, s(60)));
        assert_eq!(parse("2/h"), (2, s(3_600)));
        assert_eq!(parse("2/hour"), (2, s(3_600)));
        assert_eq!(parse("10/d"), (10, s(86_400)));
        assert_eq!(parse("10/day"), (10, s(86_400)));
        assert_eq!(parse("10/250ms"), (10, Duration::from_millis(250)));
        assert_eq!(parse(" 20 / 1 s "), (20, s(1)));
        assert_eq!(parse("5/15minutes"), (5, s(900)));
    }

    #[test]
    fn refuses_bad_rates_with_a_reason() {
        let err = |text: &str| text.parse::<Rate>().unwrap_err().to_string();
        assert_eq!(
            err("100"),
            "expected a rate like \"100/min\" or \"5/10s\", found \"100\""
        );
        assert!(err("0/s").contains("at least 1"));
        assert!(err("-1/s").contains("not a whole number"));
        assert!(err("1.5/s").contains("not a whole number"));
        assert!(err("/s").contains("not a whole number"));
        assert!(err("5000000000/s").contains("larger than"));
        assert!(err("5/0s").contains("multiplier"));
        assert_eq!(
            err("5/fortnight"),
            "unknown time unit \"fortnight\" in \"5/fortnight\" (use ms, s, m/min, h, d, w or month)"
        );
        assert!(err("5/").contains("unknown time unit"));
        assert!(err("5/99999999999999999999d").contains("multiplier"));
        assert!(err("5/9999999999d").contains("too long"));
        assert!(err("4000000000/ms").contains("faster than one per nanosecond"));
    }

    #[test]
    fn interval_is_period_over_count() {
        let rate: Rate = "100/min".parse().unwrap();
        assert_eq!(rate.interval(), Duration::from_millis(600));
    }

    #[test]
    fn displays_canonically() {
        let show = |text: &str| text.parse::<Rate>().unwrap().to_string();
        assert_eq!(show("100/min"), "100/1m");
        assert_eq!(show("5/10s"), "5/10s");
        assert_eq!(show("5/90s"), "5/90s");
        assert_eq!(show("1/250ms"), "1/250ms");
        assert_eq!(show("1/24h"), "1/1d");
    }
}
