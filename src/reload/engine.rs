//! The reload engine of one limiter: its sources and what was last read from each, what is
//! applied, what was refused, and the status it reports. It swaps rule sets into the
//! limiter's `ArcSwap` and tells its store; it knows nothing else of the limiter
//! ([`Limits`](crate::Limits) holds one and delegates to it).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::poll::Poller;
use super::sources::{
    State, Tracked, changed_sources, each_fingerprint, fingerprints, has_remote, next_poll,
    watched_files, write_cache,
};
use super::watch::FileWatcher;
use super::{ReloadEvent, ReloadStatus, Reloaded, WatchError};
use crate::config::MAX_MEMBERS_BYTES;
use crate::config::extension::Extensions;
use crate::config::source::{
    Cache, ConfigSource, Fetched, Fetcher, RemoteUrl, SourceText, read_file, read_file_up_to,
};
use crate::config::{ConfigError, ReloadSettings, RuleId, RuleSet, Validator};

/// What asks for a reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The file watcher saw a change: re-read the files.
    Files,
    /// A poll is due: re-fetch the URLs.
    Poll,
    /// Someone asked (SIGHUP, [`Limits::reload`](crate::Limits::reload)): re-read and
    /// re-fetch everything, and report even what was reported before.
    Forced,
}

impl Trigger {
    /// How the reload history names it.
    fn label(self) -> &'static str {
        match self {
            Trigger::Files => "file",
            Trigger::Poll => "poll",
            Trigger::Forced => "forced",
        }
    }
}

/// Where a reloader puts what it compiles: the limiter's side of a reload.
pub(crate) trait Target {
    /// The rules in force.
    fn current(&self) -> Arc<RuleSet>;
    /// Puts `next` in force; `retired` are the ids of rules it no longer has.
    fn install(&self, next: RuleSet, retired: &[RuleId]);
}

pub(crate) struct Reloader {
    /// Serialises reloads.
    state: Mutex<State>,
    pub(super) status: tokio::sync::watch::Sender<ReloadStatus>,
    /// The HTTP client, made when the first URL is fetched.
    fetcher: std::sync::OnceLock<Fetcher>,
    /// The file watcher and the poller, if watching; they stop when this is dropped.
    background: Mutex<Background>,
    /// The embedding program's tables, checked on every compile.
    extensions: Extensions,
}

/// Held only to be dropped: each stops its thread when it goes.
#[derive(Default)]
struct Background {
    _files: Option<FileWatcher>,
    poller: Option<Poller>,
    /// What a change calls, kept to watch again when the membership sources change.
    changed: Option<Changed>,
}

/// What the watcher and the poller call: the reload, returning the wait until the next poll.
type Changed = Arc<dyn Fn(Trigger) -> Option<Duration> + Send + Sync>;

impl Reloader {
    /// A reloader for config given as text: nothing to re-read.
    pub(crate) fn inline() -> Reloader {
        Reloader::with(Vec::new(), ReloadSettings::default())
    }

    fn with(sources: Vec<Tracked>, settings: ReloadSettings) -> Reloader {
        let names: Vec<ConfigSource> = sources.iter().map(|t| t.source.clone()).collect();
        let (status, _) = tokio::sync::watch::channel(ReloadStatus::new(&names));
        Reloader {
            state: Mutex::new(State {
                sources,
                applied: None,
                applied_each: Vec::new(),
                refused: None,
                reported: None,
                settings,
            }),
            status,
            fetcher: std::sync::OnceLock::new(),
            background: Mutex::new(Background::default()),
            extensions: Extensions::default(),
        }
    }

