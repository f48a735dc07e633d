//! The shared handle: the active rules (behind an atomic swap), the bucket store and the
//! clock. Clones are cheap and share everything, so every clone of the layer draws on one
//! budget.
//!
//! ```
//! use tollgate::Limits;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::from_toml(r#"
//!     [limits]
//!     "login" = "2/min"
//! "#)?;
//! assert!(limits.check("login/alice", 1).await?.allowed());
//! assert!(limits.check("login/alice", 1).await?.allowed());
//! assert!(!limits.check("login/alice", 1).await?.allowed());
//! assert!(limits.check("login/bob", 1).await?.allowed());
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::Request;
use parking_lot::Mutex;

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::config::Source;
use crate::config::rules::{inline_path, read_sources};
use crate::config::{ConfigError, Limit, Per, Rule, RuleSet};
use crate::decision::Decision;
use crate::key::{Client, SegmentBuffer, normalize_route};
use crate::reload::{FileWatcher, ReloadState, ReloadStatus, WatchError};
use crate::store::{BucketRef, CheckMode, CheckRequest, MemoryStore, Store, StoreError};

/// Rules, buckets and clock, shared by every clone.
pub struct Limits<St = MemoryStore> {
    shared: Arc<Shared<St>>,
}

pub(crate) struct Shared<St> {
    /// The active rules: one lock-free load per request.
    pub(crate) rules: ArcSwap<RuleSet>,
    pub(crate) store: St,
    clock: Box<dyn Clock>,
    /// Serialises reloads and remembers what is applied.
    pub(crate) reload: Mutex<ReloadState>,
    pub(crate) status: tokio::sync::watch::Sender<ReloadStatus>,
    /// The file watcher, if watching; dropped (and stopped) with the last clone.
    pub(crate) watcher: Mutex<Option<FileWatcher>>,
    /// Dropping it (with the last clone) wakes and stops the sweeper.
    _sweeper: std::sync::mpsc::Sender<()>,
}

impl<St> Clone for Limits<St> {
    fn clone(&self) -> Self {
        Limits {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<St> std::fmt::Debug for Limits<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("rules", &self.shared.rules.load().rules().len())
            .field("clock", &self.shared.clock)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Limits`] with a chosen store or clock.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Limits;
/// use tollgate::clock::FakeClock;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = FakeClock::new();
/// let limits = Limits::builder()
///     .clock(clock.clone())
///     .from_toml("[limits]\n\"/\" = \"1/s\"\n")?;
/// assert!(limits.check("me", 1).await?.allowed());
/// assert!(!limits.check("me", 1).await?.allowed());
/// clock.advance(Duration::from_secs(1));
/// assert!(limits.check("me", 1).await?.allowed());
/// # Ok(()) }
/// ```
#[must_use]
pub struct LimitsBuilder<St = MemoryStore> {
    store: St,
    clock: Option<Box<dyn Clock>>,
}

impl<St: Store> LimitsBuilder<St> {
    /// Keeps buckets in `store` instead of the in-memory default.
    pub fn store<T: Store>(self, store: T) -> LimitsBuilder<T> {
        LimitsBuilder {
            store,
            clock: self.clock,
        }
    }

    /// Reads time from `clock` instead of the [`SystemClock`].
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Box::new(clock));
        self
    }

    /// Loads config files, later files overriding earlier ones rule by rule.
    pub fn load<P: AsRef<Path>>(
        self,
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Limits<St>, ConfigError> {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        let sources = read_sources(&paths)?;
        self.build(sources, paths)
    }

    /// Loads config files and re-applies them whenever they change; see
    /// [`reload`](crate::reload).
    pub fn watch<P: AsRef<Path>>(
        self,
        paths: impl IntoIterator<Item = P>,
    ) -> Result<Limits<St>, WatchError> {
        let limits = self.load(paths)?;
        limits.start_watching()?;
        Ok(limits)
    }

    /// Uses config text instead of files (errors name the file `<inline>`).
    pub fn from_toml(self, text: &str) -> Result<Limits<St>, ConfigError> {
        self.build(vec![Source::new(inline_path(), text)], Vec::new())
    }

    fn build(self, sources: Vec<Source>, paths: Vec<PathBuf>) -> Result<Limits<St>, ConfigError> {
        let rules = RuleSet::compile(&sources, None).map_err(ConfigError::Invalid)?;
        metrics::gauge!("tollgate_config_generation").set(1.0);
        self.store.configure(&rules);
        let (status, _) = tokio::sync::watch::channel(ReloadStatus::new(paths.clone()));
        let (sweeper, stop) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            rules: ArcSwap::from_pointee(rules),
            store: self.store,
            clock: self.clock.unwrap_or_else(|| Box::new(SystemClock::new())),
            reload: Mutex::new(ReloadState {
                paths,
                applied: sources.into_iter().map(|s| s.text).collect(),
            }),
            status,
            watcher: Mutex::new(None),
            _sweeper: sweeper,
        });
        restore(&shared);
        start_maintenance(Arc::downgrade(&shared), stop);
        Ok(Limits { shared })
    }
}

