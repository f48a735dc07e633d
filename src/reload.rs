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

use notify_debouncer_mini::notify::{self, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};

use crate::config::rules::read_sources;
use crate::config::{ConfigError, RuleSet};
use crate::limits::Limits;
use crate::store::Store;

/// How long the watcher waits for file events to stop before re-reading.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// The watcher that runs while a watched `Limits` lives.
pub(crate) type FileWatcher = Debouncer<notify::RecommendedWatcher>;

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

/// What the reloader remembers between reloads.
#[derive(Debug, Default)]
pub(crate) struct ReloadState {
    pub(crate) paths: Vec<PathBuf>,
    /// The texts of the applied files, to tell a real change from a touch.
    pub(crate) applied: Vec<String>,
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

impl<St: Store> Limits<St> {
    /// Re-reads the files now (the gateway binds this to SIGHUP).
    ///
    /// Returns what happened, or why the files were refused — in which case the previous
    /// rules keep serving and [`status`](Self::status) reports the error.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let shared = self.shared();
        let mut state = shared.reload.lock();
        if state.paths.is_empty() {
            return Err(ConfigError::NoFiles);
        }
        let outcome = read_sources(&state.paths).and_then(|sources| {
            if sources
                .iter()
                .map(|s| s.text.as_str())
                .eq(state.applied.iter().map(String::as_str))
            {
                return Ok(None);
            }
            let current = shared.rules.load_full();
            let next = RuleSet::compile(&sources, Some(&current)).map_err(ConfigError::Invalid)?;
            Ok(Some((current, next, sources)))
        });
        match outcome {
            Ok(None) => {
                // Back to what is applied: whatever failed since is no longer on disk.
                shared
                    .status
                    .send_if_modified(|status| status.last_error.take().is_some());
                Ok(Reloaded::Unchanged)
            }
            Ok(Some((current, next, sources))) => {
                let retired = next.retired_since(&current);
                let generation = next.generation();
                shared.store.configure(&next);
                shared.rules.store(Arc::new(next));
                shared.store.forget(&retired);
                state.applied = sources.into_iter().map(|s| s.text).collect();
                shared.status.send_modify(|status| {
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
                shared.status.send_modify(|status| {
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

    /// The configuration's current state. Its generation is the active rule set's own, so
    /// it never lags behind the rules requests see.
    pub fn status(&self) -> ReloadStatus {
        let mut status = self.shared().status.borrow().clone();
        status.generation = self.shared().rules.load().generation();
        status
    }

    /// A receiver that sees every change of [`status`](Self::status): each applied reload and
    /// each failure.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<ReloadStatus> {
        self.shared().status.subscribe()
    }

    /// Starts watching the files this limiter was loaded from.
    pub(crate) fn start_watching(&self) -> Result<(), WatchError> {
        let shared = self.shared();
        let paths = shared.reload.lock().paths.clone();
        let mut directories = BTreeSet::new();
        let mut names = HashSet::new();
        for path in &paths {
            let directory = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            directories.insert(directory.to_path_buf());
            if let Some(name) = path.file_name() {
                names.insert(name.to_os_string());
            }
        }
        let weak = Arc::downgrade(self.shared_arc());
        let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| {
            // The limiter is gone: nothing to reload (the watcher is being dropped too).
            let Some(limits) = Limits::from_weak(&weak) else {
                return;
            };
            match result {
                Ok(events) if events.iter().any(|e| concerns(&e.path, &names)) => {
                    // Errors were logged and recorded by `reload` itself.
                    let _ = limits.reload();
                }
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
        *shared.watcher.lock() = Some(debouncer);
        Ok(())
    }
}

/// Whether an event on `path` may have changed one of the files: the file itself, or a
/// Kubernetes ConfigMap's `..data` link and timestamped directories.
fn concerns(path: &Path, names: &HashSet<OsString>) -> bool {
    path.file_name()
        .is_some_and(|name| names.contains(name) || name.to_string_lossy().starts_with(".."))
}
