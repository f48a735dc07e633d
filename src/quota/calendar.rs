//! Calendar windows: a day, a week (from Monday) or a month in an IANA time zone, for
//! quotas that count per calendar period (`rate = "10000/month"`, `calendar =
//! "Europe/Berlin"`) the way plans are sold, rather than refilling continuously.
//!
//! The time-zone rules come from jiff's built-in copy of the IANA database, so a window
//! is right across daylight-saving changes (a local day of 23 or 25 hours) and month ends
//! (28 to 31 days), on any machine, with no system time-zone data. A window is computed
//! from an instant: where the calendar period containing it starts and ends. The stores
//! count in that window as a fixed window, so the memory store and the Redis script share
//! one arithmetic and Redis needs no time-zone rules of its own.

use std::cell::Cell;
use std::fmt;
use std::sync::{Arc, LazyLock};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use parking_lot::RwLock;

/// The calendar period a quota counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CalendarUnit {
    /// From local midnight to the next.
    Day,
    /// From Monday's local midnight to the next Monday's.
    Week,
    /// From the first of the month's local midnight to the next month's.
    Month,
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
        })
    }
}

/// A calendar period in a time zone: what a calendar quota counts per.
///
/// ```
/// use tollgate::config::{Calendar, CalendarUnit};
/// use tollgate::clock::Timestamp;
///
/// let day = Calendar::new("Europe/Berlin", CalendarUnit::Day)?;
/// // 2026-03-29, the spring change: the local day is 23 hours long.
/// let noon = Timestamp::from_unix_nanos(1_774_782_000 * 1_000_000_000); // 12:00 CEST
/// let (start, end) = day.window(noon);
/// assert_eq!(end.saturating_since(start).as_secs(), 23 * 3600);
/// assert_eq!(day.to_string(), "day in Europe/Berlin");
/// # Ok::<(), tollgate::config::CalendarError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Calendar {
    unit: CalendarUnit,
    zone: ZoneId,
}

/// A time zone, by its number in the process's table of zones named so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ZoneId(u32);

/// Why a calendar cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// The IANA database has no such zone.
    #[error(
        "unknown time zone \"{name}\" (an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\")"
    )]
    UnknownZone {
        /// As given.
        name: String,
    },
}

/// A zone's IANA name and its rules.
type NamedZone = (Arc<str>, TimeZone);

/// Every zone named so far, never removed (a config names a handful).
static ZONES: LazyLock<RwLock<Vec<NamedZone>>> = LazyLock::new(|| RwLock::new(Vec::new()));

thread_local! {
    /// The window last computed on this thread: most requests fall in the same one.
    static LAST: Cell<Option<(Calendar, u64, u64)>> = const { Cell::new(None) };
}

impl Calendar {
    /// Calendar `unit`s in the IANA time zone `zone` (`"Europe/Berlin"`, `"UTC"`).
    pub fn new(zone: &str, unit: CalendarUnit) -> Result<Calendar, CalendarError> {
        let zone = zone.trim();
        let known = ZONES.read().iter().position(|(name, _)| &**name == zone);
        let index = match known {
            Some(index) => index,
            None => {
                let tz = TimeZone::get(zone).map_err(|_| CalendarError::UnknownZone {
                    name: zone.to_owned(),
                })?;
                let mut zones = ZONES.write();
                match zones.iter().position(|(name, _)| &**name == zone) {
                    Some(index) => index,
                    None => {
                        zones.push((Arc::from(zone), tz));
                        zones.len() - 1
                    }
                }
            }
        };
        Ok(Calendar {
            unit,
            zone: ZoneId(u32::try_from(index).unwrap_or(u32::MAX)),
        })
    }

    /// The period.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The time zone's IANA name.
    pub fn zone(&self) -> Arc<str> {
        ZONES
            .read()
            .get(self.zone.0 as usize)
            .map_or_else(|| Arc::from("UTC"), |(name, _)| Arc::clone(name))
    }

    /// The calendar period containing `at`: its start and the next one's.
    pub fn window(
        &self,
        at: crate::clock::Timestamp,
    ) -> (crate::clock::Timestamp, crate::clock::Timestamp) {
        let (start, end) = self.window_nanos(at.as_unix_nanos());
        (
            crate::clock::Timestamp::from_unix_nanos(start),
            crate::clock::Timestamp::from_unix_nanos(end),
        )
    }

    /// [`window`](Self::window) in nanoseconds since the epoch: what the stores count in.
    pub(crate) fn window_nanos(&self, now: u64) -> (u64, u64) {
        if let Some((calendar, start, end)) = LAST.get()
            && calendar == *self
            && (start..end).contains(&now)
        {
            return (start, end);
        }
        let (start, end) = self.compute(now);
        LAST.set(Some((*self, start, end)));
        (start, end)
    }

