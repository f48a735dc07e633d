//! Buckets in this process's memory: the default store.
//!
//! A fixed number of shards, each a mutex around two `hashbrown` tables (see [`tables`]:
//! 24 bytes for a one-quota GCRA bucket of an IPv4 client, the general layout for the
//! rest). A request locks one shard for the few nanoseconds of arithmetic; lookups use the
//! borrowed key, so a client already seen costs no allocation. Hashing is seeded per store (foldhash's quality
//! variant), so clients cannot aim their keys at one chain.
//!
//! A bucket is only stored once it has taken tokens: a full bucket and a missing one are
//! the same thing, so a denied or peeked first request leaves nothing behind.
//!
//! # Memory
//!
//! Memory follows active clients: a background sweep (every `[store] sweep_interval`) drops
//! buckets that have refilled completely, losslessly. A hard bound (`[store] max_buckets`,
//! kept across the whole store: [`bound`]) caps memory under a flood of distinct clients:
//! past it, refilled buckets go first, then a batch (1/16 of the bound) of the buckets
//! closest to full in any shard — the smallest time until refilled, so eviction forgives
//! as little as possible and the heaviest users are the last to go. Evictions are counted
//! (`tollgate_evictions_total`). The scan is paid once per batch, not per request.
//!
//! Each bucket remembers the intervals its TATs were measured in. When a reload changes
//! its rule's rates, the first request to meet it re-expresses the consumption in the new
//! quotas ([`gcra::carry_over`]) — lazily, so no pass over the store has to race the swap.

use std::future::{Ready, ready};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::StoreRules;
use super::{
    AdminFuture, BucketQuery, BucketRef, BucketRow, CheckMode, CheckRequest, Housekeeping,
    Inspection, ManyFuture, RuleId, SnapshotError, Snapshots, Store, StoreError, all_or_nothing,
};
use crate::algorithm::{Algorithm, gcra};
use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::quota::IntervalId;

mod bound;
mod bucket;
mod listing;
mod persist;
pub use bucket::{BucketState, DamagedState};
#[cfg(feature = "disk")]
pub(crate) use persist::Exported;
mod state;
mod tables;
mod words;

use state::{State, decide_gcra};
use tables::{Compact, Entry, Tables, compact_ip, seen_stamp};

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
    /// Buckets held, in every shard.
    held: AtomicUsize,
    /// The bound on `held` (`[store] max_buckets`).
    max_buckets: AtomicUsize,
    /// Taken by the one eviction pass running.
    evicting: Mutex<()>,
    evictions: AtomicU64,
    eviction_counter: metrics::Counter,
}

/// One lock's worth of buckets, on its own cache lines so shards do not contend.
#[repr(align(128))]
struct Shard(Mutex<Tables>);

