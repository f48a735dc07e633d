//! The sliding window at a finer resolution: a period counted in `k` sub-windows, the
//! oldest weighted by how much of it is still inside the period. Pure arithmetic over an
//! injected `now`.
//!
//! The two-window counter ([`window`](super::window)) estimates a sliding period from the
//! current window and the one before, weighting the whole previous window by the share of
//! it still inside. That estimate can be off by as much as the previous window's count: a
//! burst at the end of a window still weighs fully into the next. With `resolution = r`
//! (`k = period / r` sub-windows of `r`, aligned to the epoch), sub-window `j` holds
//! what was admitted in `[j·r, (j+1)·r)`; at `now`, in sub-window `j` with `e = now − j·r`
//! elapsed, the estimate is
//!
//! ```text
//! count[j−k] × (r − e)/r + count[j−k+1] + … + count[j]
//! ```
//!
//! — exact for all but the oldest sub-window, whose weight is the share of it still inside
//! `(now − period, now]`. The error is therefore bounded by one sub-window's count rather
//! than one period's (BENCHMARKS.md, "Sliding windows at a finer resolution", measures
//! it against the exact log). `k = 1` is exactly the two-window counter. Everything is
//! compared in integers (`× r`), so nothing is lost to rounding.
//!
//! A quota's state is a ring of `k + 1` counts and the index of the newest sub-window;
//! timestamps older than the newest sub-window are counted in it (the ring never moves
//! backwards), as the other counters do.

use super::CheckMode;
use crate::Quota;
use crate::decision::Decision;

/// The most sub-windows a period may be cut into: the state is one count per sub-window.
pub(crate) const MAX_SUBWINDOWS: u64 = 60;

/// Words a quota's ring takes: the newest index, then `k + 1` counts.
pub(crate) fn ring_words(quota: &Quota) -> usize {
    2 + usize::try_from(subwindows(quota)).unwrap_or(1)
}

/// `k`: the quota's period over its resolution (1 without one).
pub(crate) fn subwindows(quota: &Quota) -> u64 {
    match quota.resolution_nanos() {
        0 => 1,
        r => (quota.period_nanos() / r).max(1),
    }
}

/// One quota's ring, over its words: `[newest, count × (k + 1)]`.
struct Ring<'a> {
    words: &'a mut [u64],
    k: u64,
    r: u64,
}

impl Ring<'_> {
    fn newest(&self) -> u64 {
        self.words[0]
    }

    fn slot(&self, index: u64) -> usize {
        1 + usize::try_from(index % (self.k + 1)).unwrap_or(0)
    }

    /// The count of sub-window `index`: 0 outside what the ring holds.
    fn count(&self, index: u64) -> u64 {
        let newest = self.newest();
        if index > newest || newest - index > self.k {
            return 0;
        }
        self.words[self.slot(index)]
    }

    /// Rolls the ring forward to sub-window `j` (clearing what it passes); an older `j` is
    /// counted in the newest. Returns the sub-window counted in.
    fn roll(&mut self, j: u64) -> u64 {
        let newest = self.newest();
        if j <= newest && newest != 0 {
            return newest;
        }
        if newest == 0 || j - newest > self.k {
            // Every sub-window the ring held has passed.
            for count in self.words.iter_mut().skip(1) {
                *count = 0;
            }
        } else {
            // The ones from just after `newest` to `j` (each index above `newest`).
            for step in 0..j - newest {
                let slot = self.slot(j - step);
                self.words[slot] = 0;
            }
        }
        self.words[0] = j;
        j
    }

    /// `estimate × r` in sub-window `j`, `e` into it.
    fn scaled(&self, j: u64, e: u64) -> u128 {
        let r = u128::from(self.r);
        let oldest = j.checked_sub(self.k).map_or(0, |i| self.count(i));
        let full: u128 = (j.saturating_sub(self.k - 1)..=j)
            .map(|i| u128::from(self.count(i)))
            .sum();
        // Saturating: stored counts and widths may be anything a damaged disk wrote.
        u128::from(oldest)
            .saturating_mul(r - u128::from(e))
            .saturating_add(full.saturating_mul(r))
    }

    /// Nanoseconds from `now` (in sub-window `j`) until the estimate is at most `target`;
    /// `u64::MAX` if never.
    fn until_at_most(&self, target: i128, j: u64, now: u64) -> u64 {
        if target < 0 {
            return u64::MAX;
        }
        let target = target as u128;
        let r = u128::from(self.r);
        for step in 0..=self.k + 1 {
            let at = j.saturating_add(step);
            let oldest = at.checked_sub(self.k).map_or(0, |i| self.count(i));
            let full: u128 = (at.saturating_sub(self.k - 1)..=at)
                .map(|i| u128::from(self.count(i)))
                .sum();
            if full > target {
                continue;
            }
            // oldest × (r − e) ≤ (target − full) × r  ⇔  e ≥ r − ⌊(target − full)·r / oldest⌋
            let e = if oldest == 0 {
                0
            } else {
                r - ((target - full).saturating_mul(r) / u128::from(oldest)).min(r)
            };
            let when = u128::from(at).saturating_mul(r).saturating_add(e);
            return u64::try_from(when).unwrap_or(u64::MAX).saturating_sub(now);
        }
        u64::MAX
    }
}

