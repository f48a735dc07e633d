//! [`BucketState`]: one bucket's state under tollgate's engine, for a store of your own.
//!
//! The engine is the in-memory store's: every algorithm, strict mode, peeks, refunds,
//! delay and warm-up, caller timestamps, and consumption carried over when a reload changes
//! a rule's numbers. A store that keeps buckets elsewhere (a database, a peer) holds one
//! `BucketState` per bucket — or its [bytes](BucketState::to_bytes) — and decides with it;
//! the matrix of tests that holds the memory, Redis and disk stores to the same decisions
//! holds such a store too.

use std::time::Duration;

use super::persist::{layout_words, stored_state};
use super::state::State;
use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::store::CheckRequest;
use crate::store::snapshot::Layout;

/// One bucket's state, decided by tollgate's engine. See the [`Store`](crate::store::Store)
/// docs for a whole store built on it.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::clock::{Clock, FakeClock};
/// use tollgate::store::{BucketRef, BucketState, CheckMode, CheckRequest, RuleId};
/// use tollgate::{Algorithm, Quota, Shaping};
///
/// let quotas = [Quota::new("1/min".parse()?, NonZeroU32::new(1).unwrap()).unwrap()];
/// let request = CheckRequest {
///     bucket: BucketRef { rule: RuleId::new(0), client: None },
///     quotas: &quotas,
///     cost: 1,
///     algorithm: Algorithm::Gcra,
///     strict: false,
///     shaping: &Shaping::NONE,
///     now: FakeClock::new().now(),
///     mode: CheckMode::Consume,
/// };
/// let mut bucket = BucketState::new(&request);
/// assert!(bucket.decide(&request).allowed());
/// // Stored as bytes and read back, it remembers.
/// let mut bucket = BucketState::from_bytes(&bucket.to_bytes())?;
/// assert!(!bucket.decide(&request).allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct BucketState(State);

/// Bytes that are not a [`BucketState`] (cut short, or written by something else).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a tollgate bucket state ({len} bytes)")]
pub struct DamagedState {
    len: usize,
}

impl BucketState {
    /// A bucket never used, as the rule `request` names keeps them.
    pub fn new(request: &CheckRequest<'_>) -> BucketState {
        BucketState(State::fresh(
            request.algorithm,
            request.quotas,
            request.shaping.warmup_nanos(),
            request.now.as_unix_nanos(),
        ))
    }

    /// Decides `request` against this bucket at `request.now`, taking its tokens when
    /// admitted (or as `request.mode` says). A bucket kept by a rule whose numbers have
    /// since changed carries what it used over into the new ones. A peek changes nothing.
    pub fn decide(&mut self, request: &CheckRequest<'_>) -> Decision {
        self.0.decide_carrying(request, request.now.as_unix_nanos())
    }

    /// How long after `now` this bucket will have refilled completely: from then it is as
    /// good as a new one, and a store may forget it (a TTL, say).
    pub fn refills_in(&self, now: Timestamp) -> Duration {
        Duration::from_nanos(self.0.refills_in(now.as_unix_nanos()))
    }

    /// The state as bytes, for a store that keeps buckets outside this process: a layout
    /// code, then little-endian words.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (layout, words) = layout_words(&self.0);
        let mut bytes = Vec::with_capacity(1 + 8 * words.len());
        bytes.push(layout.code());
        for word in words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    /// The state stored `words` of `layout` make, for a rule's bucket or a caller-defined
    /// one, as a store reading them back builds it.
    #[cfg(feature = "disk")]
    pub(crate) fn from_stored(
        layout: Layout,
        words: &[u64],
        caller_defined: bool,
    ) -> Option<BucketState> {
        stored_state(layout, words, caller_defined).map(BucketState)
    }

    /// The state [`to_bytes`](Self::to_bytes) wrote; bytes it could not have written are
    /// refused.
    pub fn from_bytes(bytes: &[u8]) -> Result<BucketState, DamagedState> {
        let damaged = DamagedState { len: bytes.len() };
        let (&code, rest) = bytes.split_first().ok_or(damaged)?;
        let layout = Layout::from_code(code).ok_or(damaged)?;
        if rest.len() % 8 != 0 {
            return Err(damaged);
        }
        let words: Vec<u64> = rest
            .chunks_exact(8)
            .map(|chunk| {
                let mut word = [0; 8];
                word.copy_from_slice(chunk);
                u64::from_le_bytes(word)
            })
            .collect();
        if !layout.holds(&words) {
            return Err(damaged);
        }
        stored_state(layout, &words, layout == Layout::Discrete)
            .map(BucketState)
            .ok_or(damaged)
    }
}

impl std::fmt::Debug for BucketState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (layout, words) = layout_words(&self.0);
        f.debug_struct("BucketState")
            .field("layout", &layout)
            .field("words", &words)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_bytes_are_refused_not_read() {
        for bytes in [
            &[][..],
            &[0],
            &[9, 0, 0, 0, 0, 0, 0, 0, 0],
            &[1, 1, 2, 3],
            &[1; 9],
        ] {
            assert!(BucketState::from_bytes(bytes).is_err(), "{bytes:?}");
        }
        // A ring claiming 2^63 quotas (twice that is past any length): refused, not
        // overflowed (found by the `disk` fuzz target).
        let mut ring = vec![6];
        for word in [1u64 << 63, 1, 1] {
            ring.extend_from_slice(&word.to_le_bytes());
        }
        assert!(BucketState::from_bytes(&ring).is_err());
    }

    /// Words from a damaged disk or a hand edit — a window starting at the end of time, a
    /// ring's newest sub-window there — are decided on without a panic, under every
    /// algorithm (found by the `disk` fuzz target: additions past `u64::MAX`).
    #[test]
    fn damaged_but_well_formed_words_are_decided_on() {
        use std::num::NonZeroU32;

        use crate::Algorithm;
        use crate::algorithm::{CheckMode, Shaping};
        use crate::clock::Timestamp;
        use crate::quota::Quota;
        use crate::store::{BucketRef, RuleId};

        let quotas = [Quota::new("10/s".parse().unwrap(), NonZeroU32::new(5).unwrap()).unwrap()];
        let words = |code: u8, words: &[u64]| {
            let mut bytes = vec![code];
            for word in words {
                bytes.extend_from_slice(&word.to_le_bytes());
            }
            BucketState::from_bytes(&bytes).unwrap()
        };
        // A sliding window of 1 s (its start, its packed counts, its tag) starting at the
        // last nanosecond; a ring of one quota (1 s in 1 s sub-windows) whose newest
        // sub-window is the last one.
        let damaged = [
            words(2, &[u64::MAX - 5, 1, (1 << 63) | 1_000_000_000]),
            words(6, &[1, 1_000_000_000, 1_000_000_000, u64::MAX, 1, 1]),
        ];
        for bucket in &damaged {
            for algorithm in [
                Algorithm::Gcra,
                Algorithm::SlidingWindow,
                Algorithm::FixedWindow,
            ] {
                for now in [0, 1, u64::MAX / 2] {
                    let request = CheckRequest {
                        bucket: BucketRef {
                            rule: RuleId::new(1),
                            client: None,
                        },
                        quotas: &quotas,
                        cost: 1,
                        algorithm,
                        strict: false,
                        shaping: &Shaping::NONE,
                        now: Timestamp::from_unix_nanos(now),
                        mode: CheckMode::Consume,
                    };
                    let mut decided = bucket.clone();
                    let _ = decided.decide(&request);
                    assert!(BucketState::from_bytes(&decided.to_bytes()).is_ok());
                }
            }
        }
    }
}
