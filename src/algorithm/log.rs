//! The sliding log (`algorithm = "sliding-log"`): exact counts over a rolling window, pure
//! arithmetic over an injected `now`.
//!
//! A bucket keeps the timestamps of the requests it admitted, oldest first (a request of
//! cost `c` is `c` entries). A quota of `N` per `P` counts the entries inside the window
//! `(now − P, now]` and admits when that count plus the cost is at most `N`. Nothing is
//! estimated: unlike the two-window counter, "5 per hour" never lets a sixth through.
//!
//! # Memory bounded by the limit
//!
//! Only the newest `max N` entries are kept. That loses nothing: a quota refuses exactly
//! when its `N`-th newest entry is inside its window, and below that every entry inside the
//! window is kept. Entries older than the longest window are dropped as well. Config
//! validation refuses counts above [`MAX_LOG_LIMIT`](crate::config) for this reason.
//!
//! # Strict
//!
//! With `strict = true` a refused request is logged too (Dojo's variant): a client that
//! keeps hammering keeps its window full and stays refused until it pauses for a window.
//!
//! # Figures
//!
//! `Retry-After` is the time until the oldest entry that must leave the window for this
//! request to fit has left it: entry `e` leaves at `e + P`. `t` (time until one more unit)
//! is when the oldest entry in the window leaves; reset, when the newest does.
//!
//! Timestamps older than the newest entry (replayed out of order through `check_at`) are
//! logged at the newest entry's time, so the log stays sorted and never moves backwards.

use std::collections::VecDeque;

use super::CheckMode;
use crate::Quota;
use crate::decision::Decision;

/// How many entries a log over `quotas` keeps: the largest count.
pub(crate) fn capacity(quotas: &[Quota]) -> usize {
    quotas
        .iter()
        .map(|q| q.rate().count() as usize)
        .max()
        .unwrap_or(0)
}

/// The longest window of `quotas` (ns).
pub(crate) fn longest(quotas: &[Quota]) -> u64 {
    quotas.iter().map(Quota::period_nanos).max().unwrap_or(0)
}

/// Entries of `log` inside a window of `period` ending at `now`.
pub(crate) fn inside(log: &VecDeque<u64>, period: u64, now: u64) -> usize {
    let start = now.saturating_sub(period);
    log.len() - log.partition_point(|&t| t <= start)
}

/// Decides a request of `cost` at `now` against `quotas`, whose shared log is `log`.
pub(crate) fn decide(
    log: &mut VecDeque<u64>,
    quotas: &[Quota],
    cost: u64,
    now: u64,
    mode: CheckMode,
    strict: bool,
) -> Decision {
    let fits = |log: &VecDeque<u64>, quota: &Quota| {
        inside(log, quota.period_nanos(), now) as u64 + cost <= u64::from(quota.rate().count())
    };
    let allowed = quotas.iter().all(|quota| fits(log, quota));
    let logs = mode.takes(allowed) || (strict && !allowed && mode == CheckMode::Consume);
    if logs {
        let at = log.back().map_or(now, |&newest| newest.max(now));
        let entries = usize::try_from(cost)
            .unwrap_or(usize::MAX)
            .min(capacity(quotas));
        log.extend(std::iter::repeat_n(at, entries));
    }
    trim(log, quotas, now);

    let mut described: Option<Decision> = None;
    let mut reset = 0;
    for (index, quota) in quotas.iter().enumerate() {
        let (limit, period) = (u64::from(quota.rate().count()), quota.period_nanos());
        let count = inside(log, period, now);
        let first = log.len() - count;
        let leaves = |entry: Option<&u64>| {
            entry.map_or(0, |&e| e.saturating_add(period).saturating_sub(now))
        };
        reset = reset.max(leaves(log.back().filter(|_| count > 0)));
        let next = if count == 0 {
            0
        } else {
            leaves(log.get(first))
        };
        let retry = if allowed {
            0
        } else {
            // The k-th oldest entry inside the window must leave for `cost` to fit.
            let must_leave = (count as u64 + cost).saturating_sub(limit);
            let k = usize::try_from(must_leave).unwrap_or(usize::MAX);
            match k.checked_sub(1).and_then(|k| log.get(first + k)) {
                Some(entry) => leaves(Some(entry)),
                None => u64::MAX,
            }
        };
        let candidate = Decision::counted(
            allowed,
            u32::try_from(index).unwrap_or(u32::MAX),
            limit,
            period,
            limit.saturating_sub(count as u64),
            next,
            retry,
            0,
        );
        super::keep_most_restrictive(&mut described, candidate);
    }
    described.map_or(Decision::unlimited(), |d| d.with_reset(reset))
}