/// Decides a request of `cost` at `now` against `quotas` whose rings are laid out one after
/// another in `words` (each [`ring_words`] long).
pub(crate) fn decide(
    words: &mut [u64],
    quotas: &[Quota],
    cost: u64,
    now: u64,
    mode: CheckMode,
) -> Decision {
    let mut rings = split(words, quotas);
    let positions: Vec<(u64, u64)> = rings
        .iter()
        .map(|ring| {
            let j = now / ring.r;
            let counted = if j < ring.newest() { ring.newest() } else { j };
            let e = if counted == j {
                now - j * ring.r
            } else {
                ring.r - 1
            };
            (counted, e)
        })
        .collect();
    let allowed = rings
        .iter()
        .zip(quotas)
        .zip(&positions)
        .all(|((ring, quota), &(j, e))| {
            let limit = u128::from(quota.rate().count()) * u128::from(ring.r);
            let cost = super::quota_cost(quota, cost, mode);
            ring.scaled(j, e) + u128::from(cost) * u128::from(ring.r) <= limit
        });
    let take = mode.takes(allowed);
    let mut counted = super::Counted::default();
    for (index, ((ring, quota), &(j, e))) in
        rings.iter_mut().zip(quotas).zip(&positions).enumerate()
    {
        let cost = super::quota_cost(quota, cost, mode);
        if mode != CheckMode::Peek {
            let counted = ring.roll(j);
            if take {
                let slot = ring.slot(counted);
                ring.words[slot] = ring.words[slot].saturating_add(cost);
            }
        }
        let scaled = if mode == CheckMode::Peek {
            ring.scaled(j, e)
        } else {
            ring.scaled(ring.newest(), e)
        };
        let ring = &*ring;
        counted.quota(
            index,
            quota,
            allowed,
            (scaled, u128::from(ring.r)),
            cost,
            |n| ring.until_at_most(n, j, now),
        );
    }
    counted.decision()
}

/// Nanoseconds from `now` until every ring is empty of counts inside its period.
pub(crate) fn refills_in(words: &[u64], periods: &[(u64, u64)], now: u64) -> u64 {
    let mut at = 0;
    let mut longest = 0;
    for &(period, resolution) in periods {
        let k = (period / resolution.max(1)).max(1);
        let len = 2 + usize::try_from(k).unwrap_or(1);
        let Some(ring) = words.get(at..at + len) else {
            break;
        };
        if ring[1..].iter().any(|&count| count > 0) {
            // The newest sub-window's counts leave the period a whole period after it ends.
            let gone = ring[0]
                .saturating_add(1)
                .saturating_mul(resolution)
                .saturating_add(period);
            longest = longest.max(gone.saturating_sub(now));
        }
        at += len;
    }
    longest
}

