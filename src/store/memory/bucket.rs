//! [`BucketState`]: one bucket's state under tollgate's engine, for a store of your own.
//!
//! The engine is the in-memory store's: every algorithm, strict mode, peeks, refunds,
//! delay and warm-up, caller timestamps, and consumption carried over when a reload changes
//! a rule's numbers. A store that keeps buckets elsewhere (a database, a peer) holds one
//! `BucketState` per bucket — or its [bytes](BucketState::to_bytes) — and decides with it;
//! the matrix of tests that holds the memory, Redis and disk stores to the same decisions
//! holds such a store too.

use std::time::Duration;

use super::persist::{layout_words, state_from};
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
        let state = match layout {
            Layout::Discrete => <[u64; 6]>::try_from(words.as_slice())
                .ok()
                .map(|words| State::Discrete(Box::new(words))),
            _ => state_from(layout, &words),
        };
        state.map(BucketState).ok_or(damaged)
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
    }
}