impl MemoryStore {
    /// An empty store with a shard count suited to this machine.
    pub fn new() -> MemoryStore {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (threads * 4).next_power_of_two().clamp(4, 256);
        let store = MemoryStore {
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(Tables::default())))
                .collect(),
            hasher: foldhash::quality::RandomState::default(),
            held: AtomicUsize::new(0),
            max_buckets: AtomicUsize::new(usize::MAX),
            evicting: Mutex::new(()),
            evictions: AtomicU64::new(0),
            eviction_counter: metrics::counter!("tollgate_evictions_total"),
        };
        store.set_max_buckets(crate::config::StoreSettings::DEFAULT_MAX_BUCKETS);
        store
    }

    /// Bounds the store to `max` buckets, across all its shards.
    pub fn set_max_buckets(&self, max: usize) {
        self.max_buckets.store(max.max(1), Ordering::Relaxed);
    }

    /// Buckets evicted at the bound since the store was made.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Drops every bucket that has refilled completely; how many went.
    pub fn sweep_idle(&self, now: Timestamp) -> usize {
        let now = now.as_unix_nanos();
        self.shards
            .iter()
            .map(|shard| {
                let mut tables = shard.0.lock();
                let before = tables.len();
                tables.retain(now, |_, refills_in| refills_in > 0);
                let dropped = before - tables.len();
                self.count(false, dropped);
                dropped
            })
            .sum()
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
        let mut tables = self.shard(hash).lock();
        let decision = self.decide_in(&mut tables, hash, request);
        drop(tables);
        self.keep_bound(request.now.as_unix_nanos());
        decision
    }

    /// Decides `requests` together: if every one is admitted, every one takes its tokens;
    /// if any is refused, none takes anything (a strict bucket that refused still holds its
    /// refill back). Atomic: the shards involved are locked, in order, for the whole
    /// decision, so no concurrent request can come between the look and the take. Requests
    /// for one bucket count as one request of their summed cost.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tollgate::clock::{Clock, FakeClock};
    /// use tollgate::key::Client;
    /// use tollgate::store::{BucketRef, CheckMode, CheckRequest, MemoryStore, RuleId};
    /// use tollgate::Quota;
    ///
    /// let store = MemoryStore::new();
    /// let one = [Quota::new("1/min".parse()?, NonZeroU32::new(1).unwrap()).unwrap()];
    /// let two = [Quota::new("2/min".parse()?, NonZeroU32::new(2).unwrap()).unwrap()];
    /// let (a, b) = (Client::from_segment("a"), Client::from_segment("b"));
    /// let request = |client, quotas| CheckRequest {
    ///     bucket: BucketRef { rule: RuleId::new(0), client: Some(client) },
    ///     quotas,
    ///     cost: 1,
    ///     algorithm: tollgate::Algorithm::Gcra,
    ///     strict: false,
    ///     shaping: &tollgate::Shaping::NONE,
    ///     now: FakeClock::new().now(),
    ///     mode: CheckMode::Consume,
    /// };
    /// assert!(store.decide(request(&a, &one)).allowed()); // a is now empty
    /// let both = store.decide_all(&[request(&a, &one), request(&b, &two)]);
    /// assert!(!both[0].allowed() && both[1].allowed());
    /// assert_eq!(store.decide(request(&b, &two)).remaining(), 1, "b was not charged");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decide_all(&self, requests: &[CheckRequest<'_>]) -> Vec<Decision> {
        let (buckets, member) = all_or_nothing::by_bucket(requests, |request| {
            let hash = self.hasher.hash_one(request.bucket);
            (hash, self.shard_index(hash))
        });
        // Locked in ascending order, so two atomic decisions can never wait on each other.
        let mut shards: Vec<usize> = buckets.iter().map(|&(_, (_, shard))| shard).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut locked: Vec<_> = shards.iter().map(|&i| self.shards[i].0.lock()).collect();
        let mut decide = |request: CheckRequest<'_>, (hash, shard): (u64, usize)| {
            let at = shards.binary_search(&shard).unwrap_or(0);
            self.decide_in(&mut locked[at], hash, request)
        };
        let decided: Vec<Decision> = if all_or_nothing::consuming(requests) {
            let peeks: Vec<Decision> = buckets
                .iter()
                .map(|&(request, at)| decide(request.peek(), at))
                .collect();
            let admitted = peeks.iter().all(Decision::allowed);
            buckets
                .iter()
                .zip(peeks)
                .map(|(&(request, at), peek)| {
                    if all_or_nothing::takes(&request, &peek, admitted) {
                        decide(request, at)
                    } else {
                        peek
                    }
                })
                .collect()
        } else {
            buckets
                .iter()
                .map(|&(request, at)| decide(request, at))
                .collect()
        };
        drop(locked);
        if let Some(first) = requests.first() {
            self.keep_bound(first.now.as_unix_nanos());
        }
        all_or_nothing::in_order(&decided, &member)
    }

    /// Decides `request`, whose bucket hashes to `hash`, in the shard's locked `tables`.
    #[inline]
    fn decide_in(&self, tables: &mut Tables, hash: u64, request: CheckRequest<'_>) -> Decision {
        let now = request.now.as_unix_nanos();
        let rule = request.bucket.rule;
        let ip = compact_ip(request.bucket);
        let compact_interval = match (request.algorithm, request.quotas, ip) {
            (Algorithm::Gcra, [quota], Some(_)) if request.shaping.warmup_nanos() == 0 => {
                quota.interval_id()
            }
            _ => None,
        };
        if let (Some(ip), Some(interval)) = (ip, compact_interval)
            && let Some(compact) = tables.compact.find_mut(hash, |c| c.is(rule, ip))
        {
            return decide_compact(compact, &request, interval, now);
        }
        if let Some(entry) = tables
            .general
            .find_mut(hash, |entry| entry.bucket() == request.bucket)
        {
            return decide_general(entry, &request, now);
        }
        // A compact bucket whose rule no longer fits that layout moves to the general one.
        if let (Some(ip), None) = (ip, compact_interval)
            && let Ok(found) = tables.compact.find_entry(hash, |c| c.is(rule, ip))
        {
            let (compact, _) = found.remove();
            let hasher = &self.hasher;
            let entry = tables
                .general
                .insert_unique(hash, compact.to_entry(), |e| hasher.hash_one(e.bucket()))
                .into_mut();
            return decide_general(entry, &request, now);
        }
        // A new bucket. A full bucket and a missing one are the same: store only what took
        // something (or what strict mode held back).
        if request.mode == CheckMode::Refund {
            // Nothing taken, nothing to give back: a missing bucket is a full one.
            let peek = CheckRequest {
                mode: CheckMode::Peek,
                cost: 0,
                ..request
            };
            return State::fresh(request.algorithm, request.quotas, 0, now).decide(&peek, now);
        }
        let keep = |decision: &Decision| {
            request.mode.takes(decision.allowed())
                || (request.strict && request.mode != CheckMode::Peek)
                // smyte's buckets are written by every request that asks for tokens: one
                // that asks for more than there are still empties the bucket.
                || (request.algorithm == Algorithm::DiscreteRefill
                    && request.mode != CheckMode::Peek
                    && request.cost > 0)
        };
        if let (Some(ip), Some(interval)) = (ip, compact_interval) {
            let mut tat = [0];
            let decision = decide_gcra(&mut tat, &request, now);
            if keep(&decision) {
                let hasher = &self.hasher;
                tables.compact.insert_unique(
                    hash,
                    Compact::new(rule, ip, interval, tat[0], now),
                    |c| hash_compact(hasher, c),
                );
                self.count(true, 1);
            }
            return decision;
        }
        let mut state = State::fresh(
            request.algorithm,
            request.quotas,
            request.shaping.warmup_nanos(),
            now,
        );
        let decision = state.decide(&request, now);
        if keep(&decision) {
            let entry = Entry {
                rule,
                last_seen: seen_stamp(now),
                client: request
                    .bucket
                    .client
                    .map(|client| client.clone().into_owned()),
                state,
            };
            let hasher = &self.hasher;
            tables
                .general
                .insert_unique(hash, entry, |entry| hasher.hash_one(entry.bucket()));
            self.count(true, 1);
        }
        decision
    }

    /// The shard a bucket hashing to `hash` lives in.
    fn shard(&self, hash: u64) -> &Mutex<Tables> {
        &self.shards[self.shard_index(hash)].0
    }

    /// The index of that shard.
    fn shard_index(&self, hash: u64) -> usize {
        // The tables use the low bits and the top seven; pick the shard from the middle.
        (hash >> 32) as usize & (self.shards.len() - 1)
    }
}