/// The units each ring counts as of `now` (for carrying a bucket over to other numbers).
pub(crate) fn used(words: &[u64], periods: &[(u64, u64)], now: u64) -> Vec<f64> {
    let mut at = 0;
    let mut used = Vec::with_capacity(periods.len());
    for &(period, resolution) in periods {
        let r = resolution.max(1);
        let k = (period / r).max(1);
        let len = 2 + usize::try_from(k).unwrap_or(1);
        let mut copy = words
            .get(at..at + len)
            .map(<[u64]>::to_vec)
            .unwrap_or_default();
        if copy.len() == len {
            let ring = Ring {
                words: &mut copy,
                k,
                r,
            };
            let j = now / r;
            let j = j.max(ring.newest());
            let e = (now.saturating_sub(j.saturating_mul(r))).min(r - 1);
            used.push(ring.scaled(j, e) as f64 / r as f64);
        }
        at += len;
    }
    used
}

/// Gives `cost` units back to each ring (a refund): from the newest sub-window backwards,
/// never below zero.
pub(crate) fn give_back(words: &mut [u64], quotas: &[Quota], cost: u64, now: u64) {
    for (ring, quota) in split(words, quotas).iter_mut().zip(quotas) {
        let newest = ring.roll(now / ring.r);
        let mut left = super::quota_cost(quota, cost, CheckMode::Refund);
        for step in 0..=ring.k {
            let Some(index) = newest.checked_sub(step) else {
                break;
            };
            let slot = ring.slot(index);
            let taken = left.min(ring.words[slot]);
            ring.words[slot] -= taken;
            left -= taken;
            if left == 0 {
                break;
            }
        }
    }
}

/// Counts `units[i]` (what a bucket had used under other numbers, at most each limit) in
/// quota `i`'s sub-window of `now`: carried over, what was used stays used.
pub(crate) fn carry_into(words: &mut [u64], quotas: &[Quota], units: &[f64], now: u64) {
    for ((ring, quota), &used) in split(words, quotas).iter_mut().zip(quotas).zip(units) {
        let j = ring.roll(now / ring.r);
        let slot = ring.slot(j);
        ring.words[slot] = (used.ceil() as u64).min(u64::from(quota.rate().count()));
    }
}

