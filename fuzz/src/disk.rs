//! The disk store's values, read back after a crash, a bad disk or a hand edit; and the
//! bucket bytes of `BucketState`, which a store of a user's own keeps.

use std::num::NonZeroU32;

use tollgate::clock::Timestamp;
use tollgate::fuzzing::disk_value;
use tollgate::store::{BucketRef, BucketState, CheckMode, CheckRequest, RuleId};
use tollgate::{Algorithm, Quota, Shaping};

/// The algorithms a rule can keep a bucket under, and the caller-defined one.
const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::SlidingWindow,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::DiscreteRefill,
];

/// Decides on `bucket` under every algorithm, one quota and two, at `now`: never panics; a
/// peek changes no later decision; what a decision leaves reads back.
fn decide_every_way(bucket: &BucketState, now: u64) {
    let rates = ["10/s", "100/min"];
    let quotas: Vec<Quota> = rates
        .iter()
        .filter_map(|rate| Quota::new(rate.parse().ok()?, NonZeroU32::new(5)?))
        .collect();
    for algorithm in ALGORITHMS {
        for quotas in [&quotas[..1], &quotas[..]] {
            let request = |mode| CheckRequest {
                bucket: BucketRef {
                    rule: RuleId::new(1),
                    client: None,
                },
                quotas,
                cost: 1,
                algorithm,
                strict: false,
                shaping: &Shaping::NONE,
                now: Timestamp::from_unix_nanos(now),
                mode,
            };
            let mut peeked = bucket.clone();
            let peek = peeked.decide(&request(CheckMode::Peek));
            let mut consumed = bucket.clone();
            let consume = consumed.decide(&request(CheckMode::Consume));
            assert_eq!(
                peeked.decide(&request(CheckMode::Consume)),
                consume,
                "a peek ({peek:?}) changed the next decision"
            );
            let _ = consumed.refills_in(Timestamp::from_unix_nanos(now));
            let written = consumed.to_bytes();
            let read = BucketState::from_bytes(&written)
                .unwrap_or_else(|e| panic!("a decided bucket does not read back: {e}"));
            assert_eq!(
                read.to_bytes(),
                written,
                "a decided bucket re-encodes differently"
            );
        }
    }
}

/// `disk`: a disk store value (when it refills, a layout, words) and `BucketState`'s bytes.
/// Never panics on damaged bytes; a value read back writes back byte for byte; a bucket's
/// bytes re-encode to a fixed point; decisions on whatever was read never panic, and leave
/// a bucket that reads back.
///
/// The first byte picks a rule's bucket or a caller-defined one and the time; the rest is
/// the value.
pub fn disk(data: &[u8]) {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let caller_defined = pick & 1 == 1;
    let now = [0, 1_000_000_000, 1 << 62, u64::MAX][usize::from((pick >> 1) & 3)];
    if let Some((bucket, written)) = disk_value(value, now, caller_defined) {
        assert_eq!(written, value, "a value read back writes back differently");
        decide_every_way(&bucket, now);
    }
    // The value's bucket bytes (after its 8-byte refill time) as BucketState reads them.
    let bytes = value.get(8..).unwrap_or(value);
    if let Ok(bucket) = BucketState::from_bytes(bytes) {
        let once = bucket.to_bytes();
        let again = BucketState::from_bytes(&once)
            .unwrap_or_else(|e| panic!("re-encoded bytes do not read back: {e}"))
            .to_bytes();
        assert_eq!(once, again, "re-encoding is not a fixed point");
        decide_every_way(&bucket, now);
    }
}
