//! Live configuration: re-read the sources, validate, swap atomically.
//!
//! A reload reads the sources again. If their contents are what is already applied, nothing
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
//! # Files
//!
//! [`Limits::watch`] re-reads on change: it watches the files' **directories** (so editors
//! that save by renaming a new file into place, files deleted and re-created, and
//! Kubernetes ConfigMaps that swap a `..data` symlink are all seen), waits for a burst of
//! events to settle ([`DEBOUNCE`]), then re-reads. Only writes, creations, renames, removals
//! and metadata changes count: opening and reading a file (the reload's own read) does not,
//! so **one save is one reload, and an idle process reads nothing**
//! (`tollgate_config_reads_total` stays put). A save that is refused is reported once: the
//! same refused text is not compiled or reported again until it changes, or until
//! [`Limits::reload`] (SIGHUP in the gateway) asks.
//!
//! # URLs
//!
//! A source may be an `http://` or `https://` URL (feature `remote`, which the gateway
//! has), layered with files in the order given. Watched limiters poll each URL every
//! `[reload] poll_interval` (jittered ±20%, so a fleet does not poll in lock-step) with a
//! conditional request; a `304` costs nothing further. A fetch error, timeout, non-2xx
//! answer or over-size body keeps the last good copy serving, is reported once per
//! distinct error, and is retried with backoff (doubling, at most 5 minutes). With
//! `[reload] cache_dir`, the last good copy of each document is kept on disk, so a process
//! can start while the repository is down; without a copy, start-up fails naming the URL.
//! Every source's state — last good read, validator, last error, reads — is in
//! [`ReloadStatus::sources`].
//!
//! [`Limits`]: crate::Limits
//! [`Limits::watch`]: crate::Limits::watch
//! [`Limits::reload`]: crate::Limits::reload
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
//! assert_eq!(status.sources[0].reads, 3);
//! # Ok(()) }
//! ```

mod engine;
mod members;
mod poll;
mod sources;
mod watch;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub(crate) use engine::{Reloader, Target, Trigger};

use crate::config::Validator;
use crate::config::source::ConfigSource;
use crate::config::{ConfigError, RuleChange};

/// How long the watcher waits for file events to stop before re-reading.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

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
    /// The sources' names (paths and URLs), in layering order.
    pub files: Vec<PathBuf>,
    /// Why the last reload failed, until a later one succeeds.
    pub last_error: Option<String>,
    /// When that failure happened.
    pub last_error_at: Option<SystemTime>,
    /// Failures reported since start: refused reloads, and distinct fetch errors.
    pub failures: u64,
    /// Each source, in layering order.
    pub sources: Vec<SourceStatus>,
    /// The last [`ReloadStatus::HISTORY`] reloads applied or refused, oldest first.
    pub history: std::collections::VecDeque<ReloadEvent>,
}

/// One reload in [`ReloadStatus::history`]: when, why, and what it changed or why it was
/// refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadEvent {
    /// When it happened.
    pub at: SystemTime,
    /// What asked for it: `"file"` (a watched file changed), `"poll"` (a URL's poll) or
    /// `"forced"` (SIGHUP, [`Limits::reload`](crate::Limits::reload)).
    pub trigger: &'static str,
    /// The sources (paths and URLs) whose text it found changed.
    pub sources: Vec<PathBuf>,
    /// The generation active afterwards (the new one if applied).
    pub generation: u64,
    /// The rules it added, removed or changed (empty when refused, or when only settings
    /// outside the rules changed).
    pub changes: Vec<RuleChange>,
    /// Why it was refused; `None`: applied.
    pub error: Option<String>,
}

/// The state of one config source: a file or a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceStatus {
    /// The path or URL.
    pub name: PathBuf,
    /// Fetched over HTTP rather than read from disk.
    pub remote: bool,
    /// When it was last read or fetched successfully (a `304` counts).
    pub last_read_at: Option<SystemTime>,
    /// What tells this version from the next: an ETag or Last-Modified, or a file's
    /// modification time.
    pub validator: Option<Validator>,
    /// Why the last read or fetch failed, until one succeeds.
    pub last_error: Option<String>,
    /// When that failure happened.
    pub last_error_at: Option<SystemTime>,
    /// Reads and fetches attempted since start.
    pub reads: u64,
    /// The text in use came from `[reload] cache_dir`, not from the repository.
    pub from_cache: bool,
}

impl ReloadStatus {
    /// Reloads kept in [`ReloadStatus::history`].
    pub const HISTORY: usize = 32;

    /// Adds `event` to the history, dropping the oldest past [`ReloadStatus::HISTORY`].
    pub(crate) fn remember(&mut self, event: ReloadEvent) {
        if self.history.len() >= ReloadStatus::HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(event);
    }

    pub(crate) fn new(sources: &[ConfigSource]) -> ReloadStatus {
        ReloadStatus {
            generation: 1,
            loaded_at: SystemTime::now(),
            files: sources.iter().map(|s| s.name().to_path_buf()).collect(),
            last_error: None,
            last_error_at: None,
            failures: 0,
            sources: sources.iter().map(SourceStatus::new).collect(),
            history: std::collections::VecDeque::new(),
        }
    }
}

impl SourceStatus {
    /// The status of `source`, not read yet.
    pub(crate) fn new(source: &ConfigSource) -> SourceStatus {
        SourceStatus {
            name: source.name().to_path_buf(),
            remote: source.is_remote(),
            last_read_at: None,
            validator: None,
            last_error: None,
            last_error_at: None,
            reads: 0,
            from_cache: false,
        }
    }
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
