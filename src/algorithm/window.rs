//! Window counters: `sliding-window` and `fixed-window`, pure arithmetic over an
//! injected `now`.
//!
//! Windows are aligned to the UNIX epoch: window `k` of a quota with period `P` covers
//! `[k·P, (k+1)·P)` — or, for a calendar quota (fixed windows only), they are the
//! calendar's days, weeks or months in its time zone, each of its own length. A quota's state is the start of the window it last counted in and the
//! units (`cost`s) admitted in that window and the one before.
//!
//! - **fixed-window**: admit when `current + cost ≤ N`; the count starts again at 0 at every
//!   window boundary (for everyone at once — the stampede at window edges).
//! - **sliding-window**: the two-window weighted counter. At elapsed time `e` into the
//!   current window, the estimate is `previous × (P − e)/P + current`: the previous
//!   window's count weighted by the share of it still inside a sliding window of length
//!   `P`. Admit when `estimate + cost ≤ N`. All comparisons are done in integers
//!   (`previous × (P − e) + (current + cost) × P ≤ N × P`), so nothing is lost to rounding.
//!
//! Remaining is `⌊N − estimate⌋`; `Retry-After` is the time until `estimate ≤ N − cost`,
//! found exactly from the same formula (within the current window as the previous count
//! decays, else in the next window as the current count becomes the previous one).
//!
//! Timestamps older than the window a bucket last counted in are counted in that window —
//! the counter never moves backwards — so replaying out-of-order events cannot corrupt it.

use super::CheckMode;
use crate::Quota;
use crate::decision::Decision;

/// Which counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sliding,
    Fixed,
}

/// One quota's counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Start of the window `current` counts (ns since the epoch); 0 for a fresh counter.
    pub(crate) start: u64,
    pub(crate) previous: u64,
    pub(crate) current: u64,
}

impl Counter {
    /// The counter as of `now` (rolled forward into `now`'s window, which starts at
    /// `window` and lasts `period`), and the elapsed time into that window. Calendar
    /// windows are not all as long, so a later one is simply a new one (they are only
    /// counted as fixed windows).
    fn at(self, now: u64, window: u64, period: u64, calendar: bool) -> (Counter, u64) {
        // A window of its own (a later calendar window, a first count, or two periods
        // on), or the one right after the counted one: the current count becomes previous.
        let fresh = (calendar && window > self.start)
            || self.start == 0
            || window >= self.start.saturating_add(2 * period);
        if fresh || Some(window) == self.start.checked_add(period) {
            let previous = if fresh { 0 } else { self.current };
            let counter = Counter {
                start: window,
                previous,
                current: 0,
            };
            return (counter, now - window);
        }
        // The same window — or an older timestamp, counted in the window last seen.
        (self, now.saturating_sub(self.start).min(period - 1))
    }

    /// `estimate × P`, exactly.
    fn scaled_estimate(&self, kind: Kind, elapsed: u64, period: u64) -> u128 {
        let current = u128::from(self.current) * u128::from(period);
        match kind {
            Kind::Fixed => current,
            Kind::Sliding => u128::from(self.previous) * u128::from(period - elapsed) + current,
        }
    }

    /// Time from `now` until the estimate is at most `target` units; `u64::MAX` if never.
    fn time_until_at_most(&self, kind: Kind, target: i128, now: u64, period: u64) -> u64 {
        if target < 0 {
            return u64::MAX;
        }
        let target = target as u128;
        let p = u128::from(period);
        let (current, previous) = (u128::from(self.current), u128::from(self.previous));
        // This window: the previous count decays (sliding); the current one stays.
        if current <= target {
            let when = match kind {
                Kind::Fixed => 0,
                Kind::Sliding if previous == 0 => 0,
                Kind::Sliding => {
                    // previous × (P − e) ≤ (target − current) × P  ⇔  e ≥ P − ⌊(target − current)·P / previous⌋
                    let room = (target - current) * p / previous;
                    u128::from(self.start) + p - room.min(p)
                }
            };
            return u64::try_from(when).unwrap_or(u64::MAX).saturating_sub(now);
        }
        // The next window: the current count becomes the previous one and decays.
        let next = u128::from(self.start) + p;
        let when = match kind {
            Kind::Fixed => next,
            Kind::Sliding => next + p - (target * p / current).min(p),
        };
        u64::try_from(when).unwrap_or(u64::MAX).saturating_sub(now)
    }
}