/// The hash a compact bucket is filed under: the same as its [`BucketRef`]'s.
fn hash_compact(hasher: &foldhash::quality::RandomState, compact: &Compact) -> u64 {
    let client = compact.client();
    hasher.hash_one(BucketRef {
        rule: compact.rule,
        client: Some(&client),
    })
}

/// Decides against a stored compact bucket, carrying its TAT over if the rate changed.
fn decide_compact(
    compact: &mut Compact,
    request: &CheckRequest<'_>,
    interval: IntervalId,
    now: u64,
) -> Decision {
    let mut tat = [compact.tat];
    if compact.interval() != interval {
        let old = [compact.interval().nanos()];
        gcra::carry_over(&[compact.tat], &old, request.quotas, now, &mut tat);
    }
    if request.mode == CheckMode::Refund {
        gcra::give_back(&mut tat, request.quotas, request.cost, now);
        compact.update(tat[0], interval, now);
        let peek = CheckRequest {
            mode: CheckMode::Peek,
            cost: 0,
            ..*request
        };
        return decide_gcra(&mut tat, &peek, now);
    }
    let decision = decide_gcra(&mut tat, request, now);
    // A peek changes nothing, not even the interval a bucket is measured in.
    if request.mode != CheckMode::Peek {
        compact.update(tat[0], interval, now);
    }
    decision
}

