//! Buckets on local disk: see [`DiskStore`].

mod codec;
mod engine;

pub(crate) use codec::disk_value;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::StoreRules;
use super::{
    AdminFuture, BucketQuery, BucketRef, BucketRow, CheckRequest, Housekeeping, Inspection,
    ManyFuture, MemoryStore, RuleId, Store, StoreError,
};
use crate::clock::Timestamp;
use crate::config::{DiskSettings, DiskSync, OnBackendError};
use crate::decision::Decision;

use self::engine::{Handles, Inner, STRIPES, open_db, start_syncing};

/// The most stored buckets one listing reads.
const LIST_SCAN: usize = 1_000_000;

/// Buckets on local disk (`[store] backend = "disk"`): durable across crashes, and larger
/// than memory — smyte/ratelimit's design (RocksDB there), in Rust.
///
/// **Why fjall.** The store is an embedded LSM tree. fjall is pure Rust (no C++ toolchain,
/// a build of under a minute on this 2-core machine, where `rocksdb` takes several and
/// needs clang), keeps a stable on-disk format since 3.0, recovers a torn journal by itself,
/// locks its directory against a second process, and has compaction filters — what lets
/// refilled buckets go without a scan. RocksDB is the proven choice smyte and Limitador
/// made; what it would add here (merge operators, tuning for terabytes) a rate limiter's
/// small values do not need.
///
/// **How a decision goes.** The in-memory store decides, as it does alone: every algorithm
/// and front end works the same way. In front of it: a bucket the memory does not hold is
/// read from disk first (it was evicted, or the process restarted); after it, the bucket's
/// new state is written through to the store (a refilled bucket is deleted). One lock per
/// stripe of keys keeps the read, the decision and the write of one bucket in order. At
/// most `cache_buckets` buckets stay in memory — the memory store's own bound, which drops
/// the buckets closest to full first; they are on disk already.
///
/// **Durability.** Writes go to fjall's journal; a thread makes it durable (`fdatasync`)
/// every `sync_interval`, so a crash loses at most that long's spending. With `"always"`
/// each decision is answered only once its write is durable; decisions waiting at once
/// share one sync (the first to take the sync lock syncs for everyone written so far).
///
/// **Keys and values.** A key is the rule's key, a zero byte, a hash of the rule's
/// parameters (its quotas, algorithm, strictness, shaping: everything its buckets mean), the
/// kind of bucket and the client — so a bucket is never read back under other parameters
/// (a reload that changes a rule's numbers carries over the buckets memory holds; those on
/// disk start afresh), and keys of one rule share a prefix, which the LSM's blocks store
/// once. A value is the time the bucket will have refilled, its layout and its words (the
/// snapshot's). The compaction filter drops values whose refill time has passed.
///
/// **Listing.** `/buckets` reads the rules' buckets from disk — where every bucket is,
/// the cached ones as they are now — into a scratch store of at most a million, and
/// answers from it as memory would.
///
/// **Faults.** A write or sync that fails (a full disk) is counted
/// (`tollgate_disk_errors_total`), logged at most every 10 s, and answered by
/// `on_backend_error`: `local` (the default) keeps the decision memory made, `allow`
/// admits, `deny` refuses. fjall refuses every write once one has failed, so the store is
/// opened again (recovering its journal) at most every half second while failing; the
/// next write that succeeds ends it. A store that cannot be
/// opened — damaged, or locked by another process — is refused with the reason.
///
/// ```
/// use tollgate::Limits;
/// use tollgate::store::BackendStore;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let config = format!(
///     "[store]\nbackend = \"disk\"\npath = \"{}\"\nsync_interval = \"always\"\n[limits]\nlogin = \"5/h\"\n",
///     dir.path().display()
/// );
/// let limits = Limits::builder().store(BackendStore::new()).from_toml(&config)?;
/// assert_eq!(limits.check("login/me", 1).await?.remaining(), 4);
/// drop(limits);
/// // A restart (or a crash) later, the spend is still there.
/// let limits = Limits::builder().store(BackendStore::new()).from_toml(&config)?;
/// assert_eq!(limits.check("login/me", 1).await?.remaining(), 3);
/// # Ok(()) }
/// ```
pub struct DiskStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("sync", &self.inner.sync)
            .field("cached", &self.inner.memory.len())
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens (or creates) the store in `settings.path`, deciding with `on_error` when the
    /// disk fails. Refused, with the reason, when the directory cannot be opened: another
    /// process holds it, or it is damaged beyond what recovery repairs.
    pub fn open(
        settings: &DiskSettings,
        on_error: OnBackendError,
    ) -> Result<DiskStore, StoreError> {
        let Some(path) = &settings.path else {
            return Err(StoreError::Invalid {
                reason: "backend = \"disk\" needs [store] path".to_owned(),
            });
        };
        // Only decision times move it: a store run on a fake clock keeps its buckets.
        let latest = Arc::new(AtomicU64::new(0));
        let (db, buckets) = open_db(path, Arc::clone(&latest))?;
        let handles = parking_lot::RwLock::new(Some(Handles { db, buckets }));
        let memory = MemoryStore::new();
        memory.set_max_buckets(settings.cache_buckets);
        let inner = Arc::new(Inner {
            memory,
            handles,
            path: path.clone(),
            prefixes: ArcSwap::from_pointee(HashMap::new()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: foldhash::quality::RandomState::default(),
            sync: settings.sync,
            on_error: ArcSwap::from_pointee(on_error),
            written: AtomicU64::new(0),
            synced: Mutex::new(0),
            latest,
            failing: AtomicBool::new(false),
            last_log: Mutex::new(None),
            last_reopen: Mutex::new(None),
            errors: metrics::counter!("tollgate_disk_errors_total"),
        });
        if let DiskSync::Every(every) = settings.sync {
            start_syncing(Arc::downgrade(&inner), every);
        }
        tracing::info!(path = %path.display(), sync = ?settings.sync, cache_buckets = settings.cache_buckets, "buckets live on disk");
        Ok(DiskStore { inner })
    }

    /// The buckets held in memory (at most `cache_buckets`).
    pub fn memory(&self) -> &MemoryStore {
        &self.inner.memory
    }

    /// Buckets on disk, roughly (the LSM's estimate: overwritten and dropped buckets may
    /// count until compaction).
    pub fn approximate_len(&self) -> usize {
        self.inner
            .handles
            .read()
            .as_ref()
            .map_or(0, |h| h.buckets.approximate_len())
    }

    /// Bytes the store takes on disk.
    pub fn disk_space(&self) -> u64 {
        self.inner
            .handles
            .read()
            .as_ref()
            .map_or(0, |h| h.db.disk_space().unwrap_or(0))
    }

    /// Compacts the whole store now (fjall compacts in the background by itself): what a
    /// test or an operator freeing space asks for. Buckets refilled by the latest decision
    /// time seen are dropped on the way.
    pub fn compact(&self) -> Result<(), StoreError> {
        let handles = self.inner.handles.read();
        let Some(handles) = handles.as_ref() else {
            return Ok(());
        };
        handles
            .buckets
            .rotate_memtable_and_wait()
            .and_then(|()| handles.buckets.major_compact())
            .map_err(|e| self.inner.fault(&e))
    }

    /// Makes every write so far durable now.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.inner
            .sync_through(self.inner.written.load(Ordering::Acquire))
    }

    /// Whether the last write or sync failed (and `on_backend_error` is deciding).
    pub fn failing(&self) -> bool {
        self.inner.failing.load(Ordering::Relaxed)
    }
}

