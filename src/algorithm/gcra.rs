//! The token bucket, as GCRA arithmetic over an injected `now`.
//!
//! # Why this engine is ours and not governor's
//!
//! governor supplies this crate's [`Quota`](crate::Quota) semantics and clocks, but its
//! limiters cannot express what tollgate promises of a decision (README, "How buckets
//! work"):
//!
//! - **several quotas admitted atomically** (`rate = ["100/min", "5/s"]`): governor checks
//!   one quota per state cell; checking two limiters in turn takes from the first when the
//!   second denies, and a refused request must take nothing;
//! - **caller timestamps** (`check_at`, replaying logs in any order) and **peek** (state
//!   without consuming): governor always reads its own clock and always consumes;
//! - **exact remaining / reset / next-token figures** for the `RateLimit` headers, from the
//!   same reading of the clock that decided;
//! - **carrying state across reloads** and **strict mode**, which need the raw theoretical
//!   arrival times, not governor's opaque state;
//! - an **async, possibly remote** store: governor's `StateStore` is a synchronous
//!   compare-and-swap on one `u64`, which a Redis backend cannot implement.
//!
//! So this is the one engine: pure functions over theoretical arrival times (TATs), no I/O,
//! no clock of its own, used by every store. It is the same algorithm governor implements
//! (the generic cell rate algorithm), with the same meaning of burst and interval.
//!
//! # The arithmetic
//!
//! Each quota has an emission interval `T = period / count` and a capacity
//! `τ = burst × T`. Its state is one TAT: the time at which the bucket will be full again.
//! A request of cost `c` at time `now` moves it to `max(TAT, now) + c·T`, and is admitted
//! when that is at most `now + τ` — i.e. when `c` tokens are available. A fresh bucket
//! (TAT ≤ now) is full. A denied request changes nothing — except in strict mode.
//!
//! # Strict mode
//!
//! With `strict = true`, a refused request holds the refill back: each quota that refused
//! moves its TAT to at least `now + T + τ − cost·T`, the state in which the next request of
//! this cost is admitted exactly one interval `T` after this one. A client that keeps
//! knocking faster than once per interval is never admitted; one that waits out an interval
//! (and whatever its bucket still needed) is. `Retry-After` is computed from that state.
//!
//! # Across a change of rate
//!
//! A TAT only means something together with the interval it was computed under. When a
//! reload changes a rule's numbers, or a client moves to another plan, [`carry_over`]
//! re-expresses each bucket in the new quotas: the tokens a client has used
//! (`debt / old interval`) stay used, now refilling at the new interval, capped at the new
//! burst — a client that had used more than the new burst starts the new limit empty, not
//! in debt (a move from a plan of 1,000 a minute to one of 10 does not cost 99 minutes).

use super::{Ask, CheckMode};
use crate::Quota;
use crate::decision::Decision;

/// Decides a request of `cost` tokens at `now` against `quotas`, whose TATs are `tats`.
///
/// With `commit`, an admitted request's tokens are taken from every quota; a denial never
/// takes anything. `tats` and `quotas` have the same length (one TAT per quota).
pub(crate) fn decide(tats: &mut [u64], quotas: &[Quota], ask: Ask<'_>) -> Decision {
    match (&mut *tats, quotas) {
        ([tat], [quota]) => decide_one(tat, quota, ask),
        _ => decide_many(tats, quotas, ask),
    }
}

