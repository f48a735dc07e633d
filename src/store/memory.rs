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

use super::{
    AdminFuture, BucketQuery, BucketRef, BucketRow, CheckMode, CheckRequest, RuleId, Store,
    StoreError, TopRows,
};
use crate::Quota;
use crate::algorithm::gcra;
use crate::clock::Timestamp;
use crate::config::Limit;
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
    /// When the bucket last took tokens, in units of 2^30 ns (about a second): a shift,
    /// not a division, on the request path, and it packs beside `rule` for free.
    last_seen: u32,
    client: Option<Client<'static>>,
    state: State,
}

/// Nanoseconds per `last_seen` unit, as a shift.
const SEEN_SHIFT: u32 = 30;

fn seen_stamp(now: u64) -> u32 {
    u32::try_from(now >> SEEN_SHIFT).unwrap_or(u32::MAX)
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
#[derive(Clone)]
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
            if commit {
                entry.last_seen = seen_stamp(now);
            }
            return gcra::decide(entry.state.tats(), quotas, request.cost, now, commit);
        }
        let mut state = State::full(quotas);
        let decision = gcra::decide(state.tats(), quotas, request.cost, now, commit);
        if decision.allowed() && commit {
            let entry = Entry {
                rule: request.bucket.rule,
                last_seen: seen_stamp(now),
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
    /// The buckets `query` asks for; what [`Store::buckets`] returns, synchronously.
    pub fn list(&self, query: &BucketQuery) -> Vec<BucketRow> {
        let now = query.now.as_unix_nanos();
        let rules: std::collections::HashMap<RuleId, &crate::config::Rule> = query
            .rules
            .rules()
            .iter()
            .map(|rule| (rule.id(), rule))
            .collect();
        let mut top = TopRows::new(query.sort, query.limit);
        let mut key = String::new();
        for shard in &self.shards {
            let table = shard.0.lock();
            for entry in table.iter() {
                let Some(rule) = rules.get(&entry.rule) else {
                    continue; // a rule being removed
                };
                let Limit::Limited { quotas, .. } = rule.limit() else {
                    continue;
                };
                key.clear();
                rule.write_bucket_key(&mut key, entry.client.as_ref().unwrap_or(&Client::Unknown));
                if !key.starts_with(query.prefix.as_str()) {
                    continue;
                }
                let mut state = if entry.state.fits(quotas) {
                    entry.state.clone()
                } else {
                    entry.state.carried_over(quotas, now)
                };
                let decision = gcra::decide(state.tats(), quotas, 1, now, false);
                let capacity = decision.limit().max(1);
                let fraction = decision.remaining() as f64 / capacity as f64;
                if query.max_fraction.is_some_and(|max| fraction > max) {
                    continue;
                }
                top.offer(BucketRow {
                    key: key.clone(),
                    rule: rule.name().to_owned(),
                    remaining: decision.remaining(),
                    capacity,
                    fraction,
                    last_seen: Timestamp::from_unix_nanos(u64::from(entry.last_seen) << SEEN_SHIFT),
                });
            }
        }
        top.finish()
    }

    /// Drops one bucket; whether it existed.
    pub fn remove_bucket(&self, bucket: BucketRef<'_>) -> bool {
        let hash = self.hasher.hash_one(bucket);
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        let mut table = self.shards[index].0.lock();
        match table.find_entry(hash, |entry| entry.bucket() == bucket) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

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

    fn buckets(&self, query: BucketQuery) -> AdminFuture<Vec<BucketRow>> {
        Box::pin(ready(Ok(self.list(&query))))
    }

    fn remove(&self, bucket: BucketRef<'_>) -> AdminFuture<bool> {
        Box::pin(ready(Ok(self.remove_bucket(bucket))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::store::BucketSort;
    use std::future::Future as _;
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
    fn listing_filters_sorts_and_bounds_and_remove_forgives() {
        let clock = FakeClock::new();
        let limits = crate::Limits::builder()
            .clock(clock.clone())
            .from_toml("[limits]\n\"/\" = \"10/min\"\nlogin = \"4/min\"\nexport = { rate = \"5/s\", per = \"global\" }\n")
            .unwrap();
        let take = |key: &str, n: u64| {
            let decision = limits.check(key, n);
            let mut decision = std::pin::pin!(decision);
            let waker = std::task::Waker::noop();
            let _ = decision
                .as_mut()
                .poll(&mut std::task::Context::from_waker(waker));
        };
        take("login/10.0.0.1", 3);
        take("login/10.0.0.2", 1);
        take("login/10.0.0.3", 2);
        take("other/10.0.0.1", 1);
        take("export/anyone", 1);
        let query = |prefix: &str, max: Option<f64>, sort: BucketSort, limit: usize| {
            let mut query = BucketQuery::new(limits.rules().clone(), clock.now());
            query.prefix = prefix.into();
            query.max_fraction = max;
            query.sort = sort;
            query.limit = limit;
            limits.store().list(&query)
        };
        let keys = |rows: Vec<BucketRow>| rows.into_iter().map(|r| r.key).collect::<Vec<_>>();

        // The seed question: every bucket under login/ below half its budget.
        assert_eq!(
            keys(query("login/", Some(0.5), BucketSort::Fraction, 100)),
            ["login/10.0.0.1", "login/10.0.0.3"]
        );
        assert_eq!(
            keys(query("login/", None, BucketSort::Key, 2)),
            ["login/10.0.0.1", "login/10.0.0.2"]
        );
        let all = query("", None, BucketSort::Key, 100);
        assert_eq!(
            keys(all.clone()),
            [
                "10.0.0.1",
                "export",
                "login/10.0.0.1",
                "login/10.0.0.2",
                "login/10.0.0.3"
            ]
        );
        let login = all.iter().find(|r| r.key == "login/10.0.0.1").unwrap();
        assert_eq!(
            (login.rule.as_str(), login.remaining, login.capacity),
            ("login", 1, 4)
        );
        assert_eq!(login.fraction, 0.25);

        // Forgiving one client.
        let rules = limits.rules();
        let login_rule = rules.get("login").unwrap().id();
        let client = Client::from_segment("10.0.0.1");
        let bucket = BucketRef {
            rule: login_rule,
            client: Some(&client),
        };
        assert!(limits.store().remove_bucket(bucket));
        assert!(!limits.store().remove_bucket(bucket));
        assert_eq!(
            keys(query("login/", Some(0.5), BucketSort::Fraction, 100)),
            ["login/10.0.0.3"]
        );
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