impl Store for DiskStore {
    type Future = std::future::Ready<Result<Decision, StoreError>>;

    fn kind(&self) -> &'static str {
        "disk"
    }

    fn check(&self, request: CheckRequest<'_>) -> Self::Future {
        std::future::ready(Ok(self.inner.decide(request)))
    }

    fn check_all<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        Box::pin(std::future::ready(Ok(self.inner.decide_all(requests))))
    }

    fn housekeeping(&self) -> Option<&dyn Housekeeping> {
        Some(self)
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        Some(self)
    }
}

impl Housekeeping for DiskStore {
    fn forget(&self, rules: &[RuleId]) {
        self.inner.memory.forget(rules);
    }

    fn configure(&self, rules: &StoreRules) {
        let inner = &self.inner;
        inner.memory.configure(rules);
        // The cache's bound, not `max_buckets`: the rest of the buckets are on disk.
        inner
            .memory
            .set_max_buckets(rules.settings().disk.cache_buckets);
        if rules.settings().disk.sync != inner.sync {
            tracing::warn!("[store] sync_interval of the disk backend applies at the next restart");
        }
        inner
            .on_error
            .store(Arc::new(rules.settings().redis.on_backend_error));
        let previous = inner.prefixes.load_full();
        let mut next: HashMap<RuleId, Arc<[u8]>> = rules
            .rules()
            .iter()
            .map(|rule| (rule.id, codec::rule_prefix(rule)))
            .collect();
        for (id, prefix) in previous.iter() {
            next.entry(*id).or_insert_with(|| Arc::clone(prefix));
        }
        inner.prefixes.store(Arc::new(next));
    }

    fn sweep(&self, now: Timestamp) -> usize {
        self.inner
            .latest
            .fetch_max(now.as_unix_nanos(), Ordering::Relaxed);
        self.inner.memory.sweep_idle(now)
    }
}

