//! The `[store]` table: where buckets live and how they are kept.

use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::super::error::Diagnostic;
use super::super::raw::RawStore;
use super::super::source::SourceText;
use super::connection::RedisConnection;
use crate::quota::parse_duration;

/// The `[store]` table.
///
/// ```
/// use tollgate::config::{Backend, OnBackendError};
///
/// let limits = tollgate::Limits::from_toml(
///     "[store]\nmax_buckets = 100000\nbackend = \"redis\"\nurl = \"redis://10.0.0.5:6379\"\n\
///      on_backend_error = \"deny\"\n[limits]\n\"/\" = \"10/s\"\n",
/// )?;
/// let store = limits.rules().store().clone();
/// assert_eq!(store.max_buckets, 100_000);
/// assert_eq!(store.backend, Backend::Redis);
/// assert_eq!(store.redis.url, "redis://10.0.0.5:6379");
/// assert_eq!(store.redis.on_backend_error, OnBackendError::Deny);
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSettings {
    /// The most buckets held at once (`max_buckets`, default
    /// [`StoreSettings::DEFAULT_MAX_BUCKETS`]). At the bound, the buckets closest to full
    /// are evicted first.
    pub max_buckets: usize,
    /// How often buckets that have refilled completely are dropped (`sweep_interval`,
    /// default 10 s).
    pub sweep_interval: Duration,
    /// Where buckets are saved and restored across restarts (`snapshot`, default none).
    pub snapshot: Option<PathBuf>,
    /// How often the snapshot is written while running (`snapshot_interval`, default 60 s).
    pub snapshot_interval: Duration,
    /// Where buckets live (`backend`, default [`Backend::Memory`]).
    pub backend: Backend,
    /// The disk backend's settings (used when `backend = "disk"`).
    pub disk: DiskSettings,
    /// The Redis backend's settings (used when `backend = "redis"`).
    pub redis: RedisSettings,
}

/// Where buckets live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// `"memory"`: in this process (the default).
    #[default]
    Memory,
    /// `"redis"`: in a Redis server shared by several instances.
    Redis,
    /// `"redis-cluster"`: in a Redis Cluster, spread across its masters by client.
    RedisCluster,
    /// `"redis-sentinel"`: in the Redis master that Sentinel names, followed through
    /// failovers.
    RedisSentinel,
    /// `"disk"`: in an embedded store on local disk (`path`), durable across crashes and
    /// larger than memory (feature `disk`).
    Disk,
}

impl Backend {
    /// Whether buckets live in Redis (one server, a Cluster or behind Sentinel).
    pub fn is_redis(self) -> bool {
        matches!(
            self,
            Backend::Redis | Backend::RedisCluster | Backend::RedisSentinel
        )
    }
}

/// What a decision does when the Redis backend cannot answer in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBackendError {
    /// `"allow"`: admit the request (fail open).
    Allow,
    /// `"deny"`: refuse it with the usual 429 (fail closed).
    Deny,
    /// `"local"` (the default): decide with this instance's in-memory buckets, so every
    /// instance still enforces the limit on its own share of traffic.
    #[default]
    Local,
}

/// Where a Redis backend decides (`[store] sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncMode {
    /// `"remote"` (the default): every decision is one round trip to Redis.
    #[default]
    Remote,
    /// `"local"` (hybrid): each instance leases a share of a bucket's tokens from Redis
    /// and spends them without a round trip, renewing as they run out; leases given back
    /// and admissions made while Redis was down are settled every `sync_interval`.
    Local,
}

/// The disk backend's part of `[store]`.
///
/// ```
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[store]\nbackend = \"disk\"\npath = \"/var/lib/tollgate\"\nsync_interval = \"always\"\ncache_buckets = 100000\n",
/// );
/// # #[cfg(feature = "disk")] {
/// let store = rules?.store().clone();
/// assert_eq!(store.disk.path.unwrap().to_str(), Some("/var/lib/tollgate"));
/// assert_eq!(store.disk.sync, tollgate::config::DiskSync::Always);
/// assert_eq!(store.disk.cache_buckets, 100_000);
/// # }
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskSettings {
    /// The directory the store lives in (`path`; required with `backend = "disk"`).
    pub path: Option<PathBuf>,
    /// How often decisions are made durable (`sync_interval`, default 10 ms, or
    /// `"always"`).
    pub sync: DiskSync,
    /// Buckets kept in memory at most (`cache_buckets`, default 1,000,000); the rest are
    /// read from disk when asked for.
    pub cache_buckets: usize,
}

