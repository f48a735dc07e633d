//! Live configuration: re-read the files, validate, swap atomically (SPEC §5).
//!
//! A reload reads every file again. If their contents are what is already applied, nothing
//! happens. Otherwise they are parsed, validated and compiled into a new rule set, which
//! replaces the old one in one atomic swap: requests in flight finish on the set they
//! started with, new ones see the new set, nothing is ever half-applied. If anything fails
//! — a missing or unreadable file, bad TOML, a validation error — the old set keeps serving,
//! its generation unchanged, and the error is logged, counted
//! (`tollgate_config_reload_failures_total`) and kept in [`ReloadStatus`] until a good
//! save replaces it.
//!
//! Budgets survive: a rule that still exists keeps its buckets, exact if its numbers did not
//! change and with its clients' consumption carried over if they did; a removed rule's
//! buckets are dropped, and a rule restored later starts fresh.
//!
//! [`Limits::watch`] re-reads on change: it watches the files' **directories** (so editors
//! that save by renaming a new file into place, files deleted and re-created, and
//! Kubernetes ConfigMaps that swap a `..data` symlink are all seen), waits for a burst of
//! events to settle ([`DEBOUNCE`]), then reloads. The watcher stops when the last clone of
//! the `Limits` is dropped.
//!
//! [`Limits`]: crate::Limits
//! [`Limits::watch`]: crate::Limits::watch
//!
//! ```
//! use tollgate::{Limits, reload::Reloaded};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let file = dir.path().join("limits.toml");
//! std::fs::write(&file, "[limits]\n\"/\" = \"10/s\"\n")?;
//! let limits = Limits::load([&file])?;
//! assert_eq!(limits.status().generation, 1);
//!
//! std::fs::write(&file, "[limits]\n\"/\" = \"20/s\"\n")?;
//! assert_eq!(limits.reload()?, Reloaded::Applied { generation: 2 });
//!
//! std::fs::write(&file, "[limits]\n\"/\" = \"twenty\"\n")?;
//! assert!(limits.reload().is_err());
//! let status = limits.status();
//! assert_eq!(status.generation, 2);
//! assert!(status.last_error.unwrap().contains("expected a rate"));
//! # Ok(()) }
//! ```

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use notify_debouncer_mini::notify::{self, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use parking_lot::Mutex;

use crate::config::source::ConfigSource;
use crate::config::{ConfigError, RuleSet};
use crate::store::Store;

/// How long the watcher waits for file events to stop before re-reading.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// The watcher that runs while a watched `Limits` lives.
type FileWatcher = Debouncer<notify::RecommendedWatcher>;

/// What a reload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The files changed and the new rules are active under this generation.
    Applied {
        /// The new generation.
        generation: u64,
    },
    /// The files hold what is already applied; nothing changed.
    Unchanged,
}

/// The state of the configuration, for logs, the admin `/config` page and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadStatus {
    /// Counts applied rule sets: 1 after the initial load, +1 per applied reload.
    pub generation: u64,
    /// When the active rule set was applied.
    pub loaded_at: SystemTime,
    /// The files, in layering order.
    pub files: Vec<PathBuf>,
    /// Why the last reload failed, until a later one succeeds.
    pub last_error: Option<String>,
    /// When that failure happened.
    pub last_error_at: Option<SystemTime>,
    /// Failed reloads since start.
    pub failures: u64,
}

impl ReloadStatus {
    pub(crate) fn new(files: Vec<PathBuf>) -> ReloadStatus {
        ReloadStatus {
            generation: 1,
            loaded_at: SystemTime::now(),
            files,
            last_error: None,
            last_error_at: None,
            failures: 0,
        }
    }
}

/// The reload engine of one limiter: where its config comes from, what is applied, and the
/// status it reports. It swaps rule sets into the limiter's `ArcSwap` and tells its store;
/// it knows nothing else of the limiter ([`Limits`](crate::Limits) holds one and delegates
/// to it).
pub(crate) struct Reloader {
    /// Serialises reloads and remembers what is applied.
    state: Mutex<Applied>,
    status: tokio::sync::watch::Sender<ReloadStatus>,
    /// The file watcher, if watching; stopped when the reloader is dropped.
    watcher: Mutex<Option<FileWatcher>>,
}

