//! Buckets in Redis, so several instances share one budget.
//!
//! Every decision is one `EVALSHA` of one Lua script (`scripts/decide/`): it reads the bucket,
//! decides every quota of the rule, and writes the bucket back atomically — one round trip
//! whatever the algorithm or the number of quotas. The script is sent by hash; a server
//! that does not know it (restarted, `SCRIPT FLUSH`ed) answers `NOSCRIPT` and the `redis`
//! crate loads it and retries, transparently. Time is the Redis server's `TIME`, so
//! instances with skewed clocks agree. Each bucket key expires when the bucket would be
//! full again, so idle buckets vanish by themselves and nothing needs sweeping.
//!
//! # Redis Cluster
//!
//! [`RedisStore::cluster`] (`backend = "redis-cluster"`) uses the `redis` crate's async
//! cluster client: it follows `MOVED`/`ASK`, refreshes its slot map and reconnects, with
//! retries tuned to milliseconds (`pool`). A bucket is one key, hash-tagged by rule and
//! client (`keys`), so every quota of a rule for a client is in one slot — one script, one
//! round trip, no `CROSSSLOT` — and clients spread over every master. The breaker and the
//! error count are per shard (`shards`): a dead master sends only its slots to
//! `on_backend_error` until its replica is promoted.
//!
//! # The arithmetic
//!
//! The script is the in-memory engines' arithmetic (`src/algorithm/`) transcribed to Lua.
//! Lua's numbers are doubles, exact for integers below 2⁵³. GCRA works as the in-memory
//! engine does, in integer nanoseconds — relative to now, so that an emission interval
//! that is not a whole number of microseconds (`3/2s`: 666,666,666 ns) is not rounded
//! against an absolute time of 10¹⁵ µs — with absolute times stored as whole microseconds
//! plus a nanosecond remainder. Windows work in microseconds. Decisions, and so every
//! header, are identical to the in-memory store's for the same instants, which the shared
//! test matrix checks (GCRA debts up to 104 days; beyond, they agree to a few nanoseconds).
//! State carries over across reloads that change a rule, as in memory.
//!
//! # When Redis fails
//!
//! Each decision waits at most `[store] timeout` (default 50 ms). A failure or timeout
//! applies `on_backend_error`: `local` (the default) decides with this instance's own
//! in-memory buckets — the limit still holds, per instance, rather than opening the gates
//! to whoever caused the outage or refusing everyone for a fault that is not theirs;
//! `allow` admits; `deny` refuses with a 429. Never a 500. After `breaker_failures`
//! failures in a row a circuit breaker skips Redis for `breaker_cooldown`, then lets one
//! decision probe it; recovery is automatic. Failures are counted
//! (`tollgate_backend_errors_total`, `tollgate_backend_fallbacks_total`,
//! `tollgate_backend_breaker_open`) and logged at most once every few seconds.
//!
//! # Runtime
//!
//! Decisions are futures that need a tokio runtime with timers (the gateway's, axum's,
//! hyper's). Outside one, `on_backend_error` applies, loudly, rather than panicking.
//!
//! ```no_run
//! use tollgate::store::RedisStore;
//! use tollgate::Limits;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = "[store]\nbackend = \"redis\"\n[limits]\n\"/\" = \"100/min\"\n";
//! let settings = tollgate::config::RedisSettings::default();
//! let limits = Limits::builder()
//!     .store(RedisStore::new(&settings)?)
//!     .from_toml(config)?;
//! let decision = limits.check("api/203.0.113.7", 1).await?;
//! assert!(decision.allowed());
//! # Ok(())
//! # }
//! ```

mod answer;
mod breaker;
mod calls;
mod caps;
mod connect;
mod hybrid;
mod keys;
mod listing;
mod many;
mod masters;
#[cfg(feature = "tls")]
mod named;
mod owned;
mod pool;
mod scripts;
mod shards;
mod shares;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use self::caps::HeldLeases;
use self::hybrid::Hybrid;
use self::keys::RuleKeys;
use self::listing::list;
use self::owned::OwnedRequest;
use self::pool::Pool;
use self::scripts::{decision_from, script_args};
use self::shards::Shards;
pub use self::shares::{CLAIMS_PER_CALL, ShareClaim, SharePart, ShareTerms};
use super::StoreRules;
use super::{
    AdminFuture, BucketQuery, BucketRef, BucketRow, CheckMode, CheckRequest, Housekeeping,
    Inspection, ManyFuture, MemoryStore, RuleId, SharedCaps, SlotFuture, Store, StoreError,
};
use crate::algorithm::Algorithm;
use crate::clock::Timestamp;
use crate::config::{RedisSettings, SyncMode};
use crate::decision::Decision;