    /// Reads every source for the first time — files first, since their `[reload]` table
    /// says how to fetch the URLs; a URL that cannot be fetched is read from the cache, and
    /// without a cached copy the start fails, naming it. Returns the texts to compile.
    pub(crate) fn open(
        sources: Vec<ConfigSource>,
    ) -> Result<(Reloader, Vec<SourceText>), ConfigError> {
        if sources.is_empty() {
            return Err(ConfigError::NoFiles);
        }
        register_counters(&sources);
        let tracked = sources
            .into_iter()
            .map(|source| Tracked::new(source, false))
            .collect();
        let reloader = Reloader::with(tracked, ReloadSettings::default());
        {
            let mut state = reloader.state.lock();
            for index in 0..state.sources.len() {
                if !state.sources[index].source.is_remote() {
                    reloader.read_file_into(&mut state.sources, index)?;
                }
            }
            let local: Vec<SourceText> = state
                .sources
                .iter()
                .filter_map(Tracked::source_text)
                .collect();
            state.settings = ReloadSettings::bootstrap(&local);
            for index in 0..state.sources.len() {
                if state.sources[index].source.is_remote() {
                    reloader.fetch_first(&mut state, index)?;
                }
            }
            reloader.sync_members(&mut state);
            reloader.read_unread_members(&mut state)?;
        }
        let texts = reloader
            .state
            .lock()
            .sources
            .iter()
            .filter_map(Tracked::source_text)
            .collect();
        Ok((reloader, texts))
    }

    /// Has every compile from now on run `extensions` too.
    pub(crate) fn with_extensions(mut self, extensions: Extensions) -> Reloader {
        self.extensions = extensions;
        self
    }

    /// Compiles `sources` into the rules to follow `previous`.
    pub(crate) fn compile(
        &self,
        sources: &[SourceText],
        previous: Option<&RuleSet>,
    ) -> Result<RuleSet, Vec<crate::config::Diagnostic>> {
        RuleSet::compile(sources, previous, &self.extensions)
    }

    /// Records that the texts `open` returned compiled into `rules`, which are now active.
    pub(crate) fn opened(&self, rules: &RuleSet) {
        let mut state = self.state.lock();
        state.applied = Some(fingerprints(&state));
        state.applied_each = each_fingerprint(&state);
        state.settings = rules.reload().clone();
        write_cache(&mut state);
    }

    /// Re-reads what `trigger` concerns and, if the texts changed and compile, puts the new
    /// rules in force through `target`; see the module docs.
    pub(crate) fn reload(
        &self,
        trigger: Trigger,
        target: &dyn Target,
    ) -> Result<Reloaded, ConfigError> {
        let forced = trigger == Trigger::Forced;
        // Fetched before the lock is taken: a repository that hangs must not hold up the
        // reload of a local file's save (a fetch may take up to its timeout).
        let fetched = if matches!(trigger, Trigger::Poll | Trigger::Forced) {
            self.fetch_remote()
        } else {
            Vec::new()
        };
        let mut state = self.state.lock();
        if state.sources.is_empty() {
            return Err(ConfigError::NoFiles);
        }
        for (index, result) in fetched {
            // A failure keeps the last good copy; the other sources still reload.
            let _ = self.record_fetch(&mut state, index, result, forced);
        }
        let mut unreadable = None;
        if matches!(trigger, Trigger::Files | Trigger::Forced) {
            for index in 0..state.sources.len() {
                if let Err(error) = self.read_file_into(&mut state.sources, index) {
                    unreadable.get_or_insert(error);
                }
            }
        }
        let rewatch = self.sync_members(&mut state);
        if let Err(error) = self.read_unread_members(&mut state) {
            unreadable.get_or_insert(error);
        }
        if rewatch {
            self.rewatch(&state);
        }
        if let Some(error) = unreadable {
            state.refused = None;
            return Err(self.refuse(&mut state, error, trigger));
        }
        let texts = fingerprints(&state);
        if state.applied.as_ref() == Some(&texts) {
            // Back to what is applied: whatever failed since is no longer there.
            state.refused = None;
            state.reported = None;
            self.status
                .send_if_modified(|status| status.last_error.take().is_some());
            return Ok(Reloaded::Unchanged);
        }
        if !forced && state.refused.as_ref() == Some(&texts) {
            return Ok(Reloaded::Unchanged);
        }
        let current = target.current();
        let sources: Vec<SourceText> = state
            .sources
            .iter()
            .filter_map(Tracked::source_text)
            .collect();
        let next = match self.compile(&sources, Some(&current)) {
            Ok(next) => next,
            Err(diagnostics) => {
                state.refused = Some(texts);
                return Err(self.refuse(&mut state, ConfigError::Invalid(diagnostics), trigger));
            }
        };
        let retired = next.retired_since(&current);
        let changes = next.changes_since(&current);
        let changed_sources = changed_sources(&state);
        let generation = next.generation();
        state.settings = next.reload().clone();
        target.install(next, &retired);
        state.applied = Some(texts);
        state.applied_each = each_fingerprint(&state);
        state.refused = None;
        state.reported = None;
        write_cache(&mut state);
        self.status.send_modify(|status| {
            let now = SystemTime::now();
            status.generation = generation;
            status.loaded_at = now;
            status.last_error = None;
            status.remember(ReloadEvent {
                at: now,
                trigger: trigger.label(),
                sources: changed_sources,
                generation,
                changes,
                error: None,
            });
        });
        metrics::counter!("tollgate_config_reloads_total").increment(1);
        metrics::gauge!("tollgate_config_generation").set(generation as f64);
        tracing::info!(generation, retired_rules = retired.len(), "limits reloaded");
        Ok(Reloaded::Applied { generation })
    }