/// What the reloader remembers between reloads.
struct Applied {
    sources: Vec<ConfigSource>,
    /// The texts of the applied sources, to tell a real change from a touch.
    texts: Vec<String>,
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The initial load failed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file watcher could not be started.
    #[error("cannot start the config watcher: {0}")]
    Start(#[source] notify::Error),
    /// A directory could not be watched.
    #[error("cannot watch {}: {source}", path.display())]
    Watch {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: notify::Error,
    },
}

impl Reloader {
    /// A reloader for `sources`, whose texts `applied` are what the active rules were
    /// compiled from (no sources: config given inline, which cannot be reloaded).
    pub(crate) fn new(sources: Vec<ConfigSource>, applied: Vec<String>) -> Reloader {
        let files = sources.iter().map(|s| s.name().to_path_buf()).collect();
        let (status, _) = tokio::sync::watch::channel(ReloadStatus::new(files));
        Reloader {
            state: Mutex::new(Applied {
                sources,
                texts: applied,
            }),
            status,
            watcher: Mutex::new(None),
        }
    }

    /// Re-reads the sources and, if they changed and compile, swaps the new rules into
    /// `rules` and tells `store`; see the module docs.
    pub(crate) fn reload<St: Store>(
        &self,
        rules: &ArcSwap<RuleSet>,
        store: &St,
    ) -> Result<Reloaded, ConfigError> {
        let mut state = self.state.lock();
        if state.sources.is_empty() {
            return Err(ConfigError::NoFiles);
        }
        let outcome = ConfigSource::read_all(&state.sources).and_then(|sources| {
            if sources
                .iter()
                .map(|s| s.text.as_str())
                .eq(state.texts.iter().map(String::as_str))
            {
                return Ok(None);
            }
            let current = rules.load_full();
            let next = RuleSet::compile(&sources, Some(&current)).map_err(ConfigError::Invalid)?;
            Ok(Some((current, next, sources)))
        });
        match outcome {
            Ok(None) => {
                // Back to what is applied: whatever failed since is no longer on disk.
                self.status
                    .send_if_modified(|status| status.last_error.take().is_some());
                Ok(Reloaded::Unchanged)
            }
            Ok(Some((current, next, sources))) => {
                let retired = next.retired_since(&current);
                let generation = next.generation();
                store.configure(&next);
                rules.store(Arc::new(next));
                store.forget(&retired);
                state.texts = sources.into_iter().map(|s| s.text).collect();
                self.status.send_modify(|status| {
                    status.generation = generation;
                    status.loaded_at = SystemTime::now();
                    status.last_error = None;
                });
                metrics::counter!("tollgate_config_reloads_total").increment(1);
                metrics::gauge!("tollgate_config_generation").set(generation as f64);
                tracing::info!(generation, retired_rules = retired.len(), "limits reloaded");
                Ok(Reloaded::Applied { generation })
            }
            Err(error) => {
                let mut generation = 0;
                self.status.send_modify(|status| {
                    status.last_error = Some(error.to_string());
                    status.last_error_at = Some(SystemTime::now());
                    status.failures += 1;
                    generation = status.generation;
                });
                metrics::counter!("tollgate_config_reload_failures_total").increment(1);
                tracing::warn!(
                    generation,
                    "limits reload failed, previous rules keep serving:\n{error}"
                );
                Err(error)
            }
        }
    }

    /// The status as last reported, with `generation` as the active rules' own.
    pub(crate) fn status(&self, generation: u64) -> ReloadStatus {
        let mut status = self.status.borrow().clone();
        status.generation = generation;
        status
    }

    /// A receiver that sees every change of the status.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<ReloadStatus> {
        self.status.subscribe()
    }

    /// Starts watching the sources' directories; `changed` runs (on the watcher's thread)
    /// after each settled burst of events that concern them. The watcher lives as long as
    /// this reloader.
    pub(crate) fn watch(&self, changed: impl Fn() + Send + 'static) -> Result<(), WatchError> {
        let mut directories = BTreeSet::new();
        let mut names = HashSet::new();
        for source in &self.state.lock().sources {
            let ConfigSource::File(path) = source;
            let directory = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            directories.insert(directory.to_path_buf());
            if let Some(name) = path.file_name() {
                names.insert(name.to_os_string());
            }
        }
        let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| {
            match result {
                // Errors are logged and recorded by the reload itself.
                Ok(events) if events.iter().any(|e| concerns(&e.path, &names)) => changed(),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "config file watcher error"),
            }
        })
        .map_err(WatchError::Start)?;
        for directory in directories {
            debouncer
                .watcher()
                .watch(&directory, RecursiveMode::NonRecursive)
                .map_err(|source| WatchError::Watch {
                    path: directory.clone(),
                    source,
                })?;
        }
        *self.watcher.lock() = Some(debouncer);
        Ok(())
    }
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("sources", &self.state.lock().sources)
            .field("watching", &self.watcher.lock().is_some())
            .finish()
    }
}

/// Whether an event on `path` may have changed one of the files: the file itself, or a
/// Kubernetes ConfigMap's `..data` link and timestamped directories.
fn concerns(path: &Path, names: &HashSet<OsString>) -> bool {
    path.file_name()
        .is_some_and(|name| names.contains(name) || name.to_string_lossy().starts_with(".."))
}