/// The Redis bucket store: cheap to clone, every clone the same store.
///
/// ```
/// use tollgate::config::RedisSettings;
/// use tollgate::store::RedisStore;
///
/// // Nothing connects until the first decision.
/// let store = RedisStore::new(&RedisSettings::default())?;
/// assert!(!store.breaker_open());
/// # Ok::<(), tollgate::store::StoreError>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    settings: ArcSwap<RedisSettings>,
    rules: ArcSwap<RuleKeys>,
    /// The ids of the rule set configured last, whose keys the next generation keeps.
    current: Mutex<Vec<RuleId>>,
    /// Breakers and error counters: one, or one per cluster shard.
    shards: Arc<Shards>,
    local: MemoryStore,
    /// Hybrid mode's leases and settlements (`[store] sync = "local"`).
    hybrid: Hybrid,
    /// Shared concurrency slots this instance holds.
    leases: HeldLeases,
    caller_time: AtomicBool,
    fallbacks: metrics::Counter,
    /// The monotonic clock failures are logged and the shard table refreshed by.
    started: Instant,
    last_log: AtomicU64,
    suppressed: AtomicU64,
}

/// A decision on its way back from Redis.
pub type RedisFuture = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

impl RedisStore {
    /// A store for the server `settings.url` names. Nothing connects yet: the first
    /// decision does, inside the caller's tokio runtime. Fails only on a malformed URL.
    pub fn new(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let invalid = |reason| StoreError::Invalid { reason };
        let named = connect::naming(&settings.connection).map_err(invalid)?;
        let server =
            connect::single(&settings.url, &settings.connection, &named).map_err(invalid)?;
        Ok(RedisStore::with(
            Pool::single(server),
            Arc::new(Shards::single()),
            settings,
        ))
    }

    /// A store for the Redis Cluster whose seed nodes `settings.nodes` lists (one is
    /// enough). Nothing connects yet: the first decision does, inside the caller's tokio
    /// runtime. Fails only on a malformed URL.
    ///
    /// ```
    /// use tollgate::config::RedisSettings;
    /// use tollgate::store::RedisStore;
    ///
    /// let mut settings = RedisSettings::default();
    /// settings.nodes = vec!["redis://10.0.0.1:7000".into(), "redis://10.0.0.2:7000".into()];
    /// let store = RedisStore::cluster(&settings)?;
    /// assert!(store.is_cluster());
    /// # Ok::<(), tollgate::store::StoreError>(())
    /// ```
    pub fn cluster(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let invalid = |reason| StoreError::Invalid { reason };
        let named = connect::naming(&settings.connection).map_err(invalid)?;
        let builder = connect::cluster(settings, &named).map_err(invalid)?;
        let shards = Arc::new(Shards::cluster());
        let pool =
            Pool::cluster(builder, settings, Arc::clone(&shards), named).map_err(|error| {
                StoreError::Invalid {
                    reason: format!("Redis Cluster nodes {:?}: {error}", settings.nodes),
                }
            })?;
        Ok(RedisStore::with(pool, shards, settings))
    }

