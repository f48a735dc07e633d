//! The disk store's engine: the open database (reopened after a write fault), the
//! per-bucket stripes, the sync thread, and one decision — a bucket read from disk when
//! memory lacks it, decided by memory, written through — or several together.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::codec;
use crate::algorithm::CheckMode;
use crate::config::{DiskSync, OnBackendError};
use crate::decision::Decision;
use crate::store::memory::Exported;
use crate::store::{BucketRef, CheckRequest, MemoryStore, RuleId, StoreError};

/// The database and its keyspace of buckets.
pub(super) struct Handles {
    pub(super) db: fjall::Database,
    pub(super) buckets: fjall::Keyspace,
}

/// How long after a write fault the store is opened again, at the least.
pub(super) const REOPEN_AFTER: Duration = Duration::from_millis(500);

/// Stripes of the per-bucket lock.
pub(super) const STRIPES: usize = 256;

pub(super) struct Inner {
    pub(super) memory: MemoryStore,
    /// The open store; replaced by a reopened one after a write fault (fjall refuses
    /// every write after one has failed, until it is opened again).
    pub(super) handles: parking_lot::RwLock<Option<Handles>>,
    pub(super) path: std::path::PathBuf,
    /// Each rule's key prefix, by id: this rule set's and the one before (a request
    /// decided under the old set can still be in flight).
    pub(super) prefixes: ArcSwap<HashMap<RuleId, Arc<[u8]>>>,
    pub(super) stripes: Box<[Mutex<()>]>,
    pub(super) hasher: foldhash::quality::RandomState,
    pub(super) sync: DiskSync,
    pub(super) on_error: ArcSwap<OnBackendError>,
    /// Writes made, and writes made durable (by count).
    pub(super) written: AtomicU64,
    pub(super) synced: Mutex<u64>,
    /// The latest decision time seen: what the compaction filter calls now.
    pub(super) latest: Arc<AtomicU64>,
    pub(super) failing: AtomicBool,
    pub(super) last_log: Mutex<Option<Instant>>,
    pub(super) last_reopen: Mutex<Option<Instant>>,
    pub(super) errors: metrics::Counter,
}

pub(super) fn open_db(
    path: &Path,
    latest: Arc<AtomicU64>,
) -> Result<(fjall::Database, fjall::Keyspace), StoreError> {
    let refused = |error: &dyn std::fmt::Display| StoreError::Invalid {
        reason: format!("cannot open the disk store at {}: {error}", path.display()),
    };
    std::fs::create_dir_all(path).map_err(|e| refused(&e))?;
    let factory: Arc<dyn fjall::compaction::filter::Factory> =
        Arc::new(codec::DropRefilled::new(latest));
    let assign = Arc::new(move |name: &str| (name == "buckets").then(|| Arc::clone(&factory)));
    // fjall panics on some damage it finds at recovery rather than returning it: caught, a
    // damaged store is refused like any other it cannot open.
    let opened = std::panic::catch_unwind(|| {
        fjall::Database::builder(path)
            .manual_journal_persist(true)
            .with_compaction_filter_factories(assign)
            .open()
            .and_then(|db| {
                let buckets = db.keyspace("buckets", fjall::KeyspaceCreateOptions::default)?;
                Ok((db, buckets))
            })
    });
    match opened {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(error)) => Err(refused(&error)),
        Err(_) => Err(refused(&"the store is damaged (recovery failed)")),
    }
}

/// Syncs every `every` while the store lives.
pub(super) fn start_syncing(inner: Weak<Inner>, every: Duration) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-disk-sync".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let written = inner.written.load(Ordering::Acquire);
                if written > *inner.synced.lock() {
                    let _ = inner.sync_through(written);
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the disk store's sync thread; writes are synced only at exit");
    }
}