/// [`decide`] for any number of quotas: all must admit; the most restrictive describes.
fn decide_many(tats: &mut [u64], quotas: &[Quota], ask: Ask<'_>) -> Decision {
    let (cost, now, mode, strict, shaping) = ask.parts();
    let refuses = |tat: u64, quota: &Quota| {
        let after = tat.max(now).saturating_add(
            super::quota_cost(quota, cost, mode).saturating_mul(quota.interval_nanos()),
        );
        after - now > shaping.tolerance(quota)
    };
    let allowed = !tats
        .iter()
        .zip(quotas)
        .any(|(&tat, quota)| refuses(tat, quota));
    if !allowed && strict && mode == CheckMode::Consume {
        for (tat, quota) in tats.iter_mut().zip(quotas) {
            if refuses(*tat, quota) {
                let interval = quota.interval_nanos();
                let spend = super::quota_cost(quota, cost, mode).saturating_mul(interval);
                *tat = (*tat).max(strict_hold(now, interval, shaping.tolerance(quota), spend));
            }
        }
    }
    // Charging (count_status) takes the tokens even past empty; the debt is waited out.
    let take = mode.takes(allowed);

    let mut described: Option<Decision> = None;
    let mut reset = 0;
    let mut hold = 0;
    for (index, (tat, quota)) in tats.iter_mut().zip(quotas).enumerate() {
        let interval = quota.interval_nanos();
        let start = (*tat).max(now);
        let taken =
            start.saturating_add(super::quota_cost(quota, cost, mode).saturating_mul(interval));
        // A consuming admission reports the bucket after it; a peek or denial, as it stands.
        let state = if take { taken } else { start };
        if take {
            *tat = taken;
        }
        let debt = state - now;
        reset = reset.max(debt);
        if allowed && take {
            hold = hold.max(shaping.hold(quota, debt));
        }
        // From the bucket as it now stands: after a charge past empty, the next request
        // of this cost waits for the charge too.
        let retry = if allowed {
            0
        } else {
            let spend = super::quota_cost(quota, cost, mode).saturating_mul(interval);
            retry_after(state, spend, shaping.tolerance(quota), now)
        };
        describe(&mut described, (index, quota), allowed, debt, retry);
    }
    described.map_or(Decision::unlimited(), |decision| {
        decision.with_reset(reset).with_delay(hold)
    })
}

/// The TAT a strict refusal holds a bucket at, as GCRA counts: refill held back so that a
/// request spending `spend` fits again only a whole `interval` from `now`.
#[inline]
pub(crate) fn strict_hold(now: u64, interval: u64, tolerance: u64, spend: u64) -> u64 {
    now.saturating_add(interval)
        .saturating_add(tolerance)
        .saturating_sub(spend)
}

/// How long after `now` a request spending `spend` fits a bucket whose state (its TAT, or
/// `now` if refilled) is `state`.
#[inline]
pub(crate) fn retry_after(state: u64, spend: u64, tolerance: u64, now: u64) -> u64 {
    state
        .saturating_add(spend)
        .saturating_sub(tolerance)
        .saturating_sub(now)
}

/// Describes quota `index` of a bucket, owing `debt` (and refusing for `retry`), and keeps
/// it in `described` if it is the most restrictive so far.
pub(crate) fn describe(
    described: &mut Option<Decision>,
    (index, quota): (usize, &Quota),
    allowed: bool,
    debt: u64,
    retry: u64,
) {
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    let candidate = Decision::bucket(
        allowed,
        index,
        u64::from(quota.burst()),
        quota.interval_nanos(),
        debt,
        retry,
    );
    super::keep_most_restrictive(described, candidate);
}

/// [`decide`] for a rule of one quota, the commonest: the same arithmetic with nothing to
/// compare across quotas.
#[inline]
fn decide_one(tat: &mut u64, quota: &Quota, ask: Ask<'_>) -> Decision {
    let (cost, now, mode, strict, shaping) = ask.parts();
    let interval = quota.interval_nanos();
    let tolerance = shaping.tolerance(quota);
    // What this request takes, in nanoseconds of the quota's interval.
    let spend = super::quota_cost(quota, cost, mode).saturating_mul(interval);
    let start = (*tat).max(now);
    let taken = start.saturating_add(spend);
    let allowed = taken - now <= tolerance;
    if !allowed && strict && mode == CheckMode::Consume {
        *tat = (*tat).max(strict_hold(now, interval, tolerance, spend));
    }
    let take = mode.takes(allowed);
    // As `decide` reads it: after a strict refusal the bucket is described as it now stands.
    let start = (*tat).max(now);
    let taken = start.saturating_add(spend);
    let state = if take { taken } else { start };
    if take {
        *tat = taken;
    }
    let debt = state - now;
    let hold = if allowed && take {
        shaping.hold(quota, debt)
    } else {
        0
    };
    let retry = if allowed {
        0
    } else {
        retry_after(state, spend, tolerance, now)
    };
    Decision::bucket(allowed, 0, u64::from(quota.burst()), interval, debt, retry)
        .with_reset(debt)
        .with_delay(hold)
}

