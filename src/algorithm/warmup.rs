//! Warm-up (`warmup = "30s"` on a token-bucket rule): Guava's `SmoothWarmingUp`, as extra
//! debt on the one GCRA engine.
//!
//! # Guava's model
//!
//! A limiter of stable interval `T` (one request per `T`) and warm-up period `W` keeps
//! *stored permits* `s`, a measure of coldness: they accumulate while the limiter is idle
//! (one per `W / max` of idleness, up to `max`) and are spent by requests. Spending a stored
//! permit costs time that depends on how cold the limiter is:
//!
//! ```text
//!  interval ▲
//!  3T (cold)│                  ╱
//!           │                ╱  slope = 2T / (max − threshold)
//!        T  │──────────────╱
//!           └──────────────┴───┴──► stored permits
//!           0          threshold  max
//! ```
//!
//! With Guava's cold factor 3: `threshold = W / (2T)` and `max = threshold + W / (2T)`, so
//! the area under the slope — the time taken to spend the permits from `max` down to
//! `threshold` under full demand — is exactly `W`. Below the threshold, and for requests
//! beyond the stored permits, the interval is `T`. Spending `k` permits from `s` costs the
//! integral of the curve over `[s − k, s]` (Guava's `storedPermitsToWaitTime`).
//!
//! # On the GCRA engine
//!
//! The bucket's state is its theoretical arrival time (TAT) and its stored permits. A
//! request is admitted as GCRA admits it — the debt before it plus `cost × T` within the
//! tolerance (the burst, or the delay's) — and then moves the TAT by the *warm* cost, so
//! the request after it waits longer while the bucket is cold: as in Guava, a request's
//! own cost is paid by the one after it. A fresh bucket starts cold (`s = max`), as
//! Guava's limiter does; permits accrue only while the TAT is in the past (idleness).
//!
//! Under full demand from cold the permitted rate therefore climbs from `1/(3T)` to `1/T`
//! over `W`, then stays at `1/T`; an idle stretch of `W` makes it cold again.

use super::{Ask, CheckMode, gcra};
use crate::Quota;
use crate::decision::Decision;

/// Guava's cold factor: a cold limiter admits at a third of its stable rate.
pub(crate) const COLD_FACTOR: f64 = 3.0;

/// The curve of one quota warming up over a period: all in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ramp {
    stable: f64,
    threshold: f64,
    max: f64,
    slope: f64,
    cool_down: f64,
}

impl Ramp {
    /// The ramp of a stable interval of `interval` ns warming up over `period` ns.
    pub(crate) fn new(interval: u64, period: u64) -> Ramp {
        let stable = interval.max(1) as f64;
        let cold = stable * COLD_FACTOR;
        let period = period.max(1) as f64;
        let threshold = 0.5 * period / stable;
        let max = threshold + 2.0 * period / (stable + cold);
        Ramp {
            stable,
            threshold,
            max,
            slope: (cold - stable) / (max - threshold).max(f64::MIN_POSITIVE),
            cool_down: period / max.max(f64::MIN_POSITIVE),
        }
    }

    /// The most stored permits (fully cold).
    pub(crate) fn max_permits(&self) -> f64 {
        self.max
    }

    /// The interval a permit costs at `stored` permits.
    pub(crate) fn interval_at(&self, stored: f64) -> f64 {
        self.stable + (stored - self.threshold).max(0.0) * self.slope
    }

    /// Guava's `storedPermitsToWaitTime`: the time `take` of `stored` permits cost.
    pub(crate) fn cost_of_stored(&self, stored: f64, take: f64) -> f64 {
        let above = (stored - self.threshold).max(0.0);
        let from_above = above.min(take);
        let sloped =
            from_above * (self.interval_at(stored) + self.interval_at(stored - from_above)) / 2.0;
        sloped + self.stable * (take - from_above)
    }

    /// Stored permits after `idle` ns without requests, from `stored`.
    pub(crate) fn cooled(&self, stored: f64, idle: u64) -> f64 {
        (stored + idle as f64 / self.cool_down).min(self.max)
    }

    /// Time (ns) from `stored` permits until fully cold.
    pub(crate) fn until_cold(&self, stored: f64) -> u64 {
        ((self.max - stored).max(0.0) * self.cool_down).ceil() as u64
    }
}

/// A warming bucket's state: its TAT and the permits it had stored at that TAT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Warm {
    pub(crate) tat: u64,
    pub(crate) stored: f64,
}

impl Warm {
    /// A bucket never used: cold.
    pub(crate) fn fresh(ramp: &Ramp) -> Warm {
        Warm {
            tat: 0,
            stored: ramp.max_permits(),
        }
    }