/// Drops what no quota can count again: entries beyond the largest count, and entries
/// older than the longest window.
pub(crate) fn trim(log: &mut VecDeque<u64>, quotas: &[Quota], now: u64) {
    let keep = capacity(quotas);
    while log.len() > keep {
        log.pop_front();
    }
    let start = now.saturating_sub(longest(quotas));
    while log.front().is_some_and(|&t| t <= start) {
        log.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    const SECOND: u64 = 1_000_000_000;
    const HOUR: u64 = 3600 * SECOND;
    const NOW: u64 = 1_000_000 * SECOND;

    fn quota(rate: &str) -> Quota {
        let rate: crate::quota::Rate = rate.parse().unwrap();
        Quota::new(rate, NonZeroU32::new(rate.count()).unwrap()).unwrap()
    }

    fn take(log: &mut VecDeque<u64>, quotas: &[Quota], at: u64) -> Decision {
        decide(log, quotas, 1, at, CheckMode::Consume, false)
    }

    #[test]
    fn admits_exactly_n_again_only_once_the_oldest_has_left_the_window() {
        let quotas = [quota("5/h")];
        let mut log = VecDeque::new();
        // Five spread over ten minutes, the sixth refused.
        for minute in 0..5 {
            assert!(take(&mut log, &quotas, NOW + minute * 120 * SECOND).allowed());
        }
        let refused = take(&mut log, &quotas, NOW + 20 * 60 * SECOND);
        assert!(!refused.allowed());
        // The oldest (at NOW) leaves at NOW + 1 h: 40 minutes from now.
        assert_eq!(refused.retry_after().as_secs(), 40 * 60);
        assert_eq!(refused.next_token_secs(), 40 * 60);
        // One nanosecond before the hour: still five inside.
        assert!(!take(&mut log, &quotas, NOW + HOUR - 1).allowed());
        // At the hour exactly the first has left: one more, and only one.
        let again = take(&mut log, &quotas, NOW + HOUR);
        assert!(again.allowed());
        assert_eq!(again.remaining(), 0);
        assert!(!take(&mut log, &quotas, NOW + HOUR).allowed());
        // The second entry (at 2 min) leaves 2 minutes after the hour.
        assert!(take(&mut log, &quotas, NOW + HOUR + 120 * SECOND).allowed());
    }

    #[test]
    fn no_boundary_lets_twice_the_limit_through() {
        // A two-window counter admits ~2N around a boundary; the log never more than N.
        let quotas = [quota("10/min")];
        let mut log = VecDeque::new();
        let mut admitted = Vec::new();
        for step in 0..600 {
            let at = NOW + step * SECOND / 5;
            if take(&mut log, &quotas, at).allowed() {
                admitted.push(at);
            }
        }
        for (i, &start) in admitted.iter().enumerate() {
            let within = admitted[i..]
                .iter()
                .take_while(|&&t| t < start + 60 * SECOND);
            assert!(
                within.count() <= 10,
                "more than 10 within a minute of {start}"
            );
        }
        assert_eq!(
            admitted.len(),
            20,
            "exactly 10 per rolling minute over two minutes"
        );
    }

    #[test]
    fn strict_logs_refusals_so_hammering_stays_blocked() {
        let quotas = [quota("2/min")];
        let (mut plain, mut strict) = (VecDeque::new(), VecDeque::new());
        // Two admitted at once, then a knock every 20 s.
        for seconds in [0, 0, 20, 40] {
            let at = NOW + seconds * SECOND;
            take(&mut plain, &quotas, at);
            decide(&mut strict, &quotas, 1, at, CheckMode::Consume, true);
        }
        // 60 s in: the plain log admits (the first two have left); strict logged the
        // refused knocks at 20 s and 40 s, still inside the window.
        let at = NOW + 60 * SECOND;
        assert!(take(&mut plain, &quotas, at).allowed());
        let blocked = decide(&mut strict, &quotas, 1, at, CheckMode::Consume, true);
        assert!(!blocked.allowed());
        // This knock is logged too: the one at 40 s must leave, at 100 s.
        assert_eq!(blocked.retry_after().as_secs(), 40);
        assert_eq!(strict.len(), 2, "memory stays bounded by the limit");
    }

    #[test]
    fn several_quotas_share_one_log_bounded_by_the_largest_count() {
        let quotas = [quota("2/s"), quota("5/min")];
        let mut log = VecDeque::new();
        let mut admitted = 0;
        for step in 0..120 {
            if take(&mut log, &quotas, NOW + step * SECOND / 4).allowed() {
                admitted += 1;
            }
            assert!(log.len() <= 5);
        }
        assert_eq!(admitted, 5, "5 per minute over 30 s, at most 2 per second");
    }

    #[test]
    fn a_peek_logs_nothing_and_cost_logs_that_many() {
        let quotas = [quota("10/min")];
        let mut log = VecDeque::new();
        decide(&mut log, &quotas, 4, NOW, CheckMode::Consume, false);
        let peek = decide(&mut log, &quotas, 7, NOW, CheckMode::Peek, false);
        assert!(!peek.allowed());
        assert_eq!(peek.remaining(), 6);
        assert_eq!(log.len(), 4);
    }

    proptest::proptest! {
        /// Keeping only the newest `max N` entries loses nothing: the bounded log decides
        /// exactly as a log of every entry ever made would, strict or not, with several
        /// quotas and costs — and never holds more than the largest count.
        #[test]
        fn the_bounded_log_decides_as_a_complete_history_would(
            steps in proptest::collection::vec((0u64..1_500_000_000, 1u64..4), 1..300),
            strict in proptest::bool::ANY,
        ) {
            let quotas = [quota("4/s"), quota("9/5s")];
            let mut log = VecDeque::new();
            let mut history: Vec<u64> = Vec::new();
            let mut now = NOW;
            for (advance, cost) in steps {
                now += advance;
                let decision = decide(&mut log, &quotas, cost, now, CheckMode::Consume, strict);
                let inside = |period: u64| history.iter().filter(|&&t| t + period > now).count() as u64;
                let fits = quotas
                    .iter()
                    .all(|q| inside(q.period_nanos()) + cost <= u64::from(q.rate().count()));
                proptest::prop_assert_eq!(decision.allowed(), fits, "at {}", now);
                if fits || strict {
                    history.extend(std::iter::repeat_n(now, cost as usize));
                }
                proptest::prop_assert!(log.len() <= 9);
            }
        }
    }
}