/// Decides against a stored general bucket, carrying its state over if its rule changed.
fn decide_general(entry: &mut Entry, request: &CheckRequest<'_>, now: u64) -> Decision {
    if request.mode != CheckMode::Peek {
        entry.last_seen = seen_stamp(now);
    }
    entry.state.decide_carrying(request, now)
}

impl MemoryStore {
    /// Drops one bucket; whether it existed.
    pub fn remove_bucket(&self, bucket: BucketRef<'_>) -> bool {
        let hash = self.hasher.hash_one(bucket);
        let removed = self.shard(hash).lock().remove(hash, bucket);
        if removed {
            self.count(false, 1);
        }
        removed
    }

    /// Drops every bucket of `rules` (rules a reload removed).
    pub fn forget_rules(&self, rules: &[RuleId]) {
        if rules.is_empty() {
            return;
        }
        for shard in &self.shards {
            let mut tables = shard.0.lock();
            let before = tables.len();
            tables.retain(0, |rule, _| !rules.contains(&rule));
            self.count(false, before - tables.len());
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

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn check(&self, request: CheckRequest<'_>) -> Self::Future {
        ready(Ok(self.decide(request)))
    }

    fn check_all<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        Box::pin(ready(Ok(self.decide_all(requests))))
    }

    fn housekeeping(&self) -> Option<&dyn Housekeeping> {
        Some(self)
    }

    fn snapshots(&self) -> Option<&dyn Snapshots> {
        Some(self)
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        Some(self)
    }
}

impl Housekeeping for MemoryStore {
    fn forget(&self, rules: &[RuleId]) {
        self.forget_rules(rules);
    }

    fn configure(&self, rules: &StoreRules) {
        self.set_max_buckets(rules.settings().max_buckets);
    }

    fn sweep(&self, now: Timestamp) -> usize {
        self.sweep_idle(now)
    }
}

impl Snapshots for MemoryStore {
    fn save_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError> {
        self.save(rules, now)
    }

    fn restore_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError> {
        self.restore(rules, now)
    }
}

impl Inspection for MemoryStore {
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
    use crate::Quota;
    use crate::clock::{Clock, FakeClock};
    use crate::key::Client;
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
            algorithm: Algorithm::Gcra,
            strict: false,
            shaping: &crate::Shaping::NONE,
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

