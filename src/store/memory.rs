//! Buckets in this process's memory: the default store (SPEC §6).
//!
//! A fixed number of shards, each a mutex around a `hashbrown` table. A request locks one
//! shard for the few nanoseconds of arithmetic; lookups use the borrowed key, so a client
//! already seen costs no allocation. Hashing is seeded per store (foldhash's quality
//! variant), so clients cannot aim their keys at one chain.
//!
//! A bucket is only stored once it has taken tokens: a full bucket and a missing one are
//! the same thing, so a denied or peeked first request leaves nothing behind.
//!
//! Each bucket remembers the intervals its TATs were measured in. When a reload changes
//! its rule's rates, the first request to meet it re-expresses the consumption in the new
//! quotas ([`gcra::carry_over`]) — lazily, so no pass over the store has to race the swap.

use std::future::{Ready, ready};
use std::hash::BuildHasher;

use hashbrown::HashTable;
use parking_lot::Mutex;

use super::{BucketRef, CheckMode, CheckRequest, RuleId, Store, StoreError};
use crate::Quota;
use crate::algorithm::gcra;
use crate::decision::Decision;
use crate::key::Client;

/// The in-memory bucket store.
///
/// ```
/// use tollgate::store::MemoryStore;
///
/// let store = MemoryStore::new();
/// assert_eq!(store.len(), 0);
/// ```
pub struct MemoryStore {
    shards: Box<[Shard]>,
    hasher: foldhash::quality::RandomState,
}

/// One lock's worth of buckets, on its own cache lines so shards do not contend.
#[repr(align(128))]
struct Shard(Mutex<HashTable<Entry>>);

struct Entry {
    rule: RuleId,
    client: Option<Client<'static>>,
    state: State,
}

impl Entry {
    fn bucket(&self) -> BucketRef<'_> {
        BucketRef {
            rule: self.rule,
            client: self.client.as_ref(),
        }
    }
}

/// One theoretical arrival time per quota and the interval it was measured in; inline for
/// the common single quota.
enum State {
    One {
        tat: [u64; 1],
        interval: u64,
    },
    /// `n` TATs followed by their `n` intervals.
    Many(Box<[u64]>),
}

impl State {
    fn full(quotas: &[Quota]) -> State {
        match quotas {
            [quota] => State::One {
                tat: [0],
                interval: quota.interval_nanos(),
            },
            _ => State::Many(
                std::iter::repeat_n(0, quotas.len())
                    .chain(quotas.iter().map(Quota::interval_nanos))
                    .collect(),
            ),
        }
    }

    fn tats(&mut self) -> &mut [u64] {
        match self {
            State::One { tat, .. } => tat,
            State::Many(many) => {
                let n = many.len() / 2;
                &mut many[..n]
            }
        }
    }

    fn parts(&self) -> (&[u64], &[u64]) {
        match self {
            State::One { tat, interval } => (tat, std::slice::from_ref(interval)),
            State::Many(many) => many.split_at(many.len() / 2),
        }
    }

    /// Whether this state is measured in `quotas`' intervals.
    fn fits(&self, quotas: &[Quota]) -> bool {
        let (_, intervals) = self.parts();
        intervals.len() == quotas.len()
            && intervals
                .iter()
                .zip(quotas)
                .all(|(&i, q)| i == q.interval_nanos())
    }

    /// The same consumption, re-expressed in `quotas` (after a reload changed them).
    fn carried_over(&self, quotas: &[Quota], now: u64) -> State {
        let mut next = State::full(quotas);
        let (old_tats, old_intervals) = self.parts();
        gcra::carry_over(old_tats, old_intervals, quotas, now, next.tats());
        next
    }
}

