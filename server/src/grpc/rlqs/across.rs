//! Several gateways dividing one rule among their Envoys, through Redis: each gateway
//! claims its part of each bucket's rule (`RedisStore::claim_shares`: a floor split
//! evenly among the gateways, the rest by their Envoys' demand, only from room no other
//! gateway holds) and divides that part among its own Envoys as a single gateway divides
//! the rule. Its claim is never below what its Envoys may still enforce, so the parts —
//! and so the shares of every Envoy of every gateway — never sum past the rule.
//!
//! When Redis cannot be reached a gateway keeps its last part for half a claim's lifetime,
//! then falls back to the smaller of that part and the rule divided by the gateways it
//! last counted: the bound holds while every gateway is cut off alike; one cut off alone
//! may be given its part again by the others once its claim expires (rate × (1 + 1/n) at
//! worst, for as long as the partition lasts).

use std::time::Duration;

use tollgate::store::{ShareClaim, SharePart, ShareTerms};

use super::division::{Allowance, Bucket};

/// How much longer than an assignment a claim lives: shares sent between two ticks
/// (a second apart) live past the claim written at the first.
const CLAIM_MARGIN: Duration = Duration::from_secs(2);

/// The terms claims are made under, for assignments living `ttl`.
pub(crate) fn terms(ttl: Duration) -> ShareTerms {
    ShareTerms::new(ttl + CLAIM_MARGIN)
}

/// This gateway's part of one bucket's rule, and when Redis last granted it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Part {
    /// What this gateway divides among its Envoys.
    pub(crate) allowance: Allowance,
    /// Gateways dividing the rule, this one included.
    pub(crate) gateways: u32,
    /// When it was granted (the service's clock).
    pub(crate) at: Duration,
}

/// The claim for bucket `key` under `rule` (a rate: allow-all buckets claim nothing).
pub(crate) fn claim(
    key: &str,
    rule: Allowance,
    bucket: &Bucket,
    part: Option<&Part>,
    now: Duration,
    ttl: Duration,
) -> Option<ShareClaim> {
    let Allowance::Rate { per_second, burst } = rule else {
        return None;
    };
    let demand: f64 = bucket.envoys().map(|(_, demand, _)| demand).sum();
    let (held_rate, held_burst) = bucket.committed(now, ttl);
    let (part_rate, part_burst) = match part.map(|part| part.allowance) {
        Some(Allowance::Rate { per_second, burst }) => (per_second, burst),
        _ => (0.0, 0),
    };
    Some(
        ShareClaim::new(format!("rlqs:{key}"), per_second, burst)
            .demand(demand)
            .held(held_rate, held_burst)
            .part(part_rate, part_burst),
    )
}

/// What Redis granted, as an allowance under `rule` (never above it).
pub(crate) fn granted(rule: Allowance, part: &SharePart, now: Duration) -> Part {
    let allowance = match rule {
        Allowance::Rate { per_second, burst } => Allowance::Rate {
            per_second: part.rate.min(per_second),
            burst: part.burst.min(burst),
        },
        Allowance::AllowAll => Allowance::AllowAll,
    };
    Part {
        allowance,
        gateways: part.instances.max(1),
        at: now,
    }
}

/// The allowance without Redis: the last part while it is recent (half a claim's
/// lifetime), then the smaller of it and `rule` divided among `gateways`.
pub(crate) fn without_redis(
    rule: Allowance,
    last: Option<&Part>,
    gateways: u32,
    now: Duration,
    ttl: Duration,
) -> Allowance {
    let Allowance::Rate { per_second, burst } = rule else {
        return rule;
    };
    if let Some(last) = last
        && now.saturating_sub(last.at) < terms(ttl).lifetime / 2
    {
        return last.allowance;
    }
    let gateways = gateways.max(1);
    let even = (per_second / f64::from(gateways), burst / gateways);
    let (rate, tokens) = match last.map(|last| last.allowance) {
        Some(Allowance::Rate { per_second, burst }) => (per_second.min(even.0), burst.min(even.1)),
        _ => even,
    };
    Allowance::Rate {
        per_second: rate,
        burst: tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Allowance = Allowance::Rate {
        per_second: 100.0,
        burst: 20,
    };

    fn part(per_second: f64, burst: u32, at: u64) -> Part {
        Part {
            allowance: Allowance::Rate { per_second, burst },
            gateways: 2,
            at: Duration::from_secs(at),
        }
    }

    #[test]
    fn a_grant_never_exceeds_the_rule() {
        let grant = SharePart {
            rate: 150.0,
            burst: 30,
            instances: 0,
        };
        let part = granted(RULE, &grant, Duration::ZERO);
        assert_eq!(part.allowance, RULE);
        assert_eq!(part.gateways, 1);
    }

    #[test]
    fn without_redis_the_last_part_holds_for_a_while_then_the_smaller_of_it_and_an_even_split() {
        let ttl = Duration::from_secs(4);
        // Lifetime 6 s: the last part holds for 3 s.
        let last = part(80.0, 4, 10);
        let at = |secs| Duration::from_secs(secs);
        assert_eq!(
            without_redis(RULE, Some(&last), 2, at(12), ttl),
            last.allowance
        );
        assert_eq!(
            without_redis(RULE, Some(&last), 2, at(13), ttl),
            Allowance::Rate {
                per_second: 50.0,
                burst: 4
            }
        );
        // A gateway that never reached Redis divides the rule by the gateways it knows of.
        assert_eq!(
            without_redis(RULE, None, 4, at(13), ttl),
            Allowance::Rate {
                per_second: 25.0,
                burst: 5
            }
        );
        assert_eq!(
            without_redis(Allowance::AllowAll, None, 4, at(13), ttl),
            Allowance::AllowAll
        );
    }

    #[test]
    fn the_claim_says_what_the_envoys_may_still_enforce() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 40.0,
            burst: 8,
        });
        let now = Duration::from_secs(5);
        bucket.report(1, 30, Duration::from_secs(1), now);
        let tuning = super::super::division::Tuning::default();
        bucket.divide(now, &tuning);
        let last = part(40.0, 8, 5);
        let made = claim("api", RULE, &bucket, Some(&last), now, tuning.ttl).unwrap();
        assert_eq!(made.budget, "rlqs:api");
        assert_eq!((made.rate, made.burst), (100.0, 20));
        assert_eq!(made.demand, 30.0);
        assert_eq!((made.part_rate, made.part_burst), (40.0, 8));
        assert!(made.held_rate > 39.0 && made.held_burst == 8, "{made:?}");
        assert!(
            claim(
                "health",
                Allowance::AllowAll,
                &bucket,
                None,
                now,
                tuning.ttl
            )
            .is_none()
        );
    }
}