impl Inspection for DiskStore {
    /// Every bucket of the rules in force, read from disk (where every bucket is, the
    /// cached ones as they are now) into a scratch store of at most a million buckets,
    /// then filtered, sorted and cut as in memory.
    fn buckets(&self, query: BucketQuery) -> AdminFuture<Vec<BucketRow>> {
        let inner = &self.inner;
        let Some(keyspace) = inner.handles.read().as_ref().map(|h| h.buckets.clone()) else {
            return inner.memory.buckets(query);
        };
        let now = query.now.as_unix_nanos();
        let scratch = MemoryStore::new();
        scratch.set_max_buckets(usize::MAX);
        let mut scanned = 0usize;
        let stored = StoreRules::new(&query.rules);
        'rules: for rule in stored.rules().iter().filter(|rule| !rule.candidate) {
            let prefix = codec::rule_prefix(rule);
            for item in keyspace.prefix(&*prefix) {
                if scanned >= LIST_SCAN {
                    tracing::warn!(scanned, "bucket listing stopped at its bound");
                    break 'rules;
                }
                scanned += 1;
                let Ok((key, value)) = item.into_inner() else {
                    continue;
                };
                let Some((layout, words)) = codec::value(&value, now) else {
                    continue;
                };
                let client = match key.get(prefix.len()..) {
                    Some([b'c', client @ ..]) => match std::str::from_utf8(client) {
                        Ok(client) => Some(crate::key::Client::from_segment(client).into_owned()),
                        Err(_) => continue,
                    },
                    Some([b'g']) => None,
                    _ => continue,
                };
                let bucket = BucketRef {
                    rule: rule.id,
                    client: client.as_ref(),
                };
                scratch.import_bucket(bucket, layout, words, now);
            }
        }
        scratch.buckets(query)
    }

    fn remove(&self, bucket: BucketRef<'_>) -> AdminFuture<bool> {
        let inner = &self.inner;
        let on_disk = inner
            .key(bucket)
            .zip(inner.handles.read().as_ref().map(|h| h.buckets.clone()))
            .map(|(key, buckets)| {
                let held = buckets.contains_key(&key).unwrap_or(false);
                let removed = buckets.remove(key).is_ok();
                held && removed
            })
            .unwrap_or(false);
        let in_memory = inner.memory.remove(bucket);
        Box::pin(async move { Ok(in_memory.await.unwrap_or(false) || on_disk) })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::DiskSettings;
    use tollgate_testkit::now_or_never;

    fn settings(dir: &Path, sync: DiskSync, cache: usize) -> DiskSettings {
        DiskSettings {
            path: Some(dir.to_path_buf()),
            sync,
            cache_buckets: cache,
        }
    }

    #[test]
    fn a_second_store_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = DiskStore::open(
            &settings(dir.path(), DiskSync::Always, 10),
            OnBackendError::Local,
        )
        .unwrap();
        let second = DiskStore::open(
            &settings(dir.path(), DiskSync::Always, 10),
            OnBackendError::Local,
        );
        let error = second.unwrap_err().to_string();
        assert!(error.contains("cannot open the disk store"), "{error}");
        drop(first);
    }

    #[test]
    fn buckets_survive_eviction_from_memory_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let limits = |cache: usize| {
            let store = DiskStore::open(
                &settings(dir.path(), DiskSync::Always, cache),
                OnBackendError::Local,
            )
            .unwrap();
            crate::Limits::builder()
                .store(store)
                .clock(crate::clock::FakeClock::new())
                .from_toml(&format!(
                    "[store]\ncache_buckets = {cache}\n[limits]\napi = \"5/min\"\n"
                ))
                .unwrap()
        };
        let limits_one = limits(2);
        let check = |limits: &crate::Limits<DiskStore>, client: &str| {
            let key = format!("api/{client}");
            now_or_never(limits.check(&key, 1)).unwrap().remaining()
        };
        assert_eq!(check(&limits_one, "a"), 4);
        // Ten other clients push a out of a cache of two.
        for i in 0..10 {
            check(&limits_one, &format!("c{i}"));
        }
        assert!(limits_one.store().memory().len() <= 3);
        assert_eq!(check(&limits_one, "a"), 3, "read back from disk");
        drop(limits_one);
        let limits_two = limits(100);
        assert_eq!(check(&limits_two, "a"), 2, "and across a reopen");
    }

    #[test]
    fn compaction_drops_refilled_buckets_without_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(
            &settings(dir.path(), DiskSync::Always, 100),
            OnBackendError::Local,
        )
        .unwrap();
        let clock = crate::clock::FakeClock::new();
        let limits = crate::Limits::builder()
            .store(store)
            .clock(clock.clone())
            .from_toml("[limits]\nshort = \"5/s\"\nlong = \"5/day\"\n")
            .unwrap();
        for i in 0..50 {
            let short = format!("short/c{i}");
            let long = format!("long/c{i}");
            now_or_never(limits.check(&short, 1)).unwrap();
            now_or_never(limits.check(&long, 1)).unwrap();
        }
        let disk = limits.store();
        disk.compact().unwrap();
        let before = disk
            .inner
            .handles
            .read()
            .as_ref()
            .map(|h| h.buckets.len().unwrap())
            .unwrap();
        assert_eq!(before, 100);
        // An hour on: the short buckets have refilled; the next decision tells the store so.
        clock.advance(std::time::Duration::from_secs(3_600));
        now_or_never(limits.check("long/c0", 1)).unwrap();
        disk.compact().unwrap();
        let after = disk
            .inner
            .handles
            .read()
            .as_ref()
            .map(|h| h.buckets.len().unwrap())
            .unwrap();
        assert_eq!(after, 50, "the 50 refilled buckets went at compaction");
    }
}