/// Reads `[store] snapshot` back, if set: a missing or damaged snapshot is logged and
/// ignored, never fatal.
fn restore<St: Store>(shared: &Shared<St>) {
    let rules = shared.rules.load();
    let Some(path) = &rules.store().snapshot else {
        return;
    };
    match shared.store.restore_snapshot(&rules, shared.clock.now()) {
        Ok(restored) => tracing::info!(restored, snapshot = %path.display(), "buckets restored"),
        Err(error) => tracing::warn!(%error, "snapshot ignored; starting with full buckets"),
    }
}

/// In the background until the limiter is gone: drops refilled buckets every
/// `[store] sweep_interval`, and writes the snapshot every `snapshot_interval` if one is set.
fn start_maintenance<St: Store>(
    shared: std::sync::Weak<Shared<St>>,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-maintenance".into())
        .spawn(move || {
            let (mut last_sweep, mut last_snapshot) =
                (std::time::Instant::now(), std::time::Instant::now());
            loop {
                let Some(settings) = shared.upgrade().map(|s| s.rules.load().store().clone())
                else {
                    return;
                };
                let due = |last: std::time::Instant, every: std::time::Duration| {
                    every.saturating_sub(last.elapsed())
                };
                let mut wait = due(last_sweep, settings.sweep_interval);
                if settings.snapshot.is_some() {
                    wait = wait.min(due(last_snapshot, settings.snapshot_interval));
                }
                // Woken early only by the last clone going away.
                match stop.recv_timeout(wait) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if last_sweep.elapsed() >= settings.sweep_interval {
                    last_sweep = std::time::Instant::now();
                    let swept = shared.store.sweep(shared.clock.now());
                    if swept > 0 {
                        tracing::debug!(swept, "swept buckets that had refilled");
                    }
                }
                if settings.snapshot.is_some()
                    && last_snapshot.elapsed() >= settings.snapshot_interval
                {
                    last_snapshot = std::time::Instant::now();
                    let rules = shared.rules.load();
                    if let Err(error) = shared.store.save_snapshot(&rules, shared.clock.now()) {
                        tracing::warn!(%error, "cannot write the snapshot");
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start bucket maintenance; idle buckets stay until evicted");
    }
}

impl Limits {
    /// Loads config files into an in-memory limiter on the system clock.
    ///
    /// Several files layer: later files override earlier ones rule by rule, and setting
    /// by setting in `[key]`, `[client]` and `[response]`.
    pub fn load<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Limits, ConfigError> {
        Limits::builder().load(paths)
    }

    /// Loads config files into an in-memory limiter and keeps it in step with them: every
    /// valid save applies within a second, an invalid one changes nothing and is reported.
    /// See [`reload`](crate::reload) for exactly what is watched and what survives.
    pub fn watch<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Limits, WatchError> {
        Limits::builder().watch(paths)
    }

    /// An in-memory limiter on the system clock from config text.
    pub fn from_toml(text: &str) -> Result<Limits, ConfigError> {
        Limits::builder().from_toml(text)
    }

    /// A builder, to choose the store or the clock.
    pub fn builder() -> LimitsBuilder<MemoryStore> {
        LimitsBuilder {
            store: MemoryStore::new(),
            clock: None,
        }
    }
}

/// What the layer does with one request.
pub(crate) enum Plan<F> {
    /// No rule, or an unlimited one: pass through without headers.
    Pass,
    /// The store is deciding; the rule (by index into the rule set) shapes the response.
    /// For `count_status` rules the decision is a peek, and `charge` says what to take
    /// once the response shows whether it counts.
    Check {
        index: usize,
        decision: F,
        charge: Option<Charge>,
    },
}

/// What a `count_status` request will be charged, if its response counts.
#[derive(Debug)]
pub(crate) struct Charge {
    pub(crate) client: Client<'static>,
    pub(crate) cost: u64,
}

/// A request's own cost, overriding its rule's `cost`: insert it into the request's
/// extensions before the layer (for example from `Content-Length`, to limit bytes rather
/// than requests).
///
/// ```
/// use tollgate::{Limits, RequestCost, key::PeerAddr};
///
/// let limits = Limits::from_toml("[limits]\nupload = \"100/min\"\n")?;
/// let mut request = http::Request::post("/upload").body(())?;
/// request.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse()?));
/// request.extensions_mut().insert(RequestCost(60));
/// let first = limits.check_request(&request).unwrap().into_inner()?;
/// assert_eq!(first.remaining(), 40);
/// assert!(!limits.check_request(&request).unwrap().into_inner()?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestCost(pub u64);

impl<St> Limits<St> {
    pub(crate) fn shared(&self) -> &Shared<St> {
        &self.shared
    }

    pub(crate) fn shared_arc(&self) -> &Arc<Shared<St>> {
        &self.shared
    }

    pub(crate) fn from_weak(weak: &std::sync::Weak<Shared<St>>) -> Option<Limits<St>> {
        weak.upgrade().map(|shared| Limits { shared })
    }
}

impl<St: Store> Limits<St> {
    /// The active rule set (a snapshot: it stays consistent while you hold it).
    pub fn rules(&self) -> arc_swap::Guard<Arc<RuleSet>> {
        self.shared.rules.load()
    }

    /// The bucket store.
    pub fn store(&self) -> &St {
        &self.shared.store
    }

    /// Writes the buckets to `[store] snapshot` now (the gateway does on graceful shutdown);
    /// returns how many were written, 0 when no snapshot is configured.
    pub fn save_snapshot(&self) -> Result<usize, crate::store::SnapshotError> {
        let rules = self.rules();
        self.shared.store.save_snapshot(&rules, self.now())
    }

    /// The current time on this limiter's clock.
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Takes `cost` tokens for `key` (`route/client`, e.g. `api/search/203.0.113.7`) now.
    pub async fn check(&self, key: &str, cost: u64) -> Result<Decision, StoreError> {
        self.check_at(key, cost, self.now()).await
    }

    /// Takes `cost` tokens for `key` as of `at` — for replaying recorded events.
    pub async fn check_at(
        &self,
        key: &str,
        cost: u64,
        at: Timestamp,
    ) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Consume, Some(cost), at)
            .await
    }

    /// Reports the state of `key`'s bucket without taking anything.
    pub async fn peek(&self, key: &str) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Peek, None, self.now())
            .await
    }

    /// Decides `request` exactly as the layer would — key, rule, bucket — and takes its
    /// tokens, without calling any service. `None` when no rule limits it.
    ///
    /// For middleware outside tower. With the in-memory store the future is ready at once.
    ///
    /// ```
    /// use tollgate::{Limits, key::PeerAddr};
    ///
    /// let limits = Limits::from_toml("[limits]\nlogin = \"1/min\"\n")?;
    /// let mut request = http::Request::get("/login").body(())?;
    /// request.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse()?));
    /// let decision = limits.check_request(&request).map(|check| check.into_inner());
    /// assert!(decision.unwrap()?.allowed());
    /// assert!(limits.check_request(&http::Request::get("/other").body(())?).is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_request<B>(&self, request: &Request<B>) -> Option<St::Future> {
        match self.plan(&self.rules(), request) {
            Plan::Pass => None,
            Plan::Check { decision, .. } => Some(decision),
        }
    }

    /// Takes a `count_status` request's tokens now that its response counts.
    pub(crate) fn charge(&self, rule: &Rule, charge: &Charge) -> Option<St::Future> {
        let now = self.shared.clock.now();
        self.start_check(
            rule,
            &charge.client,
            CheckMode::Charge,
            Some(charge.cost),
            now,
        )
    }

    async fn key_decision(
        &self,
        key: &str,
        mode: CheckMode,
        cost: Option<u64>,
        at: Timestamp,
    ) -> Result<Decision, StoreError> {
        let (route, client) = key.rsplit_once('/').unwrap_or(("", key));
        let client = Client::from_segment(client);
        let future = {
            let rules = self.rules();
            let route = normalize_route(route, rules.route_settings());
            let found = rules.resolve_with(&route, || client.to_string().into());
            match found.and_then(|index| rules.rule(index)) {
                Some(rule) => match self.start_check(rule, &client, mode, cost, at) {
                    Some(future) => (future, rule.name_arc()),
                    None => return Ok(Decision::unlimited().with_rule(rule.name_arc())),
                },
                None => return Ok(Decision::unlimited()),
            }
        };
        let (future, rule) = future;
        future.await.map(|decision| decision.with_rule(rule))
    }

    /// Resolves `request` against `rules` and starts its check: the whole per-request
    /// decision, reading the clock once.
    pub(crate) fn plan<B>(&self, rules: &RuleSet, request: &Request<B>) -> Plan<St::Future> {
        let route = normalize_route(request.uri().path(), rules.route_settings());
        let client = Client::identify(request, rules.client_settings());
        let mut buffer = SegmentBuffer::default();
        let found = rules.resolve_with(&route, || client.segment(&mut buffer).into());
        let Some((index, rule)) = found.and_then(|index| Some((index, rules.rule(index)?))) else {
            return Plan::Pass;
        };
        let cost = request.extensions().get::<RequestCost>().map(|cost| cost.0);
        let now = self.shared.clock.now();
        let counts_status = matches!(
            rule.limit(),
            Limit::Limited {
                count_status: Some(_),
                ..
            }
        );
        let mode = if counts_status {
            CheckMode::Peek
        } else {
            CheckMode::Consume
        };
        let Some(decision) = self.start_check(rule, &client, mode, cost, now) else {
            return Plan::Pass;
        };
        let charge = counts_status.then(|| Charge {
            cost: cost.unwrap_or_else(|| rule.cost()),
            client: client.into_owned(),
        });
        Plan::Check {
            index,
            decision,
            charge,
        }
    }

    /// Starts the store's check for `rule` (`None` for unlimited rules), at the rule's own
    /// cost unless `cost` says otherwise.
    fn start_check(
        &self,
        rule: &Rule,
        client: &Client<'_>,
        mode: CheckMode,
        cost: Option<u64>,
        now: Timestamp,
    ) -> Option<St::Future> {
        let Limit::Limited {
            quotas,
            cost: rule_cost,
            per,
            algorithm,
            strict,
            ..
        } = rule.limit()
        else {
            return None;
        };
        let cost = cost.unwrap_or(*rule_cost);
        let client = match per {
            Per::Client => Some(client),
            Per::Global => None,
        };
        Some(self.shared.store.check(CheckRequest {
            bucket: BucketRef {
                rule: rule.id(),
                client,
            },
            quotas,
            cost,
            now,
            mode,
            algorithm: *algorithm,
            strict: *strict,
        }))
    }
}
