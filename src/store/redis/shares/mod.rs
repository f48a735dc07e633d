//! Budgets divided among instances by demand, through Redis: each instance claims its part
//! of a budget it hands out in shares of its own (the service's RLQS front end divides a
//! rule among the Envoys it serves; with several gateways, each first claims its part
//! here), so the parts of every instance together never exceed the budget.
//!
//! A part is a floor (a tenth of the budget split evenly among the instances claiming it)
//! plus the rest by demand, limited to the room the others' claims leave. The claim an
//! instance writes is the larger of its part and what it still holds out — shares handed
//! out that it cannot take back until they are acknowledged or expire — so a part that
//! shrinks is given up only once the instance has actually shrunk, and a part grows only
//! into room nobody holds. A part that moved by less than the hysteresis stays as it was
//! (every change refills the shares handed out). Claims expire after their lifetime unless
//! renewed, so a dead instance's part comes back. Time is the Redis server's.
//!
//! All budgets of all instances share one hash tag (`{shares}`): on a Cluster they live on
//! one master and one call claims up to [`CLAIMS_PER_CALL`] of them.

mod claim;

use std::time::Duration;

/// Budgets claimed in one call of the script, at most; more take several calls.
pub const CLAIMS_PER_CALL: usize = 200;

/// One instance's claim on one budget, as [`RedisStore::claim_shares`] sends it.
///
/// [`RedisStore::claim_shares`]: super::RedisStore::claim_shares
///
/// ```
/// use tollgate::store::ShareClaim;
///
/// // A 100/s budget with a burst of 20; this instance sees 30 requests a second and has
/// // handed out nothing yet.
/// let claim = ShareClaim::new("api/203.0.113.7", 100.0, 20).demand(30.0);
/// assert_eq!(claim.held_rate, 0.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ShareClaim {
    /// The budget's name: every instance dividing it uses the same.
    pub budget: String,
    /// The budget: tokens a second…
    pub rate: f64,
    /// …and tokens at once.
    pub burst: u32,
    /// This instance's demand, requests a second.
    pub demand: f64,
    /// Tokens a second this instance has handed out and cannot take back yet.
    pub held_rate: f64,
    /// Tokens at once it has handed out and cannot take back yet.
    pub held_burst: u32,
    /// Its part now, tokens a second (0 before its first).
    pub part_rate: f64,
    /// Its part now, tokens at once.
    pub part_burst: u32,
}

impl ShareClaim {
    /// A claim on `budget`, `rate` tokens a second and `burst` at once, with no demand,
    /// nothing held and no part yet.
    pub fn new(budget: impl Into<String>, rate: f64, burst: u32) -> ShareClaim {
        ShareClaim {
            budget: budget.into(),
            rate,
            burst,
            demand: 0.0,
            held_rate: 0.0,
            held_burst: 0,
            part_rate: 0.0,
            part_burst: 0,
        }
    }

    /// With this instance's demand, requests a second.
    pub fn demand(mut self, per_second: f64) -> ShareClaim {
        self.demand = per_second;
        self
    }

    /// With what it has handed out and cannot take back yet.
    pub fn held(mut self, rate: f64, burst: u32) -> ShareClaim {
        self.held_rate = rate;
        self.held_burst = burst;
        self
    }

    /// With its part now (what the last claim answered).
    pub fn part(mut self, rate: f64, burst: u32) -> ShareClaim {
        self.part_rate = rate;
        self.part_burst = burst;
        self
    }
}

/// This instance's part of a budget: what it may hand out now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharePart {
    /// Tokens a second (rounded down to a millionth).
    pub rate: f64,
    /// Tokens at once.
    pub burst: u32,
    /// Instances claiming the budget, this one included.
    pub instances: u32,
}

/// How budgets are divided among instances.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::ShareTerms;
///
/// let terms = ShareTerms::new(Duration::from_secs(17));
/// assert_eq!((terms.floor, terms.hysteresis), (0.1, 0.05));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareTerms {
    /// How long a claim holds unless renewed: at least as long as any share handed out
    /// under it.
    pub lifetime: Duration,
    /// The part of a budget split evenly among the instances, so a new one is not starved.
    pub floor: f64,
    /// How much a part must move (a part of the budget) to change.
    pub hysteresis: f64,
}

impl ShareTerms {
    /// Claims living `lifetime`, a floor of a tenth, a hysteresis of a twentieth.
    pub fn new(lifetime: Duration) -> ShareTerms {
        ShareTerms {
            lifetime,
            floor: 0.1,
            hysteresis: 0.05,
        }
    }
}
