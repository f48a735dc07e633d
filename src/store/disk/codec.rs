//! The disk store's bytes: keys (a rule's key and parameters, then the client), values
//! (when the bucket will have refilled, its layout and words), and the compaction filter
//! that drops refilled buckets.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::compaction::filter::{CompactionFilter, Context, Factory, ItemAccessor, Verdict};

use crate::key::Client;
use crate::store::StoredRule;
use crate::store::snapshot::Layout;

/// `rule`'s key prefix: its store key, a zero byte, and a hash of everything its buckets
/// mean (its limit, written out), big-endian.
pub(super) fn rule_prefix(rule: &StoredRule) -> Arc<[u8]> {
    let mut params = String::new();
    let _ = write!(params, "{:?}", rule.limit);
    let hash = xxhash_rust::xxh3::xxh3_64(params.as_bytes());
    let mut prefix = Vec::with_capacity(rule.key.len() + 9);
    prefix.extend_from_slice(rule.key.as_bytes());
    prefix.push(0);
    prefix.extend_from_slice(&hash.to_be_bytes());
    prefix.into()
}

/// The prefix of caller-defined (`RL.*`) buckets, whose parameters are in their words.
pub(super) fn caller_defined_prefix() -> Arc<[u8]> {
    Arc::from(&b"/rl\0\0\0\0\0\0\0\0\0"[..])
}

/// A bucket's key: its rule's prefix, then `c` and the client segment, or `g` for a
/// rule's one global bucket.
pub(super) fn key(prefix: &[u8], client: Option<&Client<'_>>) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 48);
    key.extend_from_slice(prefix);
    match client {
        Some(client) => {
            key.push(b'c');
            let mut text = String::new();
            let _ = write!(text, "{client}");
            key.extend_from_slice(text.as_bytes());
        }
        None => key.push(b'g'),
    }
    key
}

/// A value: when the bucket will have refilled (Unix nanoseconds), its layout's code and
/// its words, little-endian.
pub(super) fn encode(refilled_at: u64, layout: Layout, words: &[u64]) -> Vec<u8> {
    let mut value = Vec::with_capacity(9 + 8 * words.len());
    value.extend_from_slice(&refilled_at.to_le_bytes());
    value.push(layout.code());
    for word in words {
        value.extend_from_slice(&word.to_le_bytes());
    }
    value
}

/// When a value's bucket will have refilled; `None` for a value too short to say.
fn refilled_at(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

/// A value read back: its layout and words, unless it is malformed (ignored: the bucket
/// starts full) or has refilled by `now`.
pub(super) fn value(value: &[u8], now: u64) -> Option<(Layout, Vec<u64>)> {
    if refilled_at(value)? <= now {
        return None;
    }
    let layout = Layout::from_code(*value.get(8)?)?;
    let rest = value.get(9..)?;
    if !rest.len().is_multiple_of(8) {
        return None;
    }
    let words: Vec<u64> = rest
        .chunks_exact(8)
        .filter_map(|chunk| chunk.try_into().ok().map(u64::from_le_bytes))
        .collect();
    layout.holds(&words).then_some((layout, words))
}

/// A value as the store reads it back at `now` (for the fuzz target): the bucket it holds,
/// as a rule's or a caller-defined one, and the value written again from what was read.
pub(crate) fn disk_value(
    stored: &[u8],
    now: u64,
    caller_defined: bool,
) -> Option<(crate::store::BucketState, Vec<u8>)> {
    let (layout, words) = value(stored, now)?;
    let bucket = crate::store::BucketState::from_stored(layout, &words, caller_defined)?;
    Some((bucket, encode(refilled_at(stored)?, layout, &words)))
}

/// Makes the compaction filter that drops refilled buckets: as of the latest decision time
/// the store has seen (so a store run on a fake clock keeps its buckets).
pub(super) struct DropRefilled {
    latest: Arc<AtomicU64>,
}

impl DropRefilled {
    pub(super) fn new(latest: Arc<AtomicU64>) -> DropRefilled {
        DropRefilled { latest }
    }
}

impl Factory for DropRefilled {
    fn name(&self) -> &str {
        "tollgate-drop-refilled"
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        Box::new(RefilledBy {
            now: self.latest.load(Ordering::Relaxed),
        })
    }
}

/// One compaction's filter: drops what has refilled by `now`.
struct RefilledBy {
    now: u64,
}

impl CompactionFilter for RefilledBy {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _: &Context,
    ) -> fjall::compaction::filter::CompactionFilterResult {
        let value = item.value()?;
        Ok(match refilled_at(&value) {
            Some(at) if at <= self.now => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_reads_back_until_it_has_refilled_and_garbage_reads_as_nothing() {
        let stored = encode(1_000, Layout::One, &[900, 10]);
        assert_eq!(value(&stored, 999), Some((Layout::One, vec![900, 10])));
        assert_eq!(value(&stored, 1_000), None, "refilled");
        assert_eq!(value(&stored[..12], 0), None, "truncated");
        assert_eq!(
            value(&encode(1_000, Layout::One, &[1]), 0),
            None,
            "too few words"
        );
        let mut unknown = stored.clone();
        unknown[8] = 99;
        assert_eq!(super::value(&unknown, 0), None, "unknown layout");
    }

    #[test]
    fn keys_of_one_rule_share_its_prefix_and_kinds_never_meet() {
        let prefix = [b'a', 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let client = Client::from_segment("203.0.113.7");
        let of_client = key(&prefix, Some(&client));
        let global = key(&prefix, None);
        assert!(of_client.starts_with(&prefix) && global.starts_with(&prefix));
        assert_ne!(of_client, global);
        assert!(of_client.ends_with(b"c203.0.113.7"));
    }
}