impl MemoryStore {
    /// An empty store with a shard count suited to this machine.
    pub fn new() -> MemoryStore {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (threads * 4).next_power_of_two().clamp(4, 256);
        MemoryStore {
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(HashTable::new())))
                .collect(),
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    /// Buckets currently stored (clients that are not at full budget, roughly).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.0.lock().len()).sum()
    }

    /// Whether no bucket is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides synchronously; what [`Store::check`] wraps in a ready future.
    pub fn decide(&self, request: CheckRequest<'_>) -> Decision {
        let hash = self.hasher.hash_one(request.bucket);
        // The table uses the low bits and the top seven; pick the shard from the middle.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        let mut table = self.shards[index].0.lock();
        let commit = request.mode == CheckMode::Consume;
        let now = request.now.as_unix_nanos();
        let quotas = request.quotas;
        if let Some(entry) = table.find_mut(hash, |entry| entry.bucket() == request.bucket) {
            if !entry.state.fits(quotas) {
                let carried = entry.state.carried_over(quotas, now);
                if !commit {
                    let mut peeked = carried;
                    return gcra::decide(peeked.tats(), quotas, request.cost, now, false);
                }
                entry.state = carried;
            }
            return gcra::decide(entry.state.tats(), quotas, request.cost, now, commit);
        }
        let mut state = State::full(quotas);
        let decision = gcra::decide(state.tats(), quotas, request.cost, now, commit);
        if decision.allowed() && commit {
            let entry = Entry {
                rule: request.bucket.rule,
                client: request
                    .bucket
                    .client
                    .map(|client| client.clone().into_owned()),
                state,
            };
            let hasher = &self.hasher;
            table.insert_unique(hash, entry, |entry| hasher.hash_one(entry.bucket()));
        }
        decision
    }
}

impl MemoryStore {
    /// Drops every bucket of `rules` (rules a reload removed).
    pub fn forget_rules(&self, rules: &[RuleId]) {
        if rules.is_empty() {
            return;
        }
        for shard in &self.shards {
            shard.0.lock().retain(|entry| !rules.contains(&entry.rule));
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    type Future = Ready<Result<Decision, StoreError>>;

    fn check(&self, request: CheckRequest<'_>) -> Self::Future {
        ready(Ok(self.decide(request)))
    }

    fn forget(&self, rules: &[RuleId]) {
        self.forget_rules(rules);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use std::num::NonZeroU32;
    use std::time::Duration;

    fn quotas(rate: &str, burst: u32) -> [Quota; 1] {
        [Quota::new(rate.parse().unwrap(), NonZeroU32::new(burst).unwrap()).unwrap()]
    }

    fn check(
        store: &MemoryStore,
        rule: u32,
        client: Option<&Client<'_>>,
        quotas: &[Quota],
        now: crate::clock::Timestamp,
    ) -> Decision {
        store.decide(CheckRequest {
            bucket: BucketRef {
                rule: RuleId::new(rule),
                client,
            },
            quotas,
            cost: 1,
            now,
            mode: CheckMode::Consume,
        })
    }

    #[test]
    fn clients_and_rules_have_separate_buckets() {
        let store = MemoryStore::new();
        let clock = FakeClock::new();
        let q = quotas("1/min", 1);
        let a = Client::from_ip("192.0.2.1".parse().unwrap(), 64);
        let b = Client::Key("192.0.2.1".into());
        assert!(check(&store, 0, Some(&a), &q, clock.now()).allowed());
        assert!(!check(&store, 0, Some(&a), &q, clock.now()).allowed());
        assert!(check(&store, 0, Some(&b), &q, clock.now()).allowed());
        assert!(check(&store, 1, Some(&a), &q, clock.now()).allowed());
        assert!(check(&store, 0, None, &q, clock.now()).allowed());
        assert!(!check(&store, 0, None, &q, clock.now()).allowed());
        assert_eq!(store.len(), 4);
    }

    #[test]
    fn borrowed_and_owned_keys_find_the_same_bucket() {
        let store = MemoryStore::new();
        let clock = FakeClock::new();
        let q = quotas("1/min", 1);
        let owned = String::from("api-key-1");
        let first = Client::Key(owned.as_str().into());
        assert!(check(&store, 0, Some(&first), &q, clock.now()).allowed());
        let again = Client::Key(std::borrow::Cow::Owned(owned.clone()));
        assert!(!check(&store, 0, Some(&again), &q, clock.now()).allowed());
        clock.advance(Duration::from_secs(60));
        assert!(check(&store, 0, Some(&again), &q, clock.now()).allowed());
    }

    #[test]
    fn nothing_is_stored_for_peeks_or_denied_first_requests() {
        let store = MemoryStore::new();
        let clock = FakeClock::new();
        let q = quotas("1/min", 1);
        let a = Client::Unknown;
        store.decide(CheckRequest {
            bucket: BucketRef {
                rule: RuleId::new(0),
                client: Some(&a),
            },
            quotas: &q,
            cost: 1,
            now: clock.now(),
            mode: CheckMode::Peek,
        });
        assert!(store.is_empty());
    }
}