    /// A store for the Redis master the sentinels `settings.connection.sentinels` name
    /// `master_name`, asked again whenever the master stops answering as one (it died, or
    /// was demoted in a failover). Nothing connects yet: the first decision does, inside
    /// the caller's tokio runtime. Fails only on malformed settings.
    ///
    /// ```
    /// use tollgate::store::RedisStore;
    ///
    /// let limits = tollgate::Limits::from_toml(
    ///     "[store]\nbackend = \"redis-sentinel\"\nsentinels = [\"redis://10.0.0.1:26379\"]\n\
    ///      master_name = \"limits\"\n",
    /// )?;
    /// let store = RedisStore::sentinel(&limits.rules().store().redis)?;
    /// assert!(!store.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sentinel(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let invalid = |reason| StoreError::Invalid { reason };
        let named = connect::naming(&settings.connection).map_err(invalid)?;
        let sentinels = connect::sentinel(&settings.connection, &named).map_err(invalid)?;
        Ok(RedisStore::with(
            Pool::sentinel(sentinels),
            Arc::new(Shards::single()),
            settings,
        ))
    }

    fn with(pool: Pool, shards: Arc<Shards>, settings: &RedisSettings) -> RedisStore {
        RedisStore {
            inner: Arc::new(Inner {
                pool,
                settings: ArcSwap::from_pointee(settings.clone()),
                rules: ArcSwap::from_pointee(RuleKeys::default()),
                current: Mutex::new(Vec::new()),
                shards,
                local: MemoryStore::new(),
                hybrid: Hybrid::new(),
                leases: HeldLeases::new(),
                caller_time: AtomicBool::new(false),
                fallbacks: metrics::counter!("tollgate_backend_fallbacks_total"),
                started: Instant::now(),
                last_log: AtomicU64::new(0),
                suppressed: AtomicU64::new(0),
            }),
        }
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.pool.is_cluster()
    }

    /// Decides at the time each request carries (the limiter's clock, or `check_at`'s
    /// timestamp) instead of the Redis server's `TIME`. For tests and for replaying
    /// recorded traffic; instances sharing live traffic should keep the server's time.
    pub fn use_caller_time(&self, caller_time: bool) {
        self.inner.caller_time.store(caller_time, Ordering::Relaxed);
    }

    /// The in-memory buckets `on_backend_error = "local"` decides with.
    pub fn local(&self) -> &MemoryStore {
        &self.inner.local
    }

    /// Hybrid mode (`sync = "local"`): runs one settlement round as of `now` — the
    /// heartbeat when due, leases of idle buckets given back, admissions made without
    /// Redis charged. A background task does this every `sync_interval`, except with
    /// [`use_caller_time`](Self::use_caller_time), where time is the caller's: then the
    /// caller runs the rounds (simulations, replays). Does nothing in the default mode.
    pub async fn sync_at(&self, now: Timestamp) {
        if self.inner.settings.load().sync == SyncMode::Local {
            self.inner.sync_round(now).await;
        }
    }

    /// Hybrid mode: tokens admitted while Redis could not be reached that are not yet
    /// charged there (sent again every round until they are).
    ///
    /// ```
    /// use tollgate::config::RedisSettings;
    /// use tollgate::store::RedisStore;
    ///
    /// let store = RedisStore::new(&RedisSettings::default())?;
    /// assert_eq!(store.unsettled(), 0);
    /// # Ok::<(), tollgate::store::StoreError>(())
    /// ```
    pub fn unsettled(&self) -> u64 {
        self.inner.hybrid.leases.stats().1
    }

    /// Hybrid mode: instances sharing this Redis at the last heartbeat (0: not yet
    /// counted). Leases are shares of a bucket among them.
    pub fn instances(&self) -> u64 {
        self.inner.hybrid.peers()
    }

    /// Whether Redis answers a `PING` now (on a cluster, the node the client asks), within
    /// `[store] timeout` (at least 250 ms): what a readiness probe asks, whatever the
    /// traffic (a breaker only opens when decisions fail).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let settings = self.inner.settings.load_full();
        let wait = settings.timeout.max(Duration::from_millis(250));
        let asked = async {
            let mut connection = self.inner.pool.connection(&settings).await?;
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .map(|_| ())
        };
        match tokio::time::timeout(wait, asked).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                self.inner.pool.failed(&error);
                Err(StoreError::Unavailable {
                    reason: error.to_string(),
                })
            }
            Err(_) => Err(StoreError::Unavailable {
                reason: format!("Redis did not answer PING within {wait:?}"),
            }),
        }
    }

    /// Whether a circuit breaker is open: decisions (on a cluster, those of at least one
    /// shard) are skipping Redis.
    pub fn breaker_open(&self) -> bool {
        self.inner
            .shards
            .all()
            .iter()
            .any(|shard| shard.breaker.is_open())
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("nodes", &self.inner.settings.load().nodes)
            .field("breaker_open", &self.breaker_open())
            .finish_non_exhaustive()
    }
}

