//! The store `[store] backend` names: memory, Redis or a Redis Cluster, chosen by
//! configuration.
//!
//! What the gateway uses, and what a library user wants when the deployment, not the
//! code, decides where buckets live. The backend is chosen when the limiter is built
//! (the first rule set configures it); a reload that names another backend is logged and
//! applies at the next restart, since switching would silently reset every budget.
//!
//! With the disk backend every bucket is on disk, caller-defined ones too (smyte's `RL.*`
//! made durable). Caller-defined buckets (`RL.*`,
//! [`Limits::take_from`](crate::Limits::take_from)) otherwise live in this instance's
//! memory, even with Redis: their discrete-refill arithmetic is not
//! in the Redis script, so with several instances each keeps its own.

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use super::StoreRules;
use super::{
    AdminFuture, BucketQuery, BucketRef, BucketRow, CheckRequest, Housekeeping, Inspection,
    ManyFuture, MemoryStore, RuleId, SharedCaps, SlotFuture, SnapshotError, Snapshots, Store,
    StoreError,
};
use crate::clock::Timestamp;
use crate::config::Backend;
use crate::decision::Decision;

#[cfg(feature = "disk")]
use super::disk::DiskStore;
#[cfg(feature = "redis")]
use super::redis::{RedisFuture, RedisStore};

/// The store `[store] backend` names.
///
/// ```
/// use tollgate::store::{BackendStore, Store as _};
/// use tollgate::Limits;
///
/// let limits = Limits::builder()
///     .store(BackendStore::new())
///     .from_toml("[limits]\n\"/\" = \"10/s\"\n")?;
/// assert_eq!(limits.store().kind(), "memory", "no backend named: memory");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Debug, Default)]
pub struct BackendStore {
    memory: MemoryStore,
    chosen: OnceLock<Backend>,
    #[cfg(feature = "redis")]
    redis: OnceLock<RedisStore>,
    #[cfg(feature = "disk")]
    disk: OnceLock<DiskStore>,
    /// Why the Redis backend the config names could not be made, if it could not.
    unusable: OnceLock<String>,
}

impl BackendStore {
    /// A store that becomes what the first rule set's `[store] backend` names.
    pub fn new() -> BackendStore {
        BackendStore::default()
    }

    /// Why the Redis backend the config names could not be made (a malformed URL, an
    /// unreadable certificate file): buckets then stay in memory, and a service should not
    /// call itself ready. `None` when the backend is what the config says.
    pub fn unusable(&self) -> Option<&str> {
        self.unusable.get().map(String::as_str)
    }

    /// The in-memory buckets (the backend, or unused when Redis is).
    pub fn memory(&self) -> &MemoryStore {
        &self.memory
    }

    /// The disk store, when that is the backend.
    #[cfg(feature = "disk")]
    pub fn disk(&self) -> Option<&DiskStore> {
        self.disk.get()
    }

    /// The Redis store, when that is the backend (feature `redis`).
    #[cfg(feature = "redis")]
    pub fn redis(&self) -> Option<&RedisStore> {
        self.redis.get()
    }
}

/// A decision from whichever backend is in use.
pub enum BackendFuture {
    /// The in-memory store's immediate answer.
    Memory(Ready<Result<Decision, StoreError>>),
    /// Redis's answer, on its way.
    #[cfg(feature = "redis")]
    Redis(RedisFuture),
}

impl Future for BackendFuture {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            BackendFuture::Memory(ready) => Pin::new(ready).poll(cx),
            #[cfg(feature = "redis")]
            BackendFuture::Redis(future) => future.as_mut().poll(cx),
        }
    }
}

impl Store for BackendStore {
    type Future = BackendFuture;

