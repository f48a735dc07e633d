//! The hard bound, `[store] max_buckets`, kept across the whole store.
//!
//! Each shard counts into one store-wide total. When a new bucket takes the store past
//! the bound, the request that made it — after letting go of its shard — evicts a batch:
//! first every bucket that has refilled completely (nothing is lost), then those closest to
//! full across every shard, so the heaviest users are the last to be forgotten whatever
//! the bound. (Kept per shard, a bound smaller than the shard count left one bucket per
//! shard, and a newcomer landing beside an exhausted client evicted it, handing it a fresh
//! budget.) The pass locks one shard at a time, so it never waits on a request holding
//! another; one pass runs at a time, and requests that find one running go on — the bound
//! may be passed by a few buckets for that moment. A batch is 1/16 of the bound, so the
//! scan is paid once per batch, not per request; beyond 65,536 buckets the threshold is
//! read from an even sample of their refill times.

use std::sync::atomic::Ordering;

use super::MemoryStore;

/// The most refill times the eviction threshold is read from.
const SAMPLE: usize = 65_536;

impl MemoryStore {
    /// `n` buckets were added (`added`) or dropped to the store.
    pub(super) fn count(&self, added: bool, n: usize) {
        if added {
            self.held.fetch_add(n, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Evicts down to the bound if the store is past it. Called with no shard locked.
    pub(super) fn keep_bound(&self, now: u64) {
        let max = self.max_buckets.load(Ordering::Relaxed);
        if self.held.load(Ordering::Relaxed) <= max {
            return;
        }
        let Some(_turn) = self.evicting.try_lock() else {
            return;
        };
        // Refilled buckets are the same as missing ones: those go first, and the rest's
        // refill times are sampled.
        let held = self.held.load(Ordering::Relaxed);
        let stride = held / SAMPLE + 1;
        let mut sample = Vec::with_capacity(held.min(SAMPLE) + 1);
        let mut seen = 0usize;
        for shard in &self.shards {
            let mut tables = shard.0.lock();
            let before = tables.len();
            tables.retain(now, |_, refills_in| refills_in > 0);
            self.count(false, before - tables.len());
            for refills_in in tables.refills(now) {
                if seen.is_multiple_of(stride) {
                    sample.push(refills_in);
                }
                seen += 1;
            }
        }
        let held = self.held.load(Ordering::Relaxed);
        if held <= max || sample.is_empty() {
            return;
        }
        let evict = (max / 16).max(held - max).min(held);
        let at = (evict * sample.len()).div_ceil(held).clamp(1, sample.len()) - 1;
        let threshold = *sample.select_nth_unstable(at).1;
        let mut evicted = 0;
        for shard in &self.shards {
            if evicted >= evict {
                break;
            }
            let mut tables = shard.0.lock();
            let before = tables.len();
            tables.retain(now, |_, refills_in| {
                if evicted < evict && refills_in <= threshold {
                    evicted += 1;
                    false
                } else {
                    true
                }
            });
            self.count(false, before - tables.len());
        }
        self.evictions.fetch_add(evicted as u64, Ordering::Relaxed);
        self.eviction_counter.increment(evicted as u64);
    }
}