impl Inner {
    /// Makes writes up to `target` durable, unless another caller has meanwhile.
    pub(super) fn sync_through(&self, target: u64) -> Result<(), StoreError> {
        let mut synced = self.synced.lock();
        if *synced >= target {
            return Ok(());
        }
        // Everything written by now is covered by this sync.
        let covered = self.written.load(Ordering::Acquire);
        let persisted = match self.handles.read().as_ref() {
            Some(handles) => handles.db.persist(fjall::PersistMode::SyncData),
            None => Err(fjall::Error::Poisoned),
        };
        match persisted {
            Ok(()) => {
                *synced = covered;
                self.failing.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => Err(self.fault(&error)),
        }
    }

    /// After a write fault, opens the store again (at most every [`REOPEN_AFTER`]):
    /// fjall refuses every write once one has failed, and recovery replays its journal.
    pub(super) fn reopen(&self) {
        {
            let mut last = self.last_reopen.lock();
            if last.is_some_and(|at| at.elapsed() < REOPEN_AFTER) {
                return;
            }
            *last = Some(Instant::now());
        }
        let mut handles = self.handles.write();
        // The old handles go first: they hold the directory's lock.
        drop(handles.take());
        match open_db(&self.path, Arc::clone(&self.latest)) {
            Ok((db, buckets)) => {
                *handles = Some(Handles { db, buckets });
                tracing::info!(path = %self.path.display(), "the disk store was opened again after a write fault");
            }
            Err(error) => {
                self.errors.increment(1);
                tracing::debug!(%error, "the disk store cannot be opened again yet");
            }
        }
    }

    /// Counts and logs (at most every 10 s) a failed write or sync.
    pub(super) fn fault(&self, error: &dyn std::fmt::Display) -> StoreError {
        self.errors.increment(1);
        self.failing.store(true, Ordering::Relaxed);
        let mut last = self.last_log.lock();
        if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
            *last = Some(Instant::now());
            tracing::error!(%error, on_backend_error = ?**self.on_error.load(), "the disk store cannot write; deciding by on_backend_error");
        }
        StoreError::Unavailable {
            reason: format!("disk store: {error}"),
        }
    }

    pub(super) fn key(&self, bucket: BucketRef<'_>) -> Option<Vec<u8>> {
        let prefix = if bucket.rule == RuleId::CALLER_DEFINED {
            codec::caller_defined_prefix()
        } else {
            Arc::clone(self.prefixes.load().get(&bucket.rule)?)
        };
        Some(codec::key(&prefix, bucket.client))
    }

    pub(super) fn stripe(&self, key: &[u8]) -> usize {
        (self.hasher.hash_one(key) as usize) % STRIPES
    }

    /// Reads `bucket` from disk into memory if memory does not hold it.
    pub(super) fn load(
        &self,
        bucket: BucketRef<'_>,
        key: &[u8],
        now: u64,
    ) -> Result<(), StoreError> {
        if self.memory.holds(bucket) {
            return Ok(());
        }
        let value = match self.handles.read().as_ref() {
            Some(handles) => handles.buckets.get(key).map_err(|e| self.fault(&e))?,
            None => return Err(self.fault(&"the disk store is being reopened")),
        };
        if let Some((layout, words)) = value.as_deref().and_then(|v| codec::value(v, now)) {
            self.memory.import_bucket(bucket, layout, words, now);
        }
        Ok(())
    }