/// The rings of `quotas` in `words`, in order.
fn split<'a>(mut words: &'a mut [u64], quotas: &[Quota]) -> Vec<Ring<'a>> {
    let mut rings = Vec::with_capacity(quotas.len());
    for quota in quotas {
        let len = ring_words(quota).min(words.len());
        let (ring, rest) = std::mem::take(&mut words).split_at_mut(len);
        words = rest;
        let k = subwindows(quota);
        let r = quota.period_nanos() / k;
        rings.push(Ring {
            words: ring,
            k,
            r: r.max(1),
        });
    }
    rings
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    const SECOND: u64 = 1_000_000_000;
    /// A minute boundary, well after the epoch.
    const T0: u64 = 1_000 * 60 * SECOND;

    fn quota(rate: &str, resolution_secs: u64) -> Quota {
        let rate: crate::quota::Rate = rate.parse().unwrap();
        Quota::new(rate, NonZeroU32::new(rate.count()).unwrap())
            .unwrap()
            .with_resolution(resolution_secs * SECOND)
    }

    fn fresh(quotas: &[Quota]) -> Vec<u64> {
        vec![0; quotas.iter().map(ring_words).sum()]
    }

    fn admit(words: &mut [u64], quotas: &[Quota], now: u64) -> Decision {
        decide(words, quotas, 1, now, CheckMode::Consume)
    }

    #[test]
    fn a_burst_at_the_end_of_a_window_fades_by_sub_window() {
        // 100/min in 10 s sub-windows: 100 admitted at 0:55.
        let quotas = [quota("100/min", 10)];
        let mut words = fresh(&quotas);
        for _ in 0..100 {
            assert!(admit(&mut words, &quotas, T0 + 55 * SECOND).allowed());
        }
        assert!(!admit(&mut words, &quotas, T0 + 55 * SECOND).allowed());
        // At 1:55 the burst's sub-window [50 s, 60 s) is half outside the period.
        let half = decide(&mut words, &quotas, 1, T0 + 115 * SECOND, CheckMode::Peek);
        assert_eq!(half.remaining(), 50);
        // The two-window counter would still weigh it at 5/60 of a whole minute's 100
        // only after 1:55; here, at 2:00, it is gone entirely.
        let gone = decide(&mut words, &quotas, 1, T0 + 120 * SECOND, CheckMode::Peek);
        assert_eq!(gone.remaining(), 100);
    }

    #[test]
    fn retry_after_is_when_enough_has_left_the_period() {
        let quotas = [quota("6/min", 10)];
        let mut words = fresh(&quotas);
        // One request in each of the first six sub-windows.
        for s in 0..6 {
            assert!(admit(&mut words, &quotas, T0 + s * 10 * SECOND).allowed());
        }
        let refused = admit(&mut words, &quotas, T0 + 55 * SECOND);
        assert!(!refused.allowed());
        // The first request's sub-window [0, 10 s) leaves the period between 60 and 70 s:
        // at 60 s it weighs 1, so the estimate is 6 until it has decayed to 5 at 70 s.
        assert_eq!(refused.retry_after().as_secs(), 15);
        assert!(admit(&mut words, &quotas, T0 + 70 * SECOND).allowed());
    }

    #[test]
    fn one_sub_window_is_the_two_window_counter() {
        let ring = [quota("10/min", 60)];
        let plain = [quota("10/min", 0)];
        let mut words = fresh(&ring);
        let mut counters = [crate::algorithm::window::Counter::default()];
        for (at, cost) in [
            (5, 4),
            (50, 5),
            (65, 3),
            (90, 2),
            (130, 6),
            (170, 1),
            (185, 9),
        ] {
            let now = T0 + at * SECOND;
            let a = decide(&mut words, &ring, cost, now, CheckMode::Consume);
            let b = crate::algorithm::window::decide(
                crate::algorithm::window::Kind::Sliding,
                &mut counters,
                &plain,
                cost,
                now,
                CheckMode::Consume,
            );
            assert_eq!(a, b, "at {at} s, cost {cost}");
        }
    }

    #[test]
    fn out_of_order_timestamps_count_in_the_newest_sub_window() {
        let quotas = [quota("3/min", 20)];
        let mut words = fresh(&quotas);
        assert!(admit(&mut words, &quotas, T0 + 50 * SECOND).allowed());
        assert!(admit(&mut words, &quotas, T0 + 5 * SECOND).allowed());
        assert_eq!(words[0], (T0 + 50 * SECOND) / (20 * SECOND));
        assert!(admit(&mut words, &quotas, T0 + 50 * SECOND).allowed());
        assert!(!admit(&mut words, &quotas, T0 + 50 * SECOND).allowed());
    }
}

#[cfg(test)]
mod request_quotas {
    use super::*;
    use std::num::NonZeroU32;

    #[test]
    fn a_request_quota_takes_one_whatever_the_cost() {
        let q = |rate: &str| {
            let rate: crate::quota::Rate = rate.parse().unwrap();
            Quota::new(rate, NonZeroU32::new(rate.count()).unwrap())
                .unwrap()
                .with_resolution(10_000_000_000)
        };
        let quotas = [q("60/min"), q("4/min").counting_requests()];
        let mut words = vec![0; quotas.iter().map(ring_words).sum()];
        let now = 1_000 * 60_000_000_000;
        let decision = decide(&mut words, &quotas, 10, now, CheckMode::Consume);
        assert!(decision.allowed(), "{decision:?}");
    }
}