    /// The status as last reported, with `generation` as the active rules' own.
    pub(crate) fn status(&self, generation: u64) -> ReloadStatus {
        let mut status = self.status.borrow().clone();
        // The rules are swapped in a moment before the status says so: an error recorded
        // under an older generation is one the apply in progress clears.
        if status.generation < generation {
            status.last_error = None;
        }
        status.generation = generation;
        status
    }

    /// A receiver that sees every change of the status.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<ReloadStatus> {
        self.status.subscribe()
    }

    /// Wakes the poller (if URLs are polled) to fetch now rather than at its next wake-up.
    pub(crate) fn poll_now(&self) {
        if let Some(poller) = &self.background.lock().poller {
            poller.poll_now();
        }
    }

    /// How long until the next poll: the interval, backed off after failures, jittered.
    pub(crate) fn next_poll(&self) -> Duration {
        next_poll(&self.state.lock())
    }

    /// Starts watching: the files' directories, and a poller if there are URLs. `changed`
    /// runs (on a background thread) for each settled change or due poll, and returns the
    /// wait until the next poll — `None` once the limiter is gone. Both stop when this
    /// reloader is dropped.
    pub(crate) fn watch(
        &self,
        changed: impl Fn(Trigger) -> Option<Duration> + Send + Sync + 'static,
    ) -> Result<(), WatchError> {
        let changed: Changed = Arc::new(changed);
        let (files, remote, poll) = {
            let state = self.state.lock();
            (watched_files(&state), has_remote(&state), next_poll(&state))
        };
        let mut background = self.background.lock();
        background.changed = Some(Arc::clone(&changed));
        if !files.is_empty() {
            let changed = Arc::clone(&changed);
            background._files = Some(FileWatcher::start(&files, move || {
                let _ = changed(Trigger::Files);
            })?);
        }
        if remote {
            background.poller = Some(Poller::start(poll, move || changed(Trigger::Poll)));
        }
        Ok(())
    }

    /// Watches again after the membership sources changed: the files they name now, and a
    /// poller if a URL is among them (if watching at all).
    fn rewatch(&self, state: &State) {
        let mut background = self.background.lock();
        let Some(changed) = background.changed.clone() else {
            return;
        };
        let files = watched_files(state);
        let callback = Arc::clone(&changed);
        match FileWatcher::start(&files, move || {
            let _ = callback(Trigger::Files);
        }) {
            Ok(watcher) => background._files = Some(watcher),
            Err(error) => tracing::warn!(%error, "cannot watch the new membership files"),
        }
        if has_remote(state) && background.poller.is_none() {
            background.poller = Some(Poller::start(next_poll(state), move || {
                changed(Trigger::Poll)
            }));
        }
    }

    /// Reads file source `index` into its `text`, counting the read.
    pub(super) fn read_file_into(
        &self,
        sources: &mut [Tracked],
        index: usize,
    ) -> Result<(), ConfigError> {
        let Some(ConfigSource::File(path)) = sources.get(index).map(|t| &t.source) else {
            return Ok(());
        };
        metrics::counter!("tollgate_config_reads_total", "kind" => "file").increment(1);
        let read = if sources[index].members {
            read_file_up_to(path, MAX_MEMBERS_BYTES)
        } else {
            read_file(path)
        };
        let tracked = &mut sources[index];
        self.status.send_modify(|status| {
            if let Some(source) = status.sources.get_mut(index) {
                source.reads += 1;
                match &read {
                    Ok((_, validator)) => {
                        source.last_read_at = Some(SystemTime::now());
                        source.validator = Some(validator.clone());
                        source.last_error = None;
                    }
                    Err(error) => {
                        source.last_error = Some(error.to_string());
                        source.last_error_at = Some(SystemTime::now());
                    }
                }
            }
        });
        let (text, validator) = read?;
        tracked.text = Some(text);
        tracked.validator = Some(validator);
        Ok(())
    }

    /// The first fetch of URL source `index`, falling back to the cache.
    pub(super) fn fetch_first(&self, state: &mut State, index: usize) -> Result<(), ConfigError> {
        let Some(ConfigSource::Url(url)) = state.sources.get(index).map(|t| &t.source) else {
            return Ok(());
        };
        metrics::counter!("tollgate_config_reads_total", "kind" => "url").increment(1);
        let fetched =
            self.fetcher
                .get_or_init(Fetcher::new)
                .fetch(url, None, &state.settings.headers);
        let Err(reason) = self.record_fetch(state, index, fetched, false) else {
            return Ok(());
        };
        let tracked = &mut state.sources[index];
        let ConfigSource::Url(url) = &tracked.source else {
            return Ok(());
        };
        let cache = state.settings.cache_dir.as_ref().map(Cache::new);
        let Some((text, written)) = cache.as_ref().and_then(|cache| cache.read(url)) else {
            return Err(ConfigError::Fetch {
                url: url.as_str().to_owned(),
                reason,
                cache: state.settings.cache_dir.clone(),
            });
        };
        let age = written.elapsed().unwrap_or_default().as_secs();
        tracing::warn!(
            url = url.as_str(),
            age_seconds = age,
            "repository unreachable at start-up; starting from the cached copy"
        );
        tracked.text = Some(text);
        tracked.cached = true;
        self.status.send_modify(|status| {
            if let Some(source) = status.sources.get_mut(index) {
                source.from_cache = true;
                if let Some(error) = &mut source.last_error {
                    error.push_str(&format!("; started from the copy cached {age} s before"));
                }
            }
        });
        Ok(())
    }

    /// Fetches every URL source (conditionally, once it has a validator), without holding
    /// the state's lock while the network answers.
    fn fetch_remote(&self) -> Vec<(usize, Result<Fetched, String>)> {
        let (wanted, headers) = {
            let state = self.state.lock();
            let wanted: Vec<(usize, RemoteUrl, Option<Validator>)> = state
                .sources
                .iter()
                .enumerate()
                .filter_map(|(index, tracked)| match &tracked.source {
                    ConfigSource::Url(url) => Some((index, url.clone(), tracked.validator.clone())),
                    ConfigSource::File(_) => None,
                })
                .collect();
            (wanted, state.settings.headers.clone())
        };
        let fetcher = self.fetcher.get_or_init(Fetcher::new);
        wanted
            .into_iter()
            .map(|(index, url, validator)| {
                metrics::counter!("tollgate_config_reads_total", "kind" => "url").increment(1);
                (index, fetcher.fetch(&url, validator.as_ref(), &headers))
            })
            .collect()
    }

    /// Takes in the result of fetching URL source `index`. A failure keeps the last good
    /// copy, is reported once per distinct error (every time if `forced`) and is returned.
    fn record_fetch(
        &self,
        state: &mut State,
        index: usize,
        fetched: Result<Fetched, String>,
        forced: bool,
    ) -> Result<(), String> {
        let Some(tracked) = state.sources.get_mut(index) else {
            return Ok(());
        };
        let ConfigSource::Url(url) = &tracked.source else {
            return Ok(());
        };
        let now = SystemTime::now();
        let reason = match fetched {
            Ok(fetched) => {
                tracked.failing = 0;
                if let Fetched::Document { text, validator } = fetched {
                    if tracked.text.as_ref() != Some(&text) {
                        tracked.text = Some(text);
                        tracked.cached = false;
                    }
                    tracked.validator = validator;
                }
                let validator = tracked.validator.clone();
                let mut recovered = false;
                self.status.send_modify(|status| {
                    if let Some(source) = status.sources.get_mut(index) {
                        source.reads += 1;
                        source.last_read_at = Some(now);
                        source.validator = validator;
                        source.from_cache = false;
                        recovered = source.last_error.take().is_some();
                    }
                });
                if recovered {
                    tracing::info!(url = url.as_str(), "remote config fetched again");
                }
                return Ok(());
            }
            Err(reason) => reason,
        };
        tracked.failing = tracked.failing.saturating_add(1);
        metrics::counter!("tollgate_config_fetch_errors_total").increment(1);
        let message = format!("cannot fetch {}: {reason}", url.as_str());
        let mut new = false;
        self.status.send_modify(|status| {
            let Some(source) = status.sources.get_mut(index) else {
                return;
            };
            source.reads += 1;
            new = forced || source.last_error.as_ref() != Some(&message);
            if new {
                source.last_error = Some(message.clone());
                source.last_error_at = Some(now);
                status.failures += 1;
            }
        });
        if new {
            metrics::counter!("tollgate_config_reload_failures_total").increment(1);
            tracing::warn!(
                failures_in_a_row = tracked.failing,
                "{message}; the last good copy keeps serving"
            );
        } else {
            tracing::debug!(failures_in_a_row = tracked.failing, "{message}");
        }
        Err(reason)
    }

    /// Reports a refused reload — unless it is the one reported last and nobody forced this
    /// one — and returns it.
    fn refuse(&self, state: &mut State, error: ConfigError, trigger: Trigger) -> ConfigError {
        let message = error.to_string();
        if trigger != Trigger::Forced && state.reported.as_ref() == Some(&message) {
            tracing::debug!("limits reload refused again, as already reported");
            return error;
        }
        state.reported = Some(message.clone());
        let sources = changed_sources(state);
        let mut generation = 0;
        self.status.send_modify(|status| {
            let now = SystemTime::now();
            status.last_error = Some(message.clone());
            status.last_error_at = Some(now);
            status.failures += 1;
            generation = status.generation;
            status.remember(ReloadEvent {
                at: now,
                trigger: trigger.label(),
                sources,
                generation,
                changes: Vec::new(),
                error: Some(message),
            });
        });
        metrics::counter!("tollgate_config_reload_failures_total").increment(1);
        tracing::warn!(
            generation,
            "limits reload failed, previous rules keep serving:\n{error}"
        );
        error
    }
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Reloader")
            .field(
                "sources",
                &state
                    .sources
                    .iter()
                    .map(|t| t.source.name())
                    .collect::<Vec<_>>(),
            )
            .field("watching", &{
                let background = self.background.lock();
                background._files.is_some() || background.poller.is_some()
            })
            .finish()
    }
}