/// When the disk backend makes its writes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskSync {
    /// At least this often (`sync_interval = "10ms"`): a crash loses at most this long's
    /// spending; concurrent decisions share each sync.
    Every(Duration),
    /// Before each decision is answered (`sync_interval = "always"`); decisions waiting at
    /// the same time share one sync.
    Always,
}

impl Default for DiskSettings {
    fn default() -> Self {
        DiskSettings {
            path: None,
            sync: DiskSync::Every(Duration::from_millis(10)),
            cache_buckets: 1_000_000,
        }
    }
}

/// The Redis backend's part of `[store]`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisSettings {
    /// Where Redis is (`url`, default `redis://127.0.0.1:6379`; `rediss://` for TLS, with
    /// the crate's `tls` feature), without any password written in it (that is in
    /// [`connection`](Self::connection)). For a cluster, the first of
    /// [`nodes`](Self::nodes).
    pub url: String,
    /// Every URL `url` names: one for a single server; for a Redis Cluster, the seed nodes
    /// the client learns the cluster's topology from (one is enough, more ride out a dead
    /// seed at start).
    pub nodes: Vec<String>,
    /// Prepended to every bucket key (`key_prefix`, default `tollgate:`), so several
    /// deployments can share a server.
    pub key_prefix: String,
    /// How long one decision may wait for Redis before `on_backend_error` applies
    /// (`timeout`, default 50 ms).
    pub timeout: Duration,
    /// Multiplexed connections to Redis, used in turn (`connections`, default 2).
    pub connections: usize,
    /// What to do when Redis fails or is slow (`on_backend_error`, default `local`).
    pub on_backend_error: OnBackendError,
    /// Consecutive failures that open the circuit breaker (`breaker_failures`, default 3):
    /// while open, decisions skip Redis and apply `on_backend_error` at once.
    pub breaker_failures: u32,
    /// How long the breaker stays open before one request probes Redis again
    /// (`breaker_cooldown`, default 500 ms).
    pub breaker_cooldown: Duration,
    /// Where decisions are made (`sync`, default [`SyncMode::Remote`]).
    pub sync: SyncMode,
    /// With `sync = "local"`: how often leases and admissions are settled with Redis, and
    /// the time one lease covers — a bucket leases at most one `sync_interval`'s worth of
    /// its rate at a time across all instances (`sync_interval`, default 100 ms).
    pub sync_interval: Duration,
    /// How long a shared concurrency slot outlives its gateway: leases are renewed while
    /// their request is in flight, so a gateway that dies gives its slots back within this
    /// (`concurrency_lease`, default 10 s).
    pub concurrency_lease: Duration,
    /// Credentials, TLS and Sentinel.
    pub connection: RedisConnection,
}

impl StoreSettings {
    /// Four million buckets: about 200 MiB resident for one-quota buckets of IPv4 clients
    /// (≈ 53 bytes each, BENCHMARKS.md), about 650 MiB for API-key or window buckets — a
    /// small share of a 24 GiB machine, and room for a very busy service's clients.
    pub const DEFAULT_MAX_BUCKETS: usize = 4_000_000;
    /// How often the sweeper runs unless told otherwise.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(10);
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            max_buckets: Self::DEFAULT_MAX_BUCKETS,
            sweep_interval: Self::DEFAULT_SWEEP_INTERVAL,
            snapshot: None,
            snapshot_interval: Duration::from_secs(60),
            backend: Backend::Memory,
            disk: DiskSettings::default(),
            redis: RedisSettings::default(),
        }
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: "redis://127.0.0.1:6379".into(),
            nodes: vec!["redis://127.0.0.1:6379".into()],
            key_prefix: "tollgate:".into(),
            timeout: Duration::from_millis(50),
            connections: 2,
            on_backend_error: OnBackendError::Local,
            breaker_failures: 3,
            breaker_cooldown: Duration::from_millis(500),
            sync: SyncMode::Remote,
            sync_interval: Duration::from_millis(100),
            concurrency_lease: Duration::from_secs(10),
            connection: RedisConnection::default(),
        }
    }
}