impl Store for RedisStore {
    type Future = RedisFuture;

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn check_all<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        self.decide_many(requests)
    }

    fn check(&self, request: CheckRequest<'_>) -> RedisFuture {
        // Caller-defined buckets' arithmetic is not in the script: they stay local.
        if request.bucket.rule == RuleId::CALLER_DEFINED {
            let decision = self.inner.local.decide(request);
            return Box::pin(std::future::ready(Ok(decision)));
        }
        let inner = Arc::clone(&self.inner);
        let settings = inner.settings.load_full();
        let key = inner
            .rules
            .load()
            .bucket_key(&settings.key_prefix, request.bucket);
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let Some(key) = key.filter(|_| in_runtime) else {
            let reason = if in_runtime {
                "a rule this store was not configured with"
            } else {
                "the Redis backend was used outside a tokio runtime"
            };
            inner.report(&inner.shards.for_key(""), &reason);
            let owned = OwnedRequest::new(&request);
            let decision =
                inner.fallback(&owned, settings.on_backend_error, settings.breaker_cooldown);
            return Box::pin(std::future::ready(Ok(decision)));
        };
        inner.refresh_shards(false);
        let shard = inner.shards.for_key(&key);
        // Held (delay) and warming rules are decided in Redis: a lease spent locally would
        // schedule against this instance's view alone.
        // A settlement in hybrid mode goes through the bucket's lease when it has one.
        if settings.sync == SyncMode::Local
            && request.algorithm == Algorithm::Gcra
            && *request.shaping == crate::Shaping::NONE
            && matches!(request.mode, CheckMode::Charge | CheckMode::Refund)
            && !request.quotas.iter().any(crate::Quota::counts_requests)
            && let Some(decision) = inner.hybrid.leases.settle(&key, &request)
        {
            return Box::pin(std::future::ready(Ok(decision)));
        }
        if settings.sync == SyncMode::Local
            && request.algorithm == Algorithm::Gcra
            && *request.shaping == crate::Shaping::NONE
            // A lease is of one kind of token; a rule counting requests too is decided in Redis.
            && !request.quotas.iter().any(crate::Quota::counts_requests)
            && matches!(request.mode, CheckMode::Consume | CheckMode::Peek)
        {
            return inner.check_hybrid(&request, key, settings, shard);
        }
        let owned = OwnedRequest::new(&request);
        if !shard
            .breaker
            .allows(shard.breaker.now(), settings.breaker_cooldown)
        {
            let decision =
                inner.fallback(&owned, settings.on_backend_error, settings.breaker_cooldown);
            return Box::pin(std::future::ready(Ok(decision)));
        }
        let caller_time = inner.caller_time.load(Ordering::Relaxed);
        let args = script_args(
            caller_time.then_some(request.now),
            request.mode,
            request.cost,
            request.strict,
            request.algorithm,
            request.quotas,
            request.shaping,
        );
        let held = matches!(request.mode, CheckMode::Consume | CheckMode::Session);
        Box::pin(async move {
            let shaping = held.then_some(&owned.shaping);
            let read =
                |reply: &[i64]| decision_from(reply, owned.algorithm, &owned.quotas, shaping);
            let fallback = |inner: &Inner| {
                inner.fallback(&owned, settings.on_backend_error, settings.breaker_cooldown)
            };
            Ok(inner
                .decide_or_else(&shard, &settings, &key, &args, read, fallback)
                .await)
        })
    }

    fn housekeeping(&self) -> Option<&dyn Housekeeping> {
        Some(self)
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        Some(self)
    }

    fn shared_caps(&self) -> Option<&dyn SharedCaps> {
        Some(self)
    }
}

impl Housekeeping for RedisStore {
    fn configure(&self, rules: &StoreRules) {
        let inner = &self.inner;
        let settings = &rules.settings().redis;
        let previous = inner.settings.load();
        if previous.nodes != settings.nodes
            || previous.connections != settings.connections
            || previous.connection != settings.connection
        {
            tracing::warn!(
                "[store] url, connections, credentials, TLS and sentinels apply at the next restart"
            );
        }
        let mut kept = settings.clone();
        kept.url.clone_from(&previous.url);
        kept.nodes.clone_from(&previous.nodes);
        kept.connections = previous.connections;
        kept.connection.clone_from(&previous.connection);
        inner.settings.store(Arc::new(kept));
        let mut current = inner.current.lock();
        let next = RuleKeys::next(rules, &inner.rules.load(), &current);
        inner.rules.store(Arc::new(next));
        *current = RuleKeys::ids(rules);
        inner.local.configure(rules);
        inner.hybrid.leases.reconfigured();
    }

    fn sweep(&self, now: Timestamp) -> usize {
        // Redis expires its keys; only the fallback buckets need sweeping.
        self.inner.local.sweep_idle(now)
    }
}

impl Inspection for RedisStore {
    fn buckets(&self, query: BucketQuery) -> AdminFuture<Vec<BucketRow>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let settings = inner.settings.load_full();
            let caller_time = inner.caller_time.load(Ordering::Relaxed);
            let listing = list(&inner.pool, &settings, &query, caller_time);
            answer::unavailable_within(settings.timeout.max(Duration::from_secs(2)), listing).await
        })
    }

    fn remove(&self, bucket: BucketRef<'_>) -> AdminFuture<bool> {
        let inner = Arc::clone(&self.inner);
        let settings = inner.settings.load_full();
        let key = inner.rules.load().bucket_key(&settings.key_prefix, bucket);
        if let Some(key) = &key {
            inner.hybrid.leases.forgive(key);
        }
        Box::pin(async move {
            let Some(key) = key else {
                return Ok(false);
            };
            let settings = inner.settings.load_full();
            let mut connection = inner
                .pool
                .connection(&settings)
                .await
                .map_err(unavailable)?;
            let removed: u64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            Ok(removed > 0)
        })
    }
}

impl SharedCaps for RedisStore {
    fn acquire_slot(&self, bucket: BucketRef<'_>, limit: u32) -> Option<SlotFuture> {
        tokio::runtime::Handle::try_current().ok()?;
        let settings = self.inner.settings.load();
        let key = self
            .inner
            .rules
            .load()
            .bucket_key(&settings.key_prefix, bucket)?;
        Some(self.inner.acquire_slot(&key, limit))
    }
}

fn unavailable(error: redis::RedisError) -> StoreError {
    StoreError::Unavailable {
        reason: error.to_string(),
    }
}