/// Gives `cost` tokens back to each quota's TAT (a refund): the debt shrinks by `cost`
/// intervals, never below a full bucket.
pub(crate) fn give_back(tats: &mut [u64], quotas: &[Quota], cost: u64, now: u64) {
    for (tat, quota) in tats.iter_mut().zip(quotas) {
        if *tat > now {
            let cost = super::quota_cost(quota, cost, super::CheckMode::Refund);
            *tat = tat
                .saturating_sub(cost.saturating_mul(quota.interval_nanos()))
                .max(now);
        }
    }
}

/// Re-expresses buckets measured in `old_intervals` for `quotas`, writing new TATs.
///
/// Each new quota inherits the consumption of the old quota whose interval is closest to
/// its own (by ratio), so reordering, adding or removing quotas keeps what was used.
pub(crate) fn carry_over(
    old_tats: &[u64],
    old_intervals: &[u64],
    quotas: &[Quota],
    now: u64,
    new_tats: &mut [u64],
) {
    for (new_tat, quota) in new_tats.iter_mut().zip(quotas) {
        let interval = quota.interval_nanos();
        let closest = old_tats
            .iter()
            .zip(old_intervals)
            .min_by_key(|&(_, &old)| ratio_distance(old, interval));
        *new_tat = match closest {
            Some((&tat, &old_interval)) if tat > now && old_interval > 0 => {
                let debt = u128::from(tat - now) * u128::from(interval) / u128::from(old_interval);
                let debt = debt.min(u128::from(quota.capacity_nanos()));
                now.saturating_add(u64::try_from(debt).unwrap_or(u64::MAX))
            }
            _ => 0,
        };
    }
}

