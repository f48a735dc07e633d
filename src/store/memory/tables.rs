//! One shard's buckets, in two layouts: a compact one for the common bucket and a general
//! one for everything else.
//!
//! Most buckets of most deployments are one GCRA quota for one IPv4 client. Those live in
//! the compact table as 24 bytes ([`Compact`]): the rule, the address, the TAT, the
//! interval it was measured in (named by an [`IntervalId`]) and when it was last seen.
//! Everything else — API keys and other header identities, IPv6 networks, global buckets,
//! several quotas, window algorithms — takes the general layout ([`Entry`], 64 bytes plus
//! a heap slice for several quotas).
//!
//! A bucket lives in exactly one of the two tables. It is created in the one its request
//! fits; a compact bucket met by a request that no longer fits (a reload gave its rule a
//! second quota or another algorithm) moves to the general table, state carried over. A
//! general bucket whose rule became compactable stays where it is, which is correct, only
//! larger, until it refills and is swept.

use std::net::{IpAddr, Ipv4Addr};

use hashbrown::HashTable;

use super::state::State;
use crate::key::Client;
use crate::quota::IntervalId;
use crate::store::{BucketRef, RuleId};

/// Nanoseconds per `last_seen` unit, as a shift: about a second.
pub(super) const SEEN_SHIFT: u32 = 30;

/// `now` as a `last_seen` stamp: a shift, not a division, on the request path.
pub(super) fn seen_stamp(now: u64) -> u32 {
    u32::try_from(now >> SEEN_SHIFT).unwrap_or(u32::MAX)
}

/// A bucket in the general layout.
pub(super) struct Entry {
    pub(super) rule: RuleId,
    /// When the bucket last took tokens, as a [`seen_stamp`]; packs beside `rule`.
    pub(super) last_seen: u32,
    pub(super) client: Option<Client<'static>>,
    pub(super) state: State,
}

impl Entry {
    pub(super) fn bucket(&self) -> BucketRef<'_> {
        BucketRef {
            rule: self.rule,
            client: self.client.as_ref(),
        }
    }
}

/// A bucket of one GCRA quota for one IPv4 client, in 24 bytes.
#[derive(Clone, Copy)]
pub(super) struct Compact {
    pub(super) rule: RuleId,
    ip: u32,
    pub(super) last_seen: u32,
    /// The [`IntervalId`] the TAT was measured in.
    interval: u32,
    pub(super) tat: u64,
}

/// The IPv4 address of `bucket`'s client, if it has one: what a compact bucket is keyed by.
pub(super) fn compact_ip(bucket: BucketRef<'_>) -> Option<u32> {
    match bucket.client {
        Some(Client::Ip(IpAddr::V4(ip))) => Some(ip.to_bits()),
        _ => None,
    }
}

impl Compact {
    pub(super) fn new(rule: RuleId, ip: u32, interval: IntervalId, tat: u64, now: u64) -> Compact {
        Compact {
            rule,
            ip,
            last_seen: seen_stamp(now),
            interval: interval.get(),
            tat,
        }
    }

    /// Whether this is the bucket of `rule` for the client at `ip`.
    pub(super) fn is(&self, rule: RuleId, ip: u32) -> bool {
        self.rule == rule && self.ip == ip
    }

    pub(super) fn client(&self) -> Client<'static> {
        Client::Ip(IpAddr::V4(Ipv4Addr::from_bits(self.ip)))
    }

    pub(super) fn interval(&self) -> IntervalId {
        IntervalId::from_raw(self.interval)
    }

    /// The same bucket in the general layout.
    pub(super) fn to_entry(self) -> Entry {
        Entry {
            rule: self.rule,
            last_seen: self.last_seen,
            client: Some(self.client()),
            state: State::One {
                tat: [self.tat],
                interval: self.interval().nanos(),
            },
        }
    }

    /// Records a decision's new TAT, measured in `interval`.
    pub(super) fn update(&mut self, tat: u64, interval: IntervalId, now: u64) {
        self.tat = tat;
        self.interval = interval.get();
        self.last_seen = seen_stamp(now);
    }
}

/// One shard's buckets.
#[derive(Default)]
pub(super) struct Tables {
    pub(super) general: HashTable<Entry>,
    pub(super) compact: HashTable<Compact>,
}

impl Tables {
    /// Buckets held, in both layouts.
    pub(super) fn len(&self) -> usize {
        self.general.len() + self.compact.len()
    }

    /// Keeps the buckets for which `keep(rule, time until refilled)` holds.
    pub(super) fn retain(&mut self, now: u64, mut keep: impl FnMut(RuleId, u64) -> bool) {
        self.general
            .retain(|entry| keep(entry.rule, entry.state.refills_in(now)));
        self.compact
            .retain(|compact| keep(compact.rule, compact.tat.saturating_sub(now)));
    }

    /// Time until refilled, for every bucket.
    pub(super) fn refills(&self, now: u64) -> Vec<u64> {
        let general = self.general.iter().map(|entry| entry.state.refills_in(now));
        let compact = self.compact.iter().map(|c| c.tat.saturating_sub(now));
        general.chain(compact).collect()
    }

    /// Calls `f` with every bucket, compact ones shown in the general layout.
    pub(super) fn for_each(&self, mut f: impl FnMut(&Entry)) {
        self.general.iter().for_each(&mut f);
        for compact in &self.compact {
            f(&compact.to_entry());
        }
    }

    /// Whether `bucket` (whose hash is `hash`) is held.
    pub(super) fn contains(&self, hash: u64, bucket: BucketRef<'_>) -> bool {
        let in_compact = compact_ip(bucket)
            .is_some_and(|ip| self.compact.find(hash, |c| c.is(bucket.rule, ip)).is_some());
        in_compact || self.general.find(hash, |e| e.bucket() == bucket).is_some()
    }

    /// Drops `bucket`; whether it was held.
    pub(super) fn remove(&mut self, hash: u64, bucket: BucketRef<'_>) -> bool {
        if let Some(ip) = compact_ip(bucket)
            && let Ok(found) = self.compact.find_entry(hash, |c| c.is(bucket.rule, ip))
        {
            found.remove();
            return true;
        }
        match self.general.find_entry(hash, |e| e.bucket() == bucket) {
            Ok(found) => {
                found.remove();
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_bucket_takes_24_bytes_and_the_general_one_64() {
        // Memory follows these numbers: BENCHMARKS.md and the README quote them.
        assert_eq!(std::mem::size_of::<Compact>(), 24);
        assert_eq!(std::mem::size_of::<Entry>(), 64);
    }
}