    /// Stored permits as of `now`, after any idleness since the TAT.
    pub(crate) fn stored_at(&self, ramp: &Ramp, now: u64) -> f64 {
        ramp.cooled(self.stored, now.saturating_sub(self.tat))
    }
}

/// Decides a request of `cost` at `now` against a warming `quota`: the GCRA engine's
/// arguments, plus the bucket's ramp.
pub(crate) fn decide(state: &mut Warm, quota: &Quota, ramp: &Ramp, ask: Ask<'_>) -> Decision {
    let (cost, now, mode, strict, shaping) = ask.parts();
    let interval = quota.interval_nanos();
    let tolerance = shaping.tolerance(quota);
    let stored = state.stored_at(ramp, now);
    let start = state.tat.max(now);
    let stable_cost = cost.saturating_mul(interval);
    let before = start - now;
    let allowed = before.saturating_add(stable_cost) <= tolerance;
    let take = mode.takes(allowed);
    let mut debt = before;
    let mut hold = 0;
    if take {
        let spent = stored.min(cost as f64);
        let warm = ramp.cost_of_stored(stored, spent) + (cost as f64 - spent) * ramp.stable;
        let warm = (warm.ceil() as u64).max(stable_cost);
        state.tat = start.saturating_add(warm);
        state.stored = stored - spent;
        debt = state.tat - now;
        hold = shaping.hold(quota, before.saturating_add(stable_cost));
    } else if strict && mode == CheckMode::Consume {
        let held = gcra::strict_hold(now, interval, tolerance, stable_cost);
        if held > state.tat {
            state.stored = stored;
            state.tat = held;
            debt = held - now;
        }
    }
    // From the state after the decision (strict may have moved the TAT).
    let retry = if allowed {
        0
    } else {
        gcra::retry_after(state.tat.max(now), stable_cost, tolerance, now)
    };
    Decision::bucket(allowed, 0, u64::from(quota.burst()), interval, debt, retry).with_delay(hold)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;
    use crate::algorithm::{Shaping, ask};

    const SECOND: u64 = 1_000_000_000;
    const NOW: u64 = 1_000_000 * SECOND;

    fn quota(rate: &str) -> Quota {
        Quota::new(rate.parse().unwrap(), NonZeroU32::new(1).unwrap()).unwrap()
    }

    /// One request of cost 1 at `at`, consuming, not strict.
    fn take(state: &mut Warm, q: &Quota, ramp: &Ramp, at: u64, shaping: &Shaping) -> Decision {
        decide(
            state,
            q,
            ramp,
            ask(1, at, CheckMode::Consume, false, shaping),
        )
    }

    /// 2 permits/s (T = 500 ms) warming up over 4 s: threshold 4, max 8, cold interval
    /// 1.5 s, by Guava's formulas.
    #[test]
    fn the_ramp_matches_guavas_numbers() {
        let ramp = Ramp::new(500_000_000, 4 * SECOND);
        assert!((ramp.threshold - 4.0).abs() < 1e-9);
        assert!((ramp.max - 8.0).abs() < 1e-9);
        assert!((ramp.interval_at(8.0) - 1.5e9).abs() < 1.0);
        assert!((ramp.interval_at(6.0) - 1.0e9).abs() < 1.0);
        assert!((ramp.interval_at(4.0) - 0.5e9).abs() < 1.0);
        // Spending every permit above the threshold takes exactly the warm-up period.
        assert!((ramp.cost_of_stored(8.0, 4.0) - 4.0e9).abs() < 1.0);
        // Below the threshold a permit costs the stable interval.
        assert!((ramp.cost_of_stored(3.0, 1.0) - 0.5e9).abs() < 1.0);
        // Cooling down: max permits over the warm-up period.
        assert!((ramp.cooled(0.0, 2 * SECOND) - 4.0).abs() < 1e-9);
        assert_eq!(ramp.until_cold(0.0), 4 * SECOND);
    }

    /// Full demand from cold: the gaps between admissions follow Guava's integral — the
    /// first gap is the mean interval over the first permit from max, and so on — and the
    /// rate reaches the stable one after exactly the warm-up period.
    #[test]
    fn full_demand_from_cold_ramps_as_guava_does() {
        let q = quota("2/s");
        let ramp = Ramp::new(q.interval_nanos(), 4 * SECOND);
        let mut state = Warm::fresh(&ramp);
        let mut admitted = Vec::new();
        let mut now = NOW;
        while admitted.len() < 8 {
            let d = take(&mut state, &q, &ramp, now, &Shaping::NONE);
            if d.allowed() {
                admitted.push(now);
            } else {
                now += d.retry_after().as_nanos() as u64;
            }
        }
        let gaps: Vec<u64> = admitted
            .windows(2)
            .map(|w| (w[1] - w[0]) / 1_000_000)
            .collect();
        // Permit 8→7 costs the mean of 1.5 s and 1.25 s, 7→6 of 1.25 s and 1.0 s, and so on
        // down to the threshold; then the stable 500 ms.
        assert_eq!(gaps, [1375, 1125, 875, 625, 500, 500, 500]);
        // The cold permits took exactly the warm-up period.
        assert_eq!(admitted[4] - admitted[0], 4 * SECOND);
    }

    /// Under full demand from cold, the interval at time `t` into the warm-up follows from
    /// Guava's integral in closed form: `T·√(1 + 8·(1 − t/W))` — three times `T` at the start,
    /// `T` at `W`. The engine, stepped request by request, matches it at several points.
    #[test]
    fn the_ramp_follows_guavas_integral_over_time() {
        let q = quota("100/s");
        let period = 30 * SECOND;
        let ramp = Ramp::new(q.interval_nanos(), period);
        let mut state = Warm::fresh(&ramp);
        let mut now = NOW;
        let mut gaps = Vec::new();
        while now < NOW + 35 * SECOND {
            let d = take(&mut state, &q, &ramp, now, &Shaping::NONE);
            assert!(d.allowed(), "each request comes exactly when admitted");
            let next = state.tat;
            gaps.push((now - NOW, next - now));
            now = next;
        }
        for at in [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 28.0, 29.5, 32.0] {
            let t = (at * 1e9) as u64;
            let &(_, gap) = gaps.iter().rev().find(|&&(when, _)| when <= t).unwrap();
            let expected = 1e7 * (1.0 + 8.0 * (1.0 - at / 30.0_f64).max(0.0)).sqrt();
            let error = (gap as f64 - expected).abs() / expected;
            assert!(
                error < 0.02,
                "at {at} s: gap {gap} ns, Guava's curve {expected:.0} ns"
            );
        }
    }

    #[test]
    fn a_strict_refusal_holds_the_refill_back_and_says_so() {
        let q = quota("4/s");
        let ramp = Ramp::new(q.interval_nanos(), SECOND);
        let mut state = Warm {
            tat: NOW,
            stored: 0.0,
        };
        let mode = CheckMode::Consume;
        assert!(
            decide(
                &mut state,
                &q,
                &ramp,
                ask(1, NOW, mode, true, &Shaping::NONE)
            )
            .allowed()
        );
        let refused = decide(
            &mut state,
            &q,
            &ramp,
            ask(1, NOW + 100_000_000, mode, true, &Shaping::NONE),
        );
        assert!(!refused.allowed());
        // Held until one interval after this knock; the figures describe that state.
        assert_eq!(state.tat, NOW + 350_000_000);
        assert_eq!(refused.reset(), Duration::from_millis(250));
        assert_eq!(refused.retry_after(), Duration::from_millis(250));
    }

    #[test]
    fn idleness_cools_a_warm_bucket_again() {
        let q = quota("2/s");
        let ramp = Ramp::new(q.interval_nanos(), 4 * SECOND);
        let mut state = Warm {
            tat: NOW,
            stored: 0.0,
        };
        // Warm: two requests half a second apart.
        assert!(take(&mut state, &q, &ramp, NOW, &Shaping::NONE).allowed());
        assert_eq!(state.tat, NOW + SECOND / 2);
        // Idle for the warm-up period: cold again, the next request costs 1.375 s.
        let later = NOW + SECOND / 2 + 4 * SECOND;
        assert!(take(&mut state, &q, &ramp, later, &Shaping::NONE).allowed());
        assert_eq!(state.tat - later, 1_375_000_000);
        let refused = take(&mut state, &q, &ramp, later + SECOND, &Shaping::NONE);
        assert!(!refused.allowed());
        assert_eq!(refused.retry_after(), Duration::from_millis(375));
    }

    #[test]
    fn with_a_delay_a_request_waits_its_turn_and_the_next_pays_the_warm_cost() {
        let q = quota("2/s");
        let ramp = Ramp::new(q.interval_nanos(), 4 * SECOND);
        let shaping = Shaping::NONE.with_delay(crate::Delay::new(Duration::from_secs(10), None));
        let mut state = Warm::fresh(&ramp);
        let holds: Vec<u128> = (0..4)
            .map(|_| {
                take(&mut state, &q, &ramp, NOW, &shaping)
                    .delay()
                    .as_millis()
            })
            .collect();
        // As Guava's acquire(): each waits for the previous one's (warm) cost.
        assert_eq!(holds, [0, 1375, 2500, 3375]);
    }
}