impl StoreSettings {
    /// Applies one file's `[store]` table, reporting every bad value.
    pub(super) fn apply(&mut self, source: &SourceText, raw: &RawStore, out: &mut Vec<Diagnostic>) {
        let duration =
            |field: &str, text: &Spanned<String>, out: &mut Vec<Diagnostic>| match parse_duration(
                text.get_ref(),
            ) {
                Some(d) if !d.is_zero() => Some(d),
                _ => {
                    out.push(source.at(
                        text.span(),
                        format!(
                            "{field} \"{}\" is not a duration like \"10s\" or \"50ms\"",
                            text.get_ref()
                        ),
                    ));
                    None
                }
            };
        let count = |field: &str, n: &Spanned<i64>, max: i64, out: &mut Vec<Diagnostic>| {
            if (1..=max).contains(n.get_ref()) {
                usize::try_from(*n.get_ref()).ok()
            } else {
                out.push(source.at(
                    n.span(),
                    format!("{field} must be between 1 and {max}, found {}", n.get_ref()),
                ));
                None
            }
        };
        if let Some(max) = &raw.max_buckets
            && let Some(max) = count("max_buckets", max, i64::MAX, out)
        {
            self.max_buckets = max;
        }
        if let Some(path) = &raw.snapshot {
            match path.get_ref().trim() {
                "" => out.push(source.at(
                    path.span(),
                    "snapshot is empty: name a file, or leave it out",
                )),
                path => self.snapshot = Some(PathBuf::from(path)),
            }
        }
        if let Some(text) = &raw.snapshot_interval
            && let Some(d) = duration("snapshot_interval", text, out)
        {
            self.snapshot_interval = d;
        }
        if let Some(text) = &raw.sweep_interval
            && let Some(d) = duration("sweep_interval", text, out)
        {
            self.sweep_interval = d;
        }
        if let Some(backend) = &raw.backend {
            match backend.get_ref().as_str() {
                "memory" => self.backend = Backend::Memory,
                "redis" if cfg!(feature = "redis") => self.backend = Backend::Redis,
                "redis-cluster" if cfg!(feature = "redis") => self.backend = Backend::RedisCluster,
                "redis-sentinel" if cfg!(feature = "redis") => {
                    self.backend = Backend::RedisSentinel;
                }
                "disk" if cfg!(feature = "disk") => self.backend = Backend::Disk,
                name @ ("redis" | "redis-cluster" | "redis-sentinel") => out.push(source.at(
                    backend.span(),
                    format!("backend \"{name}\" needs tollgate built with its `redis` feature"),
                )),
                "disk" => out.push(source.at(
                    backend.span(),
                    "backend \"disk\" needs tollgate built with its `disk` feature",
                )),
                other => out.push(source.at(
                    backend.span(),
                    format!(
                        "backend must be \"memory\", \"disk\", \"redis\", \"redis-cluster\" or \"redis-sentinel\", found \"{other}\""
                    ),
                )),
            }
        }
        self.apply_disk(source, raw, out, count);
        self.apply_redis(source, raw, out, duration, count);
        let mut nodes = std::mem::take(&mut self.redis.nodes);
        self.redis.connection.apply(source, raw, &mut nodes, out);
        if let Some(first) = nodes.first() {
            self.redis.url.clone_from(first);
        }
        self.redis.nodes = nodes;
        self.check_connection(source, raw, out);
        if self.redis.sync == SyncMode::Local
            && self.backend == Backend::Memory
            && let Some(sync) = &raw.sync
        {
            out.push(source.at(
                sync.span(),
                "sync = \"local\" is the hybrid mode of the Redis backends: set backend = \"redis\" \
                 or \"redis-cluster\" (the memory backend is local already)",
            ));
        }
        if self.backend != Backend::RedisCluster
            && self.redis.nodes.len() > 1
            && let Some(url) = &raw.url
        {
            out.push(source.at(
                url.span(),
                "url lists several servers, which only backend = \"redis-cluster\" uses (its seed \
                 nodes); a single Redis takes one url",
            ));
        }
    }

