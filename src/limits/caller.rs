//! Caller-defined buckets: named by the caller with their own numbers rather than by a
//! rule — smyte/ratelimit's `RL.*` semantics, which the Redis-protocol front end serves.
//!
//! A bucket is the caller's key *and* its numbers: two callers asking for `"signup"` with
//! different numbers never share a bucket. The buckets live in the limiter's store beside
//! the rules' (swept when full, bounded by `max_buckets`, saved in snapshots, listed on the
//! admin page under `/rl/`); the arithmetic is [`crate::algorithm`]'s discrete-refill
//! engine: whole refills at whole intervals, a reply of the tokens *before* the request.

use std::num::NonZeroU32;
use std::time::Duration;

use super::Limits;
use crate::algorithm::{Algorithm, CheckMode};
use crate::clock::Timestamp;
use crate::config::RuleId;
use crate::key::Client;
use crate::quota::Quota;
use crate::store::{BucketRef, CheckRequest, Store};

/// A bucket defined by its caller: at most `max` tokens, `refill` more every `every`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{CallerBucket, Limits, TakeOptions};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::from_toml("[limits]\n")?;
/// let two_per_minute = CallerBucket::new("TwoPerMin", 2, 2, Duration::from_secs(60)).unwrap();
/// let mut replies = Vec::new();
/// for _ in 0..3 {
///     let decision = limits.take_from(&two_per_minute, 1, TakeOptions::default()).await?;
///     replies.push(decision.available_before().unwrap());
/// }
/// assert_eq!(replies, [2, 1, 0], "what `RL.REDUCE TwoPerMin 2 60` answers, three times");
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallerBucket<'a> {
    key: &'a str,
    quota: Quota,
}

impl<'a> CallerBucket<'a> {
    /// The bucket `key` holding at most `max` tokens, `refill` added every `every`;
    /// `None` if a number is zero or `every` is under a millisecond.
    pub fn new(key: &'a str, max: u32, refill: u32, every: Duration) -> Option<CallerBucket<'a>> {
        let (max, refill) = (NonZeroU32::new(max)?, NonZeroU32::new(refill)?);
        (every >= Duration::from_millis(1)).then(|| CallerBucket {
            key,
            quota: Quota::discrete(max, refill, every),
        })
    }

    /// The caller's key.
    pub fn key(&self) -> &str {
        self.key
    }
}

/// How [`Limits::take_from`] takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakeOptions {
    /// Decide as of this time instead of the limiter's clock (smyte's `AT`), rounded down
    /// to the millisecond as smyte's times are.
    pub at: Option<Timestamp>,
    /// A request that leaves the bucket empty holds the refills back until the caller has
    /// been quiet for a whole interval (smyte's `STRICT`).
    pub strict: bool,
    /// Take as a session (smyte's `RL.SESSIONIZE`): the decision says when the session
    /// started ([`Decision::session_started_at`](crate::Decision::session_started_at)).
    pub session: bool,
}

impl<St: Store> Limits<St> {
    /// Takes `take` tokens from `bucket` (0: only look), with smyte/ratelimit's semantics:
    /// the decision's [`available_before`](crate::Decision::available_before) is what the
    /// bucket held before this request; the request is allowed if that was at least
    /// `take`, and a consuming request that finds fewer still empties the bucket.
    ///
    /// With the in-memory store the future is ready at once.
    pub fn take_from(
        &self,
        bucket: &CallerBucket<'_>,
        take: u64,
        options: TakeOptions,
    ) -> St::Future {
        const MS: u64 = 1_000_000;
        let now = options.at.unwrap_or_else(|| self.now()).as_unix_nanos();
        let now = Timestamp::from_unix_nanos(now - now % MS);
        let client = Client::Key(caller_key(bucket).into());
        let mode = match (take, options.session) {
            (0, _) => CheckMode::Peek,
            (_, true) => CheckMode::Session,
            (_, false) => CheckMode::Consume,
        };
        self.store().check(CheckRequest {
            bucket: BucketRef {
                rule: RuleId::CALLER_DEFINED,
                client: Some(&client),
            },
            quotas: std::slice::from_ref(&bucket.quota),
            cost: take,
            algorithm: Algorithm::DiscreteRefill,
            strict: options.strict,
            shaping: &crate::Shaping::NONE,
            now,
            mode,
        })
    }
}

/// The client a caller-defined bucket is stored under: its numbers, then its key
/// (`max:refill:interval_ms:key`), so different numbers make different buckets.
fn caller_key(bucket: &CallerBucket<'_>) -> String {
    // On every RL.* command: digits by itoa, one allocation of the right size.
    let quota = &bucket.quota;
    let (mut max, mut refill, mut every) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    let parts = [
        max.format(quota.burst()),
        refill.format(quota.rate().count()),
        every.format(quota.period_nanos() / 1_000_000),
    ];
    let mut key =
        String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + bucket.key.len());
    for part in parts {
        key.push_str(part);
        key.push(':');
    }
    key.push_str(bucket.key);
    key
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock as _, FakeClock};

    #[tokio::test(flavor = "current_thread")]
    async fn caller_buckets_are_swept_when_full_and_bounded_like_the_rest() {
        let clock = FakeClock::new();
        let limits = Limits::builder()
            .clock(clock.clone())
            .from_toml("[store]\nmax_buckets = 64\n[limits]\n")
            .unwrap();
        let minute = CallerBucket::new("k", 2, 1, Duration::from_secs(60)).unwrap();
        let other_numbers = CallerBucket::new("k", 3, 1, Duration::from_secs(60)).unwrap();
        let take = async |bucket: &CallerBucket<'_>| {
            let decision = limits.take_from(bucket, 1, TakeOptions::default()).await;
            decision.unwrap().available_before().unwrap()
        };
        let taken = (
            take(&minute).await,
            take(&minute).await,
            take(&other_numbers).await,
        );
        assert_eq!(taken, (2, 1, 3));
        assert_eq!(
            limits.store().len(),
            2,
            "the same key with other numbers: another bucket"
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            limits.store().sweep_idle(clock.now()),
            1,
            "the 3-token one refilled"
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(limits.store().sweep_idle(clock.now()), 1);
        assert!(limits.store().is_empty());
        for i in 0..1_000 {
            let key = format!("flood-{i}");
            let bucket = CallerBucket::new(&key, 5, 1, Duration::from_secs(60)).unwrap();
            take(&bucket).await;
        }
        let held = limits.store().len();
        assert!(held <= 64, "{held} buckets held under max_buckets = 64");
        assert!(limits.store().evictions() > 0);
    }
}