    fn kind(&self) -> &'static str {
        #[cfg(feature = "disk")]
        if self.disk.get().is_some() {
            return "disk";
        }
        #[cfg(feature = "redis")]
        if self.redis.get().is_some() {
            return "redis";
        }
        "memory"
    }

    fn check(&self, request: CheckRequest<'_>) -> BackendFuture {
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            return BackendFuture::Memory(disk.check(request));
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get()
            && request.bucket.rule != RuleId::CALLER_DEFINED
        {
            return BackendFuture::Redis(redis.check(request));
        }
        BackendFuture::Memory(ready(Ok(self.memory.decide(request))))
    }

    fn check_all<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            return disk.check_all(requests);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get() {
            return redis.check_all(requests);
        }
        self.memory.check_all(requests)
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

    fn shared_caps(&self) -> Option<&dyn SharedCaps> {
        #[cfg(feature = "redis")]
        if self.redis.get().is_some() {
            return Some(self);
        }
        None
    }
}

impl Housekeeping for BackendStore {
    fn forget(&self, rules: &[RuleId]) {
        self.memory.forget(rules);
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            disk.forget(rules);
        }
    }

    fn configure(&self, rules: &StoreRules) {
        let wanted = rules.settings().backend;
        let chosen = *self.chosen.get_or_init(|| {
            #[cfg(feature = "disk")]
            if wanted == Backend::Disk {
                let store = &rules.settings();
                match DiskStore::open(&store.disk, store.redis.on_backend_error) {
                    Ok(disk) => {
                        let _ = self.disk.set(disk);
                        return wanted;
                    }
                    Err(error) => {
                        tracing::error!(%error, "disk backend unusable; buckets stay in memory");
                        let _ = self.unusable.set(error.to_string());
                    }
                }
            }
            #[cfg(feature = "redis")]
            if wanted.is_redis() {
                let settings = &rules.settings().redis;
                let store = match wanted {
                    Backend::RedisCluster => RedisStore::cluster(settings),
                    Backend::RedisSentinel => RedisStore::sentinel(settings),
                    _ => RedisStore::new(settings),
                };
                match store {
                    Ok(redis) => {
                        tracing::info!(nodes = ?settings.nodes, backend = ?wanted, "buckets live in Redis");
                        let _ = self.redis.set(redis);
                        return wanted;
                    }
                    Err(error) => {
                        tracing::error!(%error, "Redis backend unusable; buckets stay in memory");
                        let _ = self.unusable.set(error.to_string());
                    }
                }
            }
            Backend::Memory
        });
        if chosen != wanted {
            tracing::warn!(
                running = ?chosen,
                configured = ?wanted,
                "[store] backend changes apply at the next restart"
            );
        }
        self.memory.configure(rules);
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            disk.configure(rules);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get() {
            redis.configure(rules);
        }
    }

    fn sweep(&self, now: Timestamp) -> usize {
        let swept = self.memory.sweep(now);
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            return swept + disk.sweep(now);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get() {
            return swept + redis.sweep(now);
        }
        swept
    }
}

impl Snapshots for BackendStore {
    // With Redis, the rules' buckets are Redis's to keep; what memory holds then is the
    // caller-defined buckets, and those are saved and restored as without Redis.
    fn save_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError> {
        self.memory.save_snapshot(rules, now)
    }

    fn restore_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError> {
        self.memory.restore_snapshot(rules, now)
    }
}

impl Inspection for BackendStore {
    fn buckets(&self, query: BucketQuery) -> AdminFuture<Vec<BucketRow>> {
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            return disk.buckets(query);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get() {
            return redis.buckets(query);
        }
        self.memory.buckets(query)
    }

    fn remove(&self, bucket: BucketRef<'_>) -> AdminFuture<bool> {
        #[cfg(feature = "disk")]
        if let Some(disk) = self.disk.get() {
            return disk.remove(bucket);
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get()
            && bucket.rule != RuleId::CALLER_DEFINED
        {
            return redis.remove(bucket);
        }
        self.memory.remove(bucket)
    }
}

impl SharedCaps for BackendStore {
    fn acquire_slot(&self, bucket: BucketRef<'_>, limit: u32) -> Option<SlotFuture> {
        #[cfg(feature = "redis")]
        if let Some(redis) = self.redis.get() {
            return redis.acquire_slot(bucket, limit);
        }
        let _ = (bucket, limit);
        None
    }
}