    /// `path`, `cache_buckets`, and `sync_interval` as the disk backend reads it (a
    /// duration, or `"always"`); `backend = "disk"` needs a `path`.
    fn apply_disk(
        &mut self,
        source: &SourceText,
        raw: &RawStore,
        out: &mut Vec<Diagnostic>,
        count: impl Fn(&str, &Spanned<i64>, i64, &mut Vec<Diagnostic>) -> Option<usize>,
    ) {
        if let Some(path) = &raw.path {
            match path.get_ref().trim() {
                "" => out.push(source.at(path.span(), "path is empty: name a directory")),
                dir => self.disk.path = Some(PathBuf::from(dir)),
            }
        }
        if let Some(n) = &raw.cache_buckets
            && let Some(n) = count("cache_buckets", n, i64::MAX, out)
        {
            self.disk.cache_buckets = n;
        }
        if let Some(text) = &raw.sync_interval {
            match text.get_ref().trim() {
                "always" => self.disk.sync = DiskSync::Always,
                written => match parse_duration(written) {
                    Some(d) if !d.is_zero() && d <= Duration::from_secs(10) => {
                        self.disk.sync = DiskSync::Every(d);
                    }
                    _ if self.backend == Backend::Disk => out.push(source.at(
                        text.span(),
                        format!(
                            "sync_interval must be a duration between 1ms and 10s, or \"always\", found \"{written}\""
                        ),
                    )),
                    _ => {}
                },
            }
        }
        if let Some(backend) = &raw.backend
            && self.backend == Backend::Disk
            && self.disk.path.is_none()
        {
            out.push(source.at(
                backend.span(),
                "backend = \"disk\" needs path = \"/var/lib/tollgate\" (a directory of its own)",
            ));
        }
    }

    /// What this file's backend needs of the connection settings, said where it chose it.
    fn check_connection(&self, source: &SourceText, raw: &RawStore, out: &mut Vec<Diagnostic>) {
        let connection = &self.redis.connection;
        if let Some(backend) = &raw.backend
            && self.backend == Backend::RedisSentinel
            && (connection.sentinels.is_empty() || connection.master_name.is_none())
        {
            out.push(source.at(
                backend.span(),
                "backend = \"redis-sentinel\" needs sentinels = [\"redis://host:26379\", …] and \
                 master_name (the name the sentinels monitor the master under)",
            ));
        }
        if let Some(sentinels) = &raw.sentinels
            && self.backend != Backend::RedisSentinel
        {
            out.push(source.at(
                sentinels.span(),
                "sentinels are for backend = \"redis-sentinel\"",
            ));
        }
        let tls_urls = self
            .redis
            .nodes
            .iter()
            .any(|url| url.starts_with("rediss://"))
            || connection
                .sentinels
                .iter()
                .any(|url| url.starts_with("rediss://"));
        let written = raw.url.as_ref().map(Spanned::span);
        if tls_urls
            && !cfg!(feature = "tls")
            && let Some(url) = written.or(raw.sentinels.as_ref().map(Spanned::span))
        {
            out.push(source.at(
                url,
                "rediss:// needs tollgate built with its `tls` feature (the service has it)",
            ));
        }
        if let Some(tls) = &raw.tls
            && !tls_urls
            && self.backend.is_redis()
        {
            out.push(source.at(
                tls.span(),
                "[store.tls] applies to rediss:// URLs, and the Redis URLs here are redis://",
            ));
        }
    }