/// The reload counters, made at 0 before the first reload, read or failure, so a dashboard's
/// `increase()` sees the first one (it cannot see a series' first sample); URL counters only
/// where a source is a URL.
fn register_counters(sources: &[ConfigSource]) {
    metrics::counter!("tollgate_config_reloads_total").increment(0);
    metrics::counter!("tollgate_config_reload_failures_total").increment(0);
    metrics::counter!("tollgate_config_reads_total", "kind" => "file").increment(0);
    if sources.iter().any(ConfigSource::is_remote) {
        metrics::counter!("tollgate_config_reads_total", "kind" => "url").increment(0);
        metrics::counter!("tollgate_config_fetch_errors_total").increment(0);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A limiter's side of a reload, and no more: the rules in force, and what was retired.
    struct Installed {
        rules: Mutex<Arc<RuleSet>>,
        installs: Mutex<u32>,
    }

    impl Target for Installed {
        fn current(&self) -> Arc<RuleSet> {
            Arc::clone(&self.rules.lock())
        }

        fn install(&self, next: RuleSet, _retired: &[RuleId]) {
            *self.rules.lock() = Arc::new(next);
            *self.installs.lock() += 1;
        }
    }

    /// A reloader over one file holding `text`, opened and applied as a limiter does.
    fn opened(text: &str) -> (tempfile::TempDir, PathBuf, Reloader, Installed) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limits.toml");
        std::fs::write(&path, text).unwrap();
        let (reloader, texts) = Reloader::open(vec![ConfigSource::File(path.clone())]).unwrap();
        let rules = reloader.compile(&texts, None).unwrap();
        reloader.opened(&rules);
        let target = Installed {
            rules: Mutex::new(Arc::new(rules)),
            installs: Mutex::new(0),
        };
        (dir, path, reloader, target)
    }

    #[test]
    fn a_changed_file_is_installed_and_an_unchanged_one_is_not() {
        let (_dir, path, reloader, target) = opened("[limits]\nlogin = \"5/min\"\n");
        assert!(matches!(
            reloader.reload(Trigger::Files, &target),
            Ok(Reloaded::Unchanged)
        ));
        assert_eq!(
            *target.installs.lock(),
            0,
            "the same text is not compiled again"
        );
        std::fs::write(&path, "[limits]\nlogin = \"20/min\"\n").unwrap();
        let Ok(Reloaded::Applied { generation }) = reloader.reload(Trigger::Files, &target) else {
            panic!("a changed file applies");
        };
        assert_eq!(*target.installs.lock(), 1);
        assert_eq!(target.current().generation(), generation);
        let login = target.current();
        let summary = login.get("login").map(|rule| rule.summary());
        assert!(
            summary.as_deref().is_some_and(|s| s.starts_with("20/1m")),
            "{summary:?}"
        );
        let status = reloader.status(generation);
        let last = status.history.front().expect("the reload is remembered");
        assert_eq!((last.trigger, last.generation), ("file", generation));
        assert_eq!(last.sources, [path]);
    }

    #[test]
    fn an_invalid_save_changes_nothing_and_is_not_compiled_again_until_forced() {
        let (_dir, path, reloader, target) = opened("[limits]\nlogin = \"5/min\"\n");
        let before = target.current().generation();
        std::fs::write(&path, "[limits]\nlogin = \"5/fortnight\"\n").unwrap();
        let refused = reloader.reload(Trigger::Files, &target);
        assert!(
            matches!(refused, Err(ConfigError::Invalid(_))),
            "{refused:?}"
        );
        assert_eq!(*target.installs.lock(), 0, "the old rules keep serving");
        assert_eq!(target.current().generation(), before);
        assert!(
            reloader.status(before).last_error.is_some(),
            "and it says why"
        );
        // The same refused text is not compiled (nor reported) again on the next event…
        assert!(matches!(
            reloader.reload(Trigger::Files, &target),
            Ok(Reloaded::Unchanged)
        ));
        // …unless someone asks.
        assert!(reloader.reload(Trigger::Forced, &target).is_err());
        // Put back as it was: nothing to apply, and the error is gone.
        std::fs::write(&path, "[limits]\nlogin = \"5/min\"\n").unwrap();
        assert!(matches!(
            reloader.reload(Trigger::Files, &target),
            Ok(Reloaded::Unchanged)
        ));
        assert!(reloader.status(before).last_error.is_none());
    }
}