/// How far apart two intervals are, as a ratio (1 = equal), scaled to an integer.
fn ratio_distance(a: u64, b: u64) -> u128 {
    let (small, large) = if a < b { (a, b) } else { (b, a) };
    u128::from(large) * 1_000_000 / u128::from(small.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Shaping, ask};
    use std::num::NonZeroU32;
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;
    const NOW: u64 = 1_000 * SECOND;

    fn quota(rate: &str, burst: u32) -> Quota {
        Quota::new(rate.parse().unwrap(), NonZeroU32::new(burst).unwrap()).unwrap()
    }

    /// The engine without shaping, as most tests use it.
    fn decide(
        tats: &mut [u64],
        quotas: &[Quota],
        cost: u64,
        now: u64,
        mode: CheckMode,
        strict: bool,
    ) -> Decision {
        super::decide(tats, quotas, ask(cost, now, mode, strict, &Shaping::NONE))
    }

    fn delayed(max: u64, after: Option<u32>) -> Shaping {
        Shaping::NONE.with_delay(crate::Delay::new(Duration::from_nanos(max), after))
    }

    /// One request of cost 1 at `at` under `shaping`, consuming.
    fn take(tats: &mut [u64], quotas: &[Quota], at: u64, shaping: &Shaping) -> Decision {
        super::decide(tats, quotas, ask(1, at, CheckMode::Consume, false, shaping))
    }

    #[test]
    fn a_delay_schedules_each_request_one_interval_after_the_last() {
        // 5/s, burst 1, max_delay 2 s: the first passes, then one every 200 ms, up to 2 s.
        let quotas = [quota("5/s", 1)];
        let shaping = delayed(2 * SECOND, None);
        let mut tats = [0];
        let waits: Vec<Option<u64>> = (0..16)
            .map(|_| {
                let d = take(&mut tats, &quotas, NOW, &shaping);
                d.allowed().then(|| d.delay().as_millis() as u64)
            })
            .collect();
        let admitted: Vec<u64> = (0..=10).map(|k| k * 200).collect();
        assert_eq!(
            waits[..11],
            admitted.iter().map(|&w| Some(w)).collect::<Vec<_>>()[..]
        );
        assert!(waits[11..].iter().all(Option::is_none), "{waits:?}");
        // A refusal took nothing: it names the time when one would be held at most 2 s.
        let refused = take(&mut tats, &quotas, NOW, &shaping);
        assert_eq!(refused.retry_after(), Duration::from_millis(200));
        let later = take(&mut tats, &quotas, NOW + SECOND / 5, &shaping);
        assert!(later.allowed());
        assert_eq!(later.delay(), Duration::from_secs(2));
    }

    #[test]
    fn delay_after_lets_that_many_of_a_burst_pass_at_once() {
        // 10/s burst 5, the first 2 at once, the rest 100 ms apart, held at most 1 s.
        let quotas = [quota("10/s", 5)];
        let shaping = delayed(SECOND, Some(2));
        let mut tats = [0];
        let waits: Vec<u128> = (0..20)
            .map(|_| take(&mut tats, &quotas, NOW, &shaping))
            .take_while(Decision::allowed)
            .map(|d| d.delay().as_millis())
            .collect();
        assert_eq!(
            waits,
            [0, 0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]
        );
    }

    #[test]
    fn a_peek_or_a_refusal_is_never_held() {
        let quotas = [quota("5/s", 1)];
        let shaping = delayed(SECOND, None);
        let mut tats = [0];
        take(&mut tats, &quotas, NOW, &shaping);
        let peek = super::decide(
            &mut tats,
            &quotas,
            ask(1, NOW, CheckMode::Peek, false, &shaping),
        );
        assert!(peek.allowed());
        assert_eq!(peek.delay(), Duration::ZERO);
        assert_eq!(tats[0], NOW + SECOND / 5, "a peek takes nothing");
    }

    #[test]
    fn burst_then_deny_then_refill_after_exactly_one_interval() {
        let quotas = [quota("10/s", 3)];
        let mut tats = [0];
        for expected_remaining in [2, 1, 0] {
            let d = decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false);
            assert!(d.allowed());
            assert_eq!(d.remaining(), expected_remaining);
        }
        let denied = decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false);
        assert!(!denied.allowed());
        assert_eq!(denied.retry_after(), Duration::from_millis(100));
        assert_eq!(denied.remaining(), 0);
        assert_eq!(denied.reset(), Duration::from_millis(300));

        let early = decide(
            &mut tats,
            &quotas,
            1,
            NOW + SECOND / 10 - 1,
            CheckMode::Consume,
            false,
        );
        assert!(!early.allowed());
        assert_eq!(early.retry_after(), Duration::from_nanos(1));
        let on_time = decide(
            &mut tats,
            &quotas,
            1,
            NOW + SECOND / 10,
            CheckMode::Consume,
            false,
        );
        assert!(on_time.allowed());
        assert_eq!(on_time.remaining(), 0);
    }

    #[test]
    fn cost_takes_several_tokens() {
        let quotas = [quota("10/s", 10)];
        let mut tats = [0];
        let d = decide(&mut tats, &quotas, 4, NOW, CheckMode::Consume, false);
        assert_eq!((d.allowed(), d.remaining()), (true, 6));
        let d = decide(&mut tats, &quotas, 4, NOW, CheckMode::Consume, false);
        assert_eq!((d.allowed(), d.remaining()), (true, 2));
        let d = decide(&mut tats, &quotas, 4, NOW, CheckMode::Consume, false);
        assert!(!d.allowed());
        assert_eq!(d.remaining(), 2);
        // Two more tokens are needed: 200 ms.
        assert_eq!(d.retry_after(), Duration::from_millis(200));
    }

    #[test]
    fn a_denial_takes_nothing_from_any_quota() {
        let quotas = [quota("100/min", 100), quota("2/s", 2)];
        let mut tats = [0, 0];
        assert!(decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false).allowed());
        assert!(decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false).allowed());
        let before = tats;
        let denied = decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false);
        assert!(!denied.allowed());
        assert_eq!(tats, before, "the per-minute quota kept its tokens");
        assert_eq!(
            denied.quota(),
            1,
            "the per-second quota is the one that denied"
        );
        assert_eq!(denied.limit(), 2);
        assert_eq!(denied.retry_after(), Duration::from_millis(500));
    }

    #[test]
    fn the_most_restrictive_quota_is_described() {
        let quotas = [quota("10/min", 10), quota("5/s", 5)];
        let mut tats = [0, 0];
        let d = decide(&mut tats, &quotas, 1, NOW, CheckMode::Consume, false);
        assert_eq!((d.quota(), d.remaining(), d.limit()), (1, 4, 5));
        assert_eq!(d.window(), Duration::from_secs(1));
        // One request a second: the per-second quota stays nearly full while the
        // per-minute one drains (8 more taken, 8/6 refilled: 2 left).
        let mut last = d;
        for step in 1..=8 {
            last = decide(
                &mut tats,
                &quotas,
                1,
                NOW + step * SECOND,
                CheckMode::Consume,
                false,
            );
        }
        assert_eq!((last.quota(), last.remaining(), last.limit()), (0, 2, 10));
        assert_eq!(last.window(), Duration::from_secs(60));
    }

    #[test]
    fn peek_changes_nothing() {
        let quotas = [quota("1/s", 1)];
        let mut tats = [0];
        let d = decide(&mut tats, &quotas, 1, NOW, CheckMode::Peek, false);
        assert!(d.allowed());
        assert_eq!(d.remaining(), 1, "a peek reports the bucket as it stands");
        assert_eq!(tats, [0]);
    }

    #[test]
    fn next_token_and_reset() {
        let quotas = [quota("1/s", 5)];
        let mut tats = [0];
        let full = decide(&mut tats, &quotas, 1, NOW, CheckMode::Peek, false);
        assert_eq!(full.next_token(), Duration::ZERO);
        assert_eq!(full.reset(), Duration::ZERO);
        let d = decide(&mut tats, &quotas, 2, NOW, CheckMode::Consume, false);
        assert_eq!(d.next_token(), Duration::from_secs(1));
        assert_eq!(d.reset(), Duration::from_secs(2));
        let later = decide(
            &mut tats,
            &quotas,
            1,
            NOW + SECOND / 4,
            CheckMode::Peek,
            false,
        );
        assert_eq!(later.remaining(), 3);
        assert_eq!(later.next_token(), Duration::from_millis(750));
        assert_eq!(later.reset(), Duration::from_millis(1750));
    }

    #[test]
    fn out_of_order_timestamps_do_not_corrupt_state() {
        let quotas = [quota("1/s", 2)];
        let mut tats = [0];
        let mut take_at = |at| decide(&mut tats, &quotas, 1, at, CheckMode::Consume, false);
        assert!(take_at(NOW + 10 * SECOND).allowed());
        // An older event: the bucket is judged as it stood, never refilled by going back.
        assert!(!take_at(NOW).allowed());
        assert!(take_at(NOW + 10 * SECOND).allowed());
    }

    #[test]
    fn agrees_with_governor_on_a_burst_and_a_refill() {
        use governor::{RateLimiter, clock::FakeRelativeClock};
        let ours = quota("3/s", 3);
        let clock = FakeRelativeClock::default();
        let theirs = RateLimiter::direct_with_clock(ours.to_governor(), clock.clone());
        let mut tats = [0];
        let mut now = NOW;
        for step in 0..200u64 {
            let advance = (step * 7_919) % 500;
            clock.advance(Duration::from_millis(advance));
            now += advance * 1_000_000;
            assert_eq!(
                decide(&mut tats, &[ours], 1, now, CheckMode::Consume, false).allowed(),
                theirs.check().is_ok(),
                "step {step}"
            );
        }
    }

    #[test]
    fn consumption_carries_over_a_change_of_rate_in_tokens() {
        // 10 of 10 tokens used at 1/s; the rule becomes 10/min: still 10 used, now
        // refilling one every 6 s.
        let old = [quota("10/s", 10)];
        let mut tats = [0];
        decide(&mut tats, &old, 10, NOW, CheckMode::Consume, false);
        let new = [quota("10/min", 10)];
        let mut converted = [0];
        carry_over(&tats, &[old[0].interval_nanos()], &new, NOW, &mut converted);
        let d = decide(&mut converted, &new, 1, NOW, CheckMode::Peek, false);
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Duration::from_secs(6));

        // A full bucket stays full, and an unchanged interval is the identity.
        let mut full = [0];
        carry_over(&[0], &[old[0].interval_nanos()], &new, NOW, &mut full);
        assert_eq!(full, [0]);
        let mut same = [0];
        carry_over(&tats, &[old[0].interval_nanos()], &old, NOW, &mut same);
        assert_eq!(same, tats);
    }

    #[test]
    fn new_quotas_inherit_from_the_closest_old_interval() {
        let old = [quota("100/min", 100), quota("5/s", 5)];
        let mut tats = [0, 0];
        decide(&mut tats, &old, 5, NOW, CheckMode::Consume, false);
        let intervals = old.map(|q| q.interval_nanos());
        // Only a per-second quota remains: it inherits the per-second consumption.
        let new = [quota("4/s", 5)];
        let mut converted = [0];
        carry_over(&tats, &intervals, &new, NOW, &mut converted);
        assert!(!decide(&mut converted, &new, 1, NOW, CheckMode::Peek, false).allowed());
    }

    /// A plain token bucket: `level` is tokens × interval, in nanoseconds, so refill is
    /// exact integer arithmetic. Equivalent to GCRA for time that never goes backwards.
    struct Reference {
        level: u64,
        last: u64,
        quota: Quota,
    }

    impl Reference {
        fn new(quota: Quota, now: u64) -> Self {
            Reference {
                level: quota.capacity_nanos(),
                last: now,
                quota,
            }
        }

        fn refill(&mut self, now: u64) {
            self.level = (self.level + (now - self.last)).min(self.quota.capacity_nanos());
            self.last = now;
        }

        fn admits(&self, cost: u64) -> bool {
            cost * self.quota.interval_nanos() <= self.level
        }

        fn take(&mut self, cost: u64) {
            self.level -= cost * self.quota.interval_nanos();
        }

        fn remaining(&self) -> u64 {
            self.level / self.quota.interval_nanos()
        }
    }

    proptest::proptest! {
        /// With a delay, the requests leave (decided at `now`, passed on at `now + delay`)
        /// as a conforming GCRA stream of what passes at once: never more than `N` plus one
        /// per interval in any span. No one waits beyond `max_delay`, and a refusal names a
        /// wait after which a request is admitted.
        #[test]
        fn held_requests_leave_at_the_rate(
            gaps in proptest::collection::vec(0u64..400_000_000, 1..200),
            after in 1u32..4,
        ) {
            let quotas = [quota("10/s", 4)];
            let interval = SECOND / 10;
            let max = 700_000_000;
            let shaping = delayed(max, Some(after));
            let mut tats = [0];
            let mut now = NOW;
            let mut leaves = Vec::new();
            for gap in gaps {
                now += gap;
                let d = take(&mut tats, &quotas, now, &shaping);
                if d.allowed() {
                    let wait = d.delay().as_nanos() as u64;
                    proptest::prop_assert!(wait <= max);
                    leaves.push(now + wait);
                } else {
                    let mut probe = tats;
                    let later = now + d.retry_after().as_nanos() as u64;
                    let again = super::decide(&mut probe, &quotas, ask(1, later, CheckMode::Peek, false, &shaping));
                    proptest::prop_assert!(again.allowed(), "retry-after admits");
                }
            }
            leaves.sort_unstable();
            for i in 0..leaves.len() {
                for j in i..leaves.len() {
                    let count = (j - i + 1) as u64;
                    let span = leaves[j] - leaves[i];
                    proptest::prop_assert!(
                        count <= u64::from(after) + span / interval,
                        "{} leave within {} ns", count, span
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn matches_a_plain_token_bucket(
            count in 1u32..50,
            period_ms in 1u64..5_000,
            extra_burst in 0u32..20,
            steps in proptest::collection::vec((0u64..2_000_000_000, 1u64..5), 1..200),
        ) {
            let rate = crate::quota::Rate::new(
                NonZeroU32::new(count).unwrap(),
                Duration::from_millis(period_ms),
            ).unwrap();
            let burst = NonZeroU32::new(count + extra_burst).unwrap();
            let quota = Quota::new(rate, burst).unwrap();
            let mut tats = [0];
            let mut now = NOW;
            let mut model = Reference::new(quota, now);
            for (advance, cost) in steps {
                now += advance;
                model.refill(now);
                let cost = cost.min(u64::from(burst.get()));
                let decision = decide(&mut tats, &[quota], cost, now, CheckMode::Consume, false);
                proptest::prop_assert_eq!(decision.allowed(), model.admits(cost));
                if decision.allowed() {
                    model.take(cost);
                }
                proptest::prop_assert_eq!(decision.remaining(), model.remaining());
            }
        }

        #[test]
        fn several_quotas_act_as_one_all_or_nothing_bucket(
            steps in proptest::collection::vec((0u64..400_000_000, 1u64..3), 1..300),
        ) {
            let quotas = [quota("10/s", 10), quota("3/s", 4)];
            let mut tats = [0, 0];
            let mut now = NOW;
            let mut models = quotas.map(|q| Reference::new(q, now));
            for (advance, cost) in steps {
                now += advance;
                models.iter_mut().for_each(|m| m.refill(now));
                let decision = decide(&mut tats, &quotas, cost, now, CheckMode::Consume, false);
                let admitted = models.iter().all(|m| m.admits(cost));
                proptest::prop_assert_eq!(decision.allowed(), admitted);
                if admitted {
                    models.iter_mut().for_each(|m| m.take(cost));
                }
            }
        }

        /// The one-quota path is the general engine's arithmetic, not a second engine: the
        /// same decision and the same stored TAT for every mode, strictness and shaping.
        #[test]
        fn the_one_quota_path_decides_as_the_general_engine(
            steps in proptest::collection::vec((0u64..400_000_000, 0u64..4, 0u8..4, proptest::bool::ANY), 1..200),
            burst in 1u32..6,
            delay in proptest::option::of((0u64..2_000_000_000, proptest::option::of(0u32..4))),
        ) {
            let quotas = [quota("10/s", burst)];
            let shaping = delay.map_or(Shaping::NONE, |(max, after)| delayed(max, after));
            let (mut one, mut many) = ([0], [0]);
            let mut now = NOW;
            for (advance, cost, mode, strict) in steps {
                now += advance;
                let mode = [CheckMode::Consume, CheckMode::Peek, CheckMode::Charge, CheckMode::Session][usize::from(mode)];
                let fast = super::decide_one(&mut one[0], &quotas[0], ask(cost, now, mode, strict, &shaping));
                let general = super::decide_many(&mut many, &quotas, ask(cost, now, mode, strict, &shaping));
                proptest::prop_assert_eq!(&fast, &general);
                proptest::prop_assert_eq!(one, many);
            }
        }
    }
}