/// Gives `cost` units back to each counter (a refund): from the current window's count,
/// then the previous one's, never below zero.
pub(crate) fn give_back(counters: &mut [Counter], quotas: &[Quota], cost: u64, now: u64) {
    for (slot, quota) in counters.iter_mut().zip(quotas) {
        let cost = super::quota_cost(quota, cost, CheckMode::Refund);
        let (window, period) = quota.window_at(now);
        let (mut counter, _) = slot.at(now, window, period, quota.calendar().is_some());
        let from_current = cost.min(counter.current);
        counter.current -= from_current;
        counter.previous = counter.previous.saturating_sub(cost - from_current);
        *slot = counter;
    }
}

/// Decides a request of `cost` units at `now` against window `quotas` with `counters`.
pub(crate) fn decide(
    kind: Kind,
    counters: &mut [Counter],
    quotas: &[Quota],
    cost: u64,
    now: u64,
    mode: CheckMode,
) -> Decision {
    // Two passes rather than a collected Vec: rolling a counter forward is a few compares.
    let allowed = counters.iter().zip(quotas).all(|(counter, quota)| {
        let (window, period) = quota.window_at(now);
        let (counter, elapsed) = counter.at(now, window, period, quota.calendar().is_some());
        let limit = u128::from(quota.rate().count()) * u128::from(period);
        let cost = super::quota_cost(quota, cost, mode);
        counter.scaled_estimate(kind, elapsed, period) + u128::from(cost) * u128::from(period)
            <= limit
    });
    let take = mode.takes(allowed);

    let mut counted = super::Counted::default();
    for (index, (slot, quota)) in counters.iter_mut().zip(quotas).enumerate() {
        let (window, period) = quota.window_at(now);
        let (mut counter, elapsed) = slot.at(now, window, period, quota.calendar().is_some());
        let cost = super::quota_cost(quota, cost, mode);
        if take {
            counter.current = counter.current.saturating_add(cost);
        }
        if mode != CheckMode::Peek {
            *slot = counter;
        }
        let used = counter.scaled_estimate(kind, elapsed, period);
        counted.quota(
            index,
            quota,
            allowed,
            (used, u128::from(period)),
            cost,
            |n| counter.time_until_at_most(kind, n, now, period),
        );
    }
    counted.decision()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;
    /// A window boundary for 100-second windows.
    const T0: u64 = 1_000 * 100 * SECOND;

    fn quota(rate: &str) -> Quota {
        let rate: crate::quota::Rate = rate.parse().unwrap();
        Quota::new(rate, NonZeroU32::new(rate.count()).unwrap()).unwrap()
    }

    fn admit_all(kind: Kind, counters: &mut [Counter], quotas: &[Quota], now: u64) -> u64 {
        let mut admitted = 0;
        while decide(kind, counters, quotas, 1, now, CheckMode::Consume).allowed() {
            admitted += 1;
            assert!(admitted <= 10_000, "runaway");
        }
        admitted
    }

    #[test]
    fn sliding_window_reproduces_the_worked_example() {
        // 100 per 100 s. 100 requests early in one window...
        let quotas = [quota("100/100s")];
        let mut counters = [Counter::default()];
        assert_eq!(
            admit_all(Kind::Sliding, &mut counters, &quotas, T0 + SECOND),
            100
        );
        // ...then 25% into the next window the previous window still weighs 100 × 0.75 = 75,
        // so exactly 25 more are admitted;
        let quarter = T0 + 100 * SECOND + 25 * SECOND;
        assert_eq!(
            admit_all(Kind::Sliding, &mut counters, &quotas, quarter),
            25
        );
        // ...and 75% into it the previous window weighs 100 × 0.25 = 25 and the current one
        // holds 25: 50 more, bringing this window to 75.
        let three_quarters = T0 + 100 * SECOND + 75 * SECOND;
        assert_eq!(
            admit_all(Kind::Sliding, &mut counters, &quotas, three_quarters),
            50
        );
        assert_eq!(counters[0].current, 75);
    }

    #[test]
    fn sliding_window_retry_after_and_remaining_are_exact() {
        let quotas = [quota("10/100s")];
        let mut counters = [Counter::default()];
        admit_all(Kind::Sliding, &mut counters, &quotas, T0);
        // Full at the start of a window: the next request fits once the window rolls over
        // and the weight of these 10 falls to 9: 10% into the next window.
        let denied = decide(
            Kind::Sliding,
            &mut counters,
            &quotas,
            1,
            T0 + 50 * SECOND,
            CheckMode::Consume,
        );
        assert!(!denied.allowed());
        assert_eq!(denied.remaining(), 0);
        assert_eq!(denied.retry_after(), Duration::from_secs(60));
        // Everything has decayed two windows after the last count.
        assert_eq!(denied.reset(), Duration::from_secs(150));
        let later = decide(
            Kind::Sliding,
            &mut counters,
            &quotas,
            1,
            T0 + 110 * SECOND,
            CheckMode::Consume,
        );
        assert!(later.allowed());
        assert_eq!(later.remaining(), 0);
    }

    #[test]
    fn fixed_window_resets_at_the_boundary() {
        let quotas = [quota("3/10s")];
        let mut counters = [Counter::default()];
        assert_eq!(
            admit_all(Kind::Fixed, &mut counters, &quotas, T0 + 9 * SECOND),
            3
        );
        let denied = decide(
            Kind::Fixed,
            &mut counters,
            &quotas,
            1,
            T0 + 9 * SECOND,
            CheckMode::Consume,
        );
        assert_eq!(denied.retry_after(), Duration::from_secs(1));
        assert_eq!(denied.reset(), Duration::from_secs(1));
        // The stampede: a whole new window's worth one second later.
        assert_eq!(
            admit_all(Kind::Fixed, &mut counters, &quotas, T0 + 10 * SECOND),
            3
        );
    }

    #[test]
    fn cost_and_several_quotas_are_all_or_nothing() {
        let quotas = [quota("10/100s"), quota("4/10s")];
        let mut counters = [Counter::default(); 2];
        assert!(
            decide(
                Kind::Fixed,
                &mut counters,
                &quotas,
                3,
                T0,
                CheckMode::Consume
            )
            .allowed()
        );
        let denied = decide(
            Kind::Fixed,
            &mut counters,
            &quotas,
            3,
            T0,
            CheckMode::Consume,
        );
        assert!(!denied.allowed());
        assert_eq!(
            (counters[0].current, counters[1].current),
            (3, 3),
            "the denial took nothing"
        );
        assert_eq!(denied.quota(), 1);
        assert_eq!(denied.retry_after(), Duration::from_secs(10));
    }

    #[test]
    fn older_timestamps_count_in_the_window_last_seen() {
        let quotas = [quota("2/10s")];
        let mut counters = [Counter::default()];
        let mut take_at = |at| {
            decide(
                Kind::Sliding,
                &mut counters,
                &quotas,
                1,
                at,
                CheckMode::Consume,
            )
            .allowed()
        };
        assert!(take_at(T0 + 25 * SECOND));
        // An event from long before: counted, not allowed to roll the window back.
        assert!(take_at(T0));
        assert!(!take_at(T0));
        assert_eq!(counters[0].start, T0 + 20 * SECOND);
    }

    proptest::proptest! {
        /// Fixed windows never admit more than N units in any one window; sliding windows
        /// never admit more than 2N units in any span of one period (their documented bound:
        /// the estimate can under-count a previous window's burst that sat at its end).
        #[test]
        fn windows_respect_their_bounds(
            steps in proptest::collection::vec((0u64..3_000_000_000, 1u64..4), 1..300),
            sliding in proptest::bool::ANY,
        ) {
            let kind = if sliding { Kind::Sliding } else { Kind::Fixed };
            let quotas = [quota("10/5s")];
            let period = 5 * SECOND;
            let mut counters = [Counter::default()];
            let mut now = T0;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (advance, cost) in steps {
                now += advance;
                if decide(kind, &mut counters, &quotas, cost, now, CheckMode::Consume).allowed() {
                    admitted.push((now, cost));
                }
            }
            for &(start, _) in &admitted {
                let window_start = start - start % period;
                let (from, bound) = match kind {
                    Kind::Fixed => (window_start, 10),
                    Kind::Sliding => (start, 20),
                };
                let in_span: u64 = admitted
                    .iter()
                    .filter(|(t, _)| *t >= from && *t < from + period)
                    .map(|(_, c)| c)
                    .sum();
                proptest::prop_assert!(in_span <= bound, "{in_span} units in one period from {from}");
            }
        }
    }
}