    /// Writes a bucket's state as a decision left it (deleting it when it is full).
    pub(super) fn store(
        &self,
        key: Vec<u8>,
        exported: Exported,
        now: u64,
    ) -> Result<(), StoreError> {
        if self.failing.load(Ordering::Relaxed) {
            self.reopen();
        }
        let handles = self.handles.read();
        let Some(handles) = handles.as_ref() else {
            return Err(self.fault(&"the disk store is being reopened"));
        };
        let written = match exported {
            Some((layout, words, refills_in)) if refills_in > 0 => handles.buckets.insert(
                key,
                codec::encode(now.saturating_add(refills_in), layout, &words),
            ),
            _ => handles.buckets.remove(key),
        };
        written.map_err(|e| self.fault(&e))?;
        self.written.fetch_add(1, Ordering::AcqRel);
        self.failing.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// What a decision whose write failed answers: `on_backend_error`'s choice.
    pub(super) fn fallback(&self, decided: Decision, request: &CheckRequest<'_>) -> Decision {
        match **self.on_error.load() {
            OnBackendError::Local => decided,
            OnBackendError::Allow => Decision::unlimited(),
            OnBackendError::Deny => {
                let (limit, window) = request
                    .quotas
                    .first()
                    .map_or((0, 0), |q| (u64::from(q.burst()), q.capacity_nanos()));
                Decision::counted(
                    false,
                    0,
                    limit,
                    window,
                    0,
                    1_000_000_000,
                    1_000_000_000,
                    1_000_000_000,
                )
            }
        }
    }

    pub(super) fn decide(&self, request: CheckRequest<'_>) -> Decision {
        let now = request.now.as_unix_nanos();
        self.latest.fetch_max(now, Ordering::Relaxed);
        let Some(key) = self.key(request.bucket) else {
            // A rule this store was not told of: decided in memory alone.
            return self.memory.decide(request);
        };
        let stripe = self.stripe(&key);
        let guard = self.stripes.get(stripe).map(|lock| lock.lock());
        let loaded = self.load(request.bucket, &key, now);
        let (decision, exported) = self.memory.decide_exporting(request);
        let stored = if request.mode == CheckMode::Peek {
            Ok(())
        } else {
            self.store(key, exported, now)
        };
        drop(guard);
        if loaded.is_err() || stored.is_err() {
            return self.fallback(decision, &request);
        }
        if request.mode != CheckMode::Peek
            && self.sync == DiskSync::Always
            && self
                .sync_through(self.written.load(Ordering::Acquire))
                .is_err()
        {
            return self.fallback(decision, &request);
        }
        decision
    }

    /// Decides `requests` together, under the stripe locks of all their buckets: a look
    /// at each, then, if every one admits, a take from each. Every decision on these
    /// buckets takes the same locks, so nothing comes between the look and the take.
    pub(super) fn decide_all(&self, requests: &[CheckRequest<'_>]) -> Vec<Decision> {
        let keys: Vec<Option<Vec<u8>>> = requests.iter().map(|r| self.key(r.bucket)).collect();
        let mut stripes: Vec<usize> = keys.iter().flatten().map(|k| self.stripe(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let guards: Vec<_> = stripes
            .iter()
            .filter_map(|&s| self.stripes.get(s).map(|lock| lock.lock()))
            .collect();
        let mut failed = false;
        // Each bucket is read back just before it is decided: with a small cache, reading
        // one may have pushed another out of memory.
        let load = |request: &CheckRequest<'_>, key: &Option<Vec<u8>>| -> bool {
            let now = request.now.as_unix_nanos();
            self.latest.fetch_max(now, Ordering::Relaxed);
            key.as_ref()
                .is_some_and(|key| self.load(request.bucket, key, now).is_err())
        };
        // All or nothing is for taking: a charge or a refund reaches every bucket.
        let consuming = requests.iter().any(|r| r.mode == CheckMode::Consume);
        if consuming {
            let mut looks = Vec::with_capacity(requests.len());
            for (request, key) in requests.iter().zip(&keys) {
                failed |= load(request, key);
                let look = CheckRequest {
                    mode: CheckMode::Peek,
                    ..*request
                };
                looks.push(self.memory.decide_exporting(look).0);
            }
            if !looks.iter().all(Decision::allowed) {
                // Nothing taken; a strict bucket that refused still holds its refill back.
                for ((request, key), look) in requests.iter().zip(&keys).zip(looks.iter_mut()) {
                    if request.strict && !look.allowed() && request.mode == CheckMode::Consume {
                        failed |= load(request, key);
                        let (decision, exported) = self.memory.decide_exporting(*request);
                        if let Some(key) = key {
                            failed |= self
                                .store(key.clone(), exported, request.now.as_unix_nanos())
                                .is_err();
                        }
                        *look = decision;
                    }
                }
                drop(guards);
                if failed {
                    return looks
                        .into_iter()
                        .zip(requests)
                        .map(|(decision, request)| self.fallback(decision, request))
                        .collect();
                }
                return looks;
            }
        }
        let mut decisions = Vec::with_capacity(requests.len());
        for (request, key) in requests.iter().zip(keys) {
            failed |= load(request, &key);
            let (decision, exported) = self.memory.decide_exporting(*request);
            if let Some(key) = key
                && request.mode != CheckMode::Peek
            {
                failed |= self
                    .store(key, exported, request.now.as_unix_nanos())
                    .is_err();
            }
            decisions.push(decision);
        }
        drop(guards);
        if !failed && self.sync == DiskSync::Always {
            failed = self
                .sync_through(self.written.load(Ordering::Acquire))
                .is_err();
        }
        if failed {
            return decisions
                .into_iter()
                .zip(requests)
                .map(|(decision, request)| self.fallback(decision, request))
                .collect();
        }
        decisions
    }
}