    fn compute(&self, now: u64) -> (u64, u64) {
        let tz = ZONES
            .read()
            .get(self.zone.0 as usize)
            .map_or(TimeZone::UTC, |(_, tz)| tz.clone());
        // A time jiff cannot represent (beyond year 9999) falls back to a UTC day.
        let fallback = {
            let day = 86_400_000_000_000;
            (now - now % day, now - now % day + day)
        };
        let Ok(instant) = jiff::Timestamp::from_nanosecond(i128::from(now)) else {
            return fallback;
        };
        let date = instant.to_zoned(tz.clone()).date();
        let (first, next) = match self.unit {
            CalendarUnit::Day => (Some(date), date.tomorrow().ok()),
            CalendarUnit::Week => {
                let monday = date
                    .checked_sub(jiff::Span::new().days(date.weekday().to_monday_zero_offset()))
                    .ok();
                (
                    monday,
                    monday.and_then(|d| d.checked_add(jiff::Span::new().days(7)).ok()),
                )
            }
            CalendarUnit::Month => {
                let first = date.first_of_month();
                (
                    Some(first),
                    first.checked_add(jiff::Span::new().months(1)).ok(),
                )
            }
        };
        let midnight = |date: Date| -> Option<u64> {
            // Local midnight, or the first instant of the day where a change skips it.
            let zoned = date.to_zoned(tz.clone()).ok()?.start_of_day().ok()?;
            u64::try_from(zoned.timestamp().as_nanosecond()).ok()
        };
        match (first.and_then(midnight), next.and_then(midnight)) {
            (Some(start), Some(end)) if start <= now && now < end => (start, end),
            _ => fallback,
        }
    }
}

impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.unit, self.zone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nanoseconds of a local date and time in `zone`.
    fn local(zone: &str, text: &str) -> u64 {
        let datetime: jiff::civil::DateTime = text.parse().unwrap();
        let zoned = datetime.to_zoned(TimeZone::get(zone).unwrap()).unwrap();
        u64::try_from(zoned.timestamp().as_nanosecond()).unwrap()
    }

    fn hours(window: (u64, u64)) -> f64 {
        (window.1 - window.0) as f64 / 3.6e12
    }

    #[test]
    fn days_run_from_local_midnight_and_change_length_with_daylight_saving() {
        for (zone, spring, autumn) in [
            ("Europe/Berlin", "2026-03-29", "2026-10-25"),
            ("America/New_York", "2026-03-08", "2026-11-01"),
        ] {
            let day = Calendar::new(zone, CalendarUnit::Day).unwrap();
            let at = |t: &str| day.window_nanos(local(zone, t));
            assert_eq!(hours(at(&format!("{spring}T12:00"))), 23.0, "{zone}");
            assert_eq!(hours(at(&format!("{autumn}T12:00"))), 25.0, "{zone}");
            assert_eq!(hours(at("2026-06-15T12:00")), 24.0, "{zone}");
            let (start, end) = at(&format!("{spring}T23:59:59"));
            assert_eq!(start, local(zone, &format!("{spring}T00:00")));
            assert_eq!(
                end,
                local(zone, &format!("{spring}T00:00")) + 23 * 3_600_000_000_000
            );
        }
    }

    #[test]
    fn months_end_where_the_calendar_says() {
        let month = Calendar::new("Europe/Berlin", CalendarUnit::Month).unwrap();
        let at = |t: &str| month.window_nanos(local("Europe/Berlin", t));
        // 31 January → 1 February, at local midnight (23:00 UTC).
        let january = at("2026-01-31T23:59:59.999");
        assert_eq!(january.1, local("Europe/Berlin", "2026-02-01T00:00"));
        assert_eq!(at("2026-02-01T00:00").0, january.1);
        // February: 28 days, and 29 in a leap year.
        assert_eq!(hours(at("2026-02-14T00:00")), 28.0 * 24.0);
        assert_eq!(hours(at("2028-02-29T12:00")), 29.0 * 24.0);
        assert_eq!(
            at("2028-02-28T23:00").1,
            local("Europe/Berlin", "2028-02-29T00:00") + 86_400_000_000_000
        );
        // March holds the spring change: one hour short.
        assert_eq!(hours(at("2026-03-10T00:00")), 31.0 * 24.0 - 1.0);
    }

    #[test]
    fn weeks_start_on_monday() {
        let week = Calendar::new("America/New_York", CalendarUnit::Week).unwrap();
        // Sunday 2026-11-01 is in the week of Monday 2026-10-26 (which holds the autumn change).
        let (start, end) = week.window_nanos(local("America/New_York", "2026-11-01T23:30"));
        assert_eq!(start, local("America/New_York", "2026-10-26T00:00"));
        assert_eq!(end, local("America/New_York", "2026-11-02T00:00"));
        assert_eq!(hours((start, end)), 7.0 * 24.0 + 1.0);
    }

    #[test]
    fn an_unknown_zone_is_refused_by_name() {
        let error = Calendar::new("Mars/Olympus_Mons", CalendarUnit::Day).unwrap_err();
        assert!(error.to_string().contains("Mars/Olympus_Mons"), "{error}");
        assert_eq!(
            Calendar::new("UTC", CalendarUnit::Day).unwrap().to_string(),
            "day in UTC"
        );
    }
}