    fn apply_redis(
        &mut self,
        source: &SourceText,
        raw: &RawStore,
        out: &mut Vec<Diagnostic>,
        duration: impl Fn(&str, &Spanned<String>, &mut Vec<Diagnostic>) -> Option<Duration>,
        count: impl Fn(&str, &Spanned<i64>, i64, &mut Vec<Diagnostic>) -> Option<usize>,
    ) {
        let redis = &mut self.redis;
        if let Some(url) = &raw.url {
            let mut nodes = Vec::new();
            let mut valid = true;
            for (text, span) in &url.get_ref().0 {
                let text = text.trim();
                let schemes = ["redis://", "rediss://", "unix://", "redis+unix://"];
                if schemes.iter().any(|scheme| text.starts_with(scheme)) {
                    nodes.push(text.to_owned());
                } else {
                    valid = false;
                    out.push(source.at(
                        span.clone().unwrap_or_else(|| url.span()),
                        format!(
                            "url \"{text}\" is not a Redis URL like \"redis://127.0.0.1:6379\""
                        ),
                    ));
                }
            }
            match nodes.first() {
                Some(first) if valid => {
                    redis.url.clone_from(first);
                    redis.nodes = nodes;
                }
                None if valid => out.push(source.at(
                    url.span(),
                    "url is an empty list: name at least one Redis server",
                )),
                _ => {}
            }
        }
        if let Some(prefix) = &raw.key_prefix {
            let text = prefix.get_ref();
            if text.contains(['{', '}']) || text.len() > 64 {
                out.push(source.at(
                    prefix.span(),
                    "key_prefix must be at most 64 bytes without '{' or '}' (those mark the \
                     cluster hash tag)",
                ));
            } else {
                redis.key_prefix = text.clone();
            }
        }
        if let Some(text) = &raw.timeout
            && let Some(d) = duration("timeout", text, out)
        {
            redis.timeout = d;
        }
        if let Some(n) = &raw.connections
            && let Some(n) = count("connections", n, 64, out)
        {
            redis.connections = n;
        }
        if let Some(mode) = &raw.on_backend_error {
            match mode.get_ref().as_str() {
                "allow" => redis.on_backend_error = OnBackendError::Allow,
                "deny" => redis.on_backend_error = OnBackendError::Deny,
                "local" => redis.on_backend_error = OnBackendError::Local,
                other => out.push(source.at(
                    mode.span(),
                    format!(
                        "on_backend_error must be \"allow\", \"deny\" or \"local\", found \"{other}\""
                    ),
                )),
            }
        }
        if let Some(n) = &raw.breaker_failures
            && let Some(n) = count("breaker_failures", n, 1000, out)
        {
            redis.breaker_failures = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(text) = &raw.breaker_cooldown
            && let Some(d) = duration("breaker_cooldown", text, out)
        {
            redis.breaker_cooldown = d;
        }
        if let Some(mode) = &raw.sync {
            match mode.get_ref().as_str() {
                "remote" => redis.sync = SyncMode::Remote,
                "local" => redis.sync = SyncMode::Local,
                other => out.push(source.at(
                    mode.span(),
                    format!("sync must be \"remote\" or \"local\", found \"{other}\""),
                )),
            }
        }
        // Durations with bounds: (field, value, lowest, highest, how the bounds read).
        let bounded = [
            (
                "concurrency_lease",
                &raw.concurrency_lease,
                Duration::from_millis(300),
                Duration::from_secs(3600),
                "300ms and 1h",
                &mut redis.concurrency_lease,
            ),
            (
                "sync_interval",
                &raw.sync_interval,
                Duration::from_millis(1),
                Duration::from_secs(10),
                "1ms and 10s",
                &mut redis.sync_interval,
            ),
        ];
        for (field, text, low, high, bounds, target) in bounded {
            let Some(text) = text else {
                continue;
            };
            // The disk backend reads sync_interval itself ("always", or as little as 1ms).
            if field == "sync_interval" && self.backend == Backend::Disk {
                continue;
            }
            let Some(d) = duration(field, text, out) else {
                continue;
            };
            if (low..=high).contains(&d) {
                *target = d;
            } else {
                out.push(source.at(
                    text.span(),
                    format!(
                        "{field} must be between {bounds}, found \"{}\"",
                        text.get_ref()
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn every_bad_store_setting_is_reported_with_its_place() {
        let text = "[store]\nbackend = \"etcd\"\nurl = \"http://x\"\nkey_prefix = \"a{b}\"\n\
                    timeout = \"soon\"\nconnections = 0\non_backend_error = \"panic\"\n\
                    breaker_failures = -1\n[limits]\n\"/\" = \"1/s\"\n";
        let error = crate::Limits::from_toml(text).unwrap_err().to_string();
        for expected in [
            "<inline>:2:11: backend must be \"memory\", \"disk\", \"redis\", \"redis-cluster\" or \"redis-sentinel\", found \"etcd\"",
            "<inline>:3:7: url \"http://x\" is not a Redis URL",
            "<inline>:4:14: key_prefix must be at most 64 bytes without '{' or '}'",
            "<inline>:5:11: timeout \"soon\" is not a duration",
            "<inline>:6:15: connections must be between 1 and 64, found 0",
            "<inline>:7:20: on_backend_error must be \"allow\", \"deny\" or \"local\"",
            "<inline>:8:20: breaker_failures must be between 1 and 1000, found -1",
        ] {
            assert!(
                error.contains(expected),
                "missing {expected:?} in:\n{error}"
            );
        }
    }

    #[test]
    fn hybrid_sync_is_for_the_redis_backends_with_a_sane_interval() {
        let settings = |text: &str| {
            crate::Limits::from_toml(&format!("[store]\n{text}\n[limits]\n\"/\" = \"1/s\"\n"))
                .map(|limits| limits.rules().store().clone())
        };
        let hybrid =
            settings("backend = \"redis\"\nsync = \"local\"\nsync_interval = \"250ms\"").unwrap();
        assert_eq!(hybrid.redis.sync, super::super::SyncMode::Local);
        assert_eq!(hybrid.redis.sync_interval, Duration::from_millis(250));
        let plain = settings("backend = \"redis\"").unwrap();
        assert_eq!(plain.redis.sync, super::super::SyncMode::Remote);
        assert_eq!(plain.redis.sync_interval, Duration::from_millis(100));
        assert_eq!(plain.redis.concurrency_lease, Duration::from_secs(10));
        let leased = settings("backend = \"redis\"\nconcurrency_lease = \"2s\"").unwrap();
        assert_eq!(leased.redis.concurrency_lease, Duration::from_secs(2));

        for (text, expected) in [
            (
                "sync = \"local\"",
                "<inline>:2:8: sync = \"local\" is the hybrid mode of the Redis backends",
            ),
            (
                "backend = \"redis\"\nsync = \"often\"",
                "<inline>:3:8: sync must be \"remote\" or \"local\", found \"often\"",
            ),
            (
                "backend = \"redis\"\nsync_interval = \"1h\"",
                "<inline>:3:17: sync_interval must be between 1ms and 10s",
            ),
            (
                "backend = \"redis\"\nconcurrency_lease = \"10ms\"",
                "<inline>:3:21: concurrency_lease must be between 300ms and 1h, found \"10ms\"",
            ),
        ] {
            let error = settings(text).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "missing {expected:?} in:\n{error}"
            );
        }
    }

    #[test]
    fn the_disk_backend_needs_a_path_and_reads_its_own_sync_interval() {
        let settings = |text: &str| {
            crate::Limits::from_toml(&format!("[store]\n{text}\n[limits]\n\"/\" = \"1/s\"\n"))
                .map(|limits| limits.rules().store().clone())
        };
        let disk = settings("backend = \"disk\"\npath = \"/tmp/x\"").unwrap();
        assert_eq!(disk.backend, super::Backend::Disk);
        assert_eq!(
            disk.disk.sync,
            super::DiskSync::Every(Duration::from_millis(10))
        );
        assert_eq!(disk.disk.cache_buckets, 1_000_000);
        let always =
            settings("backend = \"disk\"\npath = \"/tmp/x\"\nsync_interval = \"always\"").unwrap();
        assert_eq!(always.disk.sync, super::DiskSync::Always);
        for (text, expected) in [
            (
                "backend = \"disk\"",
                "<inline>:2:11: backend = \"disk\" needs path = \"/var/lib/tollgate\"",
            ),
            (
                "backend = \"disk\"\npath = \"/tmp/x\"\nsync_interval = \"never\"",
                "<inline>:4:17: sync_interval must be a duration between 1ms and 10s, or \"always\"",
            ),
            (
                "backend = \"disk\"\npath = \"\"",
                "<inline>:3:8: path is empty",
            ),
            (
                "cache_buckets = 0",
                "<inline>:2:17: cache_buckets must be between 1",
            ),
        ] {
            let error = settings(text).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "missing {expected:?} in:\n{error}"
            );
        }
    }

    #[test]
    fn a_cluster_takes_a_list_of_seed_nodes_and_a_single_server_one_url() {
        let settings = |text: &str| {
            crate::Limits::from_toml(&format!("[store]\n{text}\n[limits]\n\"/\" = \"1/s\"\n"))
                .map(|limits| limits.rules().store().clone())
        };
        let cluster = settings(
            "backend = \"redis-cluster\"\nurl = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]",
        )
        .unwrap();
        assert_eq!(cluster.backend, super::super::Backend::RedisCluster);
        assert_eq!(cluster.redis.url, "redis://10.0.0.1:7000");
        assert_eq!(cluster.redis.nodes.len(), 2);
        let one = settings("backend = \"redis-cluster\"\nurl = \"redis://10.0.0.1:7000\"").unwrap();
        assert_eq!(one.redis.nodes, ["redis://10.0.0.1:7000"]);

        let error = settings("backend = \"redis\"\nurl = [\"redis://a:1\", \"redis://b:1\"]")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("<inline>:3:7: url lists several servers"),
            "{error}"
        );
        let error =
            settings("backend = \"redis-cluster\"\nurl = [\"redis://a:1\", \"http://b:1\"]")
                .unwrap_err()
                .to_string();
        assert!(
            error.contains("<inline>:3:23: url \"http://b:1\" is not a Redis URL"),
            "{error}"
        );
        let error = settings("backend = \"redis-cluster\"\nurl = []")
            .unwrap_err()
            .to_string();
        assert!(error.contains("url is an empty list"), "{error}");
    }
}
