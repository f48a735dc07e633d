//! The limiting algorithms: pure arithmetic over an injected `now`, shared by every store.
//!
//! - [`gcra`]: the token bucket (the default).
//! - [`window`]: the sliding- and fixed-window counters; [`subwindow`]: the sliding window
//!   at a finer resolution.
//! - [`discrete`]: smyte/ratelimit's bucket, refilled in whole steps at whole intervals,
//!   for the caller-defined buckets of the Redis-protocol front end (`RL.*`).
//!
//! Nothing here knows about rules, stores or requests: an engine is given the quotas, the
//! state words, the cost, the [`CheckMode`] and the time, and returns a [`Decision`].

pub(crate) mod discrete;
pub(crate) mod gcra;
pub(crate) mod log;
pub(crate) mod shaping;
pub(crate) mod subwindow;
pub(crate) mod warmup;
pub(crate) mod window;

use serde::Deserialize;

use crate::decision::Decision;

pub use shaping::{Delay, Shaping};

/// How a rule counts (`algorithm = "gcra" | "sliding-window" | "fixed-window"`).
///
/// | | smooths bursts | edge stampede | state per quota |
/// |---|---|---|---|
/// | `gcra` (token bucket) | yes: at most `burst` at once, then the rate | no | one timestamp |
/// | `sliding-window` | mostly: at most 2×N in any one period | no | two counts and a window start |
/// | `fixed-window` | no: N at the end of a window and N more at the start of the next | yes: every client's budget returns at the same instant | one count and a window start |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Algorithm {
    /// The token bucket, as the generic cell rate algorithm.
    #[default]
    Gcra,
    /// The two-window weighted counter.
    SlidingWindow,
    /// A counter reset at every period boundary.
    FixedWindow,
    /// Exact: a timestamp per admitted request, counted over the rolling window.
    SlidingLog,
    /// smyte/ratelimit's bucket: `refill` tokens added at once every `period`, at most
    /// `burst`. Only for caller-defined buckets ([`Limits::take_from`](crate::Limits::take_from),
    /// the `RL.*` commands); a rule cannot choose it.
    #[serde(skip)]
    DiscreteRefill,
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding-window",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::DiscreteRefill => "discrete-refill",
        })
    }
}

/// Whether a check takes tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckMode {
    /// Take `cost` tokens if every quota admits the request.
    Consume,
    /// Report what would happen, changing nothing.
    Peek,
    /// Take `cost` tokens whatever the bucket holds, even past empty (`count_status`: the
    /// response is one that counts). The bucket owes the difference and refuses until it
    /// has refilled it.
    Charge,
    /// As `Consume`, for a caller-defined bucket taken from as a session (smyte's
    /// `RL.SESSIONIZE`): the bucket also remembers when the current session started.
    /// The rule algorithms treat it as `Consume`.
    Session,
    /// Give `cost` tokens back (a reservation larger than what the request used, an
    /// out-of-band refund): never past full. The decision then describes the bucket as a
    /// peek at no cost would.
    Refund,
}

impl CheckMode {
    /// Whether a check in this mode takes its tokens, given whether every quota admits it.
    pub(crate) fn takes(self, admitted: bool) -> bool {
        match self {
            CheckMode::Consume | CheckMode::Session => admitted,
            CheckMode::Charge => true,
            CheckMode::Peek | CheckMode::Refund => false,
        }
    }
}

/// What one decision asks of a bucket's engine (GCRA, warm-up): its cost, its instant in
/// nanoseconds, its mode, and the rule's strictness and shaping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask<'a> {
    pub(crate) cost: u64,
    pub(crate) now: u64,
    pub(crate) mode: CheckMode,
    pub(crate) strict: bool,
    pub(crate) shaping: &'a Shaping,
}

impl<'a> Ask<'a> {
    /// Its fields, to be named at once: cost, instant, mode, strictness, shaping.
    #[inline]
    pub(crate) fn parts(self) -> (u64, u64, CheckMode, bool, &'a Shaping) {
        (self.cost, self.now, self.mode, self.strict, self.shaping)
    }
}

/// An [`Ask`] in one line, for tests.
#[cfg(test)]
pub(crate) fn ask(
    cost: u64,
    now: u64,
    mode: CheckMode,
    strict: bool,
    shaping: &Shaping,
) -> Ask<'_> {
    Ask {
        cost,
        now,
        mode,
        strict,
        shaping,
    }
}

/// What a check of `cost` in `mode` takes from `quota`: the cost, or for a quota counting
/// requests (a rule's `requests`) one per admission and nothing for a settlement.
pub(crate) fn quota_cost(quota: &crate::Quota, cost: u64, mode: CheckMode) -> u64 {
    match (quota.counts_requests(), mode) {
        (false, _) => cost,
        (true, CheckMode::Charge | CheckMode::Refund) => 0,
        (true, _) => cost.min(1),
    }
}

/// Folds one quota's decision into the rule's: the most restrictive quota is described.
pub(crate) fn keep_most_restrictive(described: &mut Option<Decision>, candidate: Decision) {
    let replace = match described {
        Some(current) => more_restrictive(&candidate, current),
        None => true,
    };
    if replace {
        *described = Some(candidate);
    }
}

/// A counted decision — a window's or a ring of sub-windows' — described quota by quota:
/// the most restrictive quota speaks, with the latest reset of them all.
#[derive(Default)]
pub(crate) struct Counted {
    described: Option<Decision>,
    reset: u64,
}

impl Counted {
    /// Quota `index`, which counts `used` in units of `scale` (its estimate, scaled) after
    /// a request of `cost` was `allowed` or not; `until_at_most(n)` is how long (ns) until
    /// it counts at most `n`.
    pub(crate) fn quota(
        &mut self,
        index: usize,
        quota: &crate::Quota,
        allowed: bool,
        (used, scale): (u128, u128),
        cost: u64,
        until_at_most: impl Fn(i128) -> u64,
    ) {
        let limit = u64::from(quota.rate().count());
        let remaining = (u128::from(limit) * scale).saturating_sub(used) / scale.max(1);
        let remaining = u64::try_from(remaining).unwrap_or(u64::MAX);
        let next = if remaining >= limit {
            0
        } else {
            until_at_most(i128::from(limit) - i128::from(remaining) - 1)
        };
        let retry = if allowed {
            0
        } else {
            until_at_most(i128::from(limit) - i128::from(cost))
        };
        self.reset = self.reset.max(until_at_most(0));
        let candidate = Decision::counted(
            allowed,
            u32::try_from(index).unwrap_or(u32::MAX),
            limit,
            // The quota's period as written (a calendar month is nominally 30 days).
            quota.period_nanos(),
            remaining,
            next,
            retry,
            0,
        );
        keep_most_restrictive(&mut self.described, candidate);
    }

    /// The rule's decision: the most restrictive quota's, or unlimited without quotas.
    pub(crate) fn decision(self) -> Decision {
        let reset = self.reset;
        self.described
            .map_or(Decision::unlimited(), |decision| decision.with_reset(reset))
    }
}

/// Which of two quotas' figures a client should see: on a denial the longer wait,
/// otherwise fewer tokens left (then the longer wait for the next one).
fn more_restrictive(candidate: &Decision, current: &Decision) -> bool {
    if candidate.allowed() {
        (
            candidate.remaining(),
            std::cmp::Reverse(candidate.next_token()),
        ) < (current.remaining(), std::cmp::Reverse(current.next_token()))
    } else {
        candidate.retry_after() > current.retry_after()
    }
}