    fn poll<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("in-memory decisions are immediate"),
        }
    }

    #[test]
    fn sweeping_drops_refilled_buckets_and_never_a_partly_used_one() {
        let clock = FakeClock::new();
        let limits = crate::Limits::builder()
            .clock(clock.clone())
            .from_toml(
                "[limits]\n\"/\" = \"10/min\"\n\
                 slide = { rate = \"10/min\", algorithm = \"sliding-window\" }\n\
                 fixed = { rate = \"10/min\", algorithm = \"fixed-window\" }\n",
            )
            .unwrap();
        let take = |key: &str, n: u64| poll(limits.check(key, n)).unwrap();
        take("light", 1); // refilled after 6 s
        take("heavy", 10); // refilled after 60 s
        take("slide/a", 1); // its window stops counting two windows on
        take("fixed/a", 1); // its count resets at the next minute
        assert_eq!(limits.store().len(), 4);
        assert_eq!(
            limits.store().sweep_idle(clock.now()),
            0,
            "nothing has refilled yet"
        );

        clock.advance(Duration::from_secs(6));
        assert_eq!(
            limits.store().sweep_idle(clock.now()),
            1,
            "the light client refilled"
        );
        // The heavy client's bucket is untouched: exactly what it was, minus 6 s of refill.
        assert_eq!(poll(limits.peek("heavy")).unwrap().remaining(), 1);

        clock.advance(Duration::from_secs(54)); // FakeClock starts on a minute boundary
        assert_eq!(
            limits.store().sweep_idle(clock.now()),
            2,
            "heavy refilled; the fixed window reset"
        );
        assert_eq!(limits.store().len(), 1, "the sliding window still weighs");
        clock.advance(Duration::from_secs(60));
        assert_eq!(limits.store().sweep_idle(clock.now()), 1);
        assert!(limits.store().is_empty());
    }

    #[test]
    fn the_bound_holds_under_a_flood_and_the_heaviest_users_survive() {
        let clock = FakeClock::new();
        let limits = crate::Limits::builder()
            .clock(clock.clone())
            .from_toml("[store]\nmax_buckets = 256\n[limits]\n\"/\" = \"10/min\"\n")
            .unwrap();
        // Someone used their whole budget before the flood.
        for _ in 0..10 {
            assert!(poll(limits.check("10.0.0.1", 1)).unwrap().allowed());
        }
        // A bounded flood of distinct clients, one request each.
        for i in 0..20_000u32 {
            let client = std::net::Ipv4Addr::from(0x0b00_0000 + i).to_string();
            assert!(
                poll(limits.check(&client, 1)).unwrap().allowed(),
                "newcomers are decided correctly"
            );
        }
        let store = limits.store();
        assert!(store.len() <= 256, "{} buckets held", store.len());
        assert!(store.evictions() >= 20_000 - 256);
        // The one who used everything was never the closest to full: still limited.
        assert!(!poll(limits.check("10.0.0.1", 1)).unwrap().allowed());
    }

    #[test]
    fn a_bound_smaller_than_the_shard_count_still_keeps_the_exhausted_client() {
        let clock = FakeClock::new();
        let limits = crate::Limits::builder()
            .clock(clock.clone())
            .from_toml("[store]\nmax_buckets = 4\n[limits]\n\"/\" = \"10/min\"\n")
            .unwrap();
        assert!(limits.store().shards.len() > 4, "fewer buckets than shards");
        for _ in 0..10 {
            assert!(poll(limits.check("10.0.0.1", 1)).unwrap().allowed());
        }
        // Newcomers, one request each, land in every shard, the abuser's included.
        for i in 0..200u32 {
            let client = std::net::Ipv4Addr::from(0x0b00_0000 + i).to_string();
            assert!(poll(limits.check(&client, 1)).unwrap().allowed());
            assert!(limits.store().len() <= 4, "{} held", limits.store().len());
        }
        assert!(
            !poll(limits.check("10.0.0.1", 1)).unwrap().allowed(),
            "the exhausted client is the last to be forgotten"
        );
    }

    #[test]
    fn ipv4_buckets_are_compact_and_keep_their_state_when_a_reload_changes_the_rule() {
        let clock = FakeClock::new();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.toml");
        std::fs::write(&path, "[limits]\n\"/\" = \"10/min\"\n").unwrap();
        let limits = crate::Limits::builder()
            .clock(clock.clone())
            .load([&path])
            .unwrap();
        let take = |key: &str, n: u64| poll(limits.check(key, n)).unwrap();
        take("192.0.2.1", 6);
        take("api-key-1", 6);
        let layouts = |limits: &crate::Limits<MemoryStore>| {
            limits
                .store()
                .shards
                .iter()
                .map(|shard| {
                    let tables = shard.0.lock();
                    (tables.compact.len(), tables.general.len())
                })
                .fold((0, 0), |(c, g), (c2, g2)| (c + c2, g + g2))
        };
        assert_eq!(
            layouts(&limits),
            (1, 1),
            "the IPv4 client is compact, the key is not"
        );

        // Half the rate and burst: the six tokens used are still used, more than five.
        std::fs::write(&path, "[limits]\n\"/\" = \"5/min\"\n").unwrap();
        limits.reload().unwrap();
        assert_eq!(poll(limits.peek("192.0.2.1")).unwrap().remaining(), 0);
        assert_eq!(layouts(&limits), (1, 1), "a rate change keeps the layout");

        // A second quota does not fit 24 bytes: the bucket moves, and its use goes with it.
        std::fs::write(
            &path,
            "[limits]\n\"/\" = { rate = [\"10/min\", \"100/hour\"] }\n",
        )
        .unwrap();
        limits.reload().unwrap();
        let decision = poll(limits.check("192.0.2.1", 1)).unwrap();
        assert!(decision.allowed());
        assert_eq!(decision.remaining(), 3, "6 used before, 1 now, of 10");
        assert_eq!(layouts(&limits), (0, 2));
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
            algorithm: Algorithm::Gcra,
            strict: false,
            shaping: &crate::Shaping::NONE,
        });
        assert!(store.is_empty());
    }
}
