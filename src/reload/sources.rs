//! What a reloader holds of its sources: each source and the text last read from it
//! (`Tracked`), the reload's state (`State`: what is applied, what was refused), texts told
//! apart by fingerprint, and what the state says about the sources — which are files to
//! watch, which changed, when to poll, what to keep in the cache.

use std::path::PathBuf;
use std::time::Duration;

use super::poll;
use crate::config::ReloadSettings;
use crate::config::source::{Cache, ConfigSource, SourceText, Validator};

pub(super) struct State {
    pub(super) sources: Vec<Tracked>,
    /// The texts the active rules were compiled from; `None` before the first apply.
    pub(super) applied: Option<Vec<Fingerprint>>,
    /// Each source's text as applied (parallel to `sources`): what the reload history
    /// compares to name the sources a reload changed.
    pub(super) applied_each: Vec<Option<Fingerprint>>,
    /// The texts last refused: not compiled, nor reported, again until they change or a
    /// reload is forced.
    pub(super) refused: Option<Vec<Fingerprint>>,
    /// The last reload failure reported, so that the same one is not reported twice.
    pub(super) reported: Option<String>,
    /// The active rules' `[reload]` table (read from local files).
    pub(super) settings: ReloadSettings,
}

/// One source and what was last read from it.
pub(super) struct Tracked {
    pub(super) source: ConfigSource,
    /// The last text read or fetched successfully.
    pub(super) text: Option<String>,
    pub(super) validator: Option<Validator>,
    /// Whether `text` is in the cache already (URLs only).
    pub(super) cached: bool,
    /// Fetches failed in a row (URLs only), for backoff.
    pub(super) failing: u32,
    /// A `[plans] members` table, named by the rules rather than given to the limiter.
    pub(super) members: bool,
}

impl Tracked {
    pub(super) fn new(source: ConfigSource, members: bool) -> Tracked {
        Tracked {
            source,
            text: None,
            validator: None,
            cached: false,
            failing: 0,
            members,
        }
    }

    pub(super) fn source_text(&self) -> Option<SourceText> {
        self.text.as_ref().map(|text| {
            let mut read = SourceText::of(&self.source, text.clone());
            read.members = self.members;
            read
        })
    }
}

/// What tells one text from another without keeping a copy (a membership table may hold
/// tens of megabytes): its length and a 64-bit hash of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fingerprint(usize, u64);

impl Fingerprint {
    pub(super) fn of(text: &str) -> Fingerprint {
        use std::hash::BuildHasher as _;
        Fingerprint(
            text.len(),
            foldhash::quality::FixedState::default().hash_one(text),
        )
    }
}

/// The fingerprints of the texts read, in order (sources not read are left out).
pub(super) fn fingerprints(state: &State) -> Vec<Fingerprint> {
    state
        .sources
        .iter()
        .filter_map(|t| t.text.as_deref().map(Fingerprint::of))
        .collect()
}

/// Each source's fingerprint, `None` where it has not been read.
pub(super) fn each_fingerprint(state: &State) -> Vec<Option<Fingerprint>> {
    state
        .sources
        .iter()
        .map(|t| t.text.as_deref().map(Fingerprint::of))
        .collect()
}

/// The local files among the sources.
pub(super) fn watched_files(state: &State) -> Vec<PathBuf> {
    state
        .sources
        .iter()
        .filter_map(|t| match &t.source {
            ConfigSource::File(path) => Some(path.clone()),
            ConfigSource::Url(_) => None,
        })
        .collect()
}

pub(super) fn has_remote(state: &State) -> bool {
    state.sources.iter().any(|t| t.source.is_remote())
}

/// How long until the next poll: the interval, backed off after failures, jittered.
pub(super) fn next_poll(state: &State) -> Duration {
    let failing = state.sources.iter().map(|t| t.failing).max().unwrap_or(0);
    poll::next_wait(state.settings.poll_interval, failing, poll::random())
}

/// The sources whose text differs from what is applied (a read that failed counts: its
/// error is what the reload is about).
pub(super) fn changed_sources(state: &State) -> Vec<PathBuf> {
    state
        .sources
        .iter()
        .enumerate()
        .filter(|(index, tracked)| {
            state.applied_each.get(*index) != Some(&tracked.text.as_deref().map(Fingerprint::of))
                || tracked.text.is_none()
        })
        .map(|(_, tracked)| tracked.source.name().to_path_buf())
        .collect()
}

/// Keeps the applied copy of every remote document in `[reload] cache_dir`, if set.
pub(super) fn write_cache(state: &mut State) {
    let Some(cache) = state.settings.cache_dir.as_ref().map(Cache::new) else {
        return;
    };
    for tracked in &mut state.sources {
        let (ConfigSource::Url(url), Some(text), false) =
            (&tracked.source, &tracked.text, tracked.cached)
        else {
            continue;
        };
        match cache.write(url, text) {
            Ok(()) => tracked.cached = true,
            Err(error) => tracing::warn!(
                url = url.as_str(),
                dir = %cache.dir().display(),
                %error,
                "cannot keep the last good copy of a remote config"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A state over `names` (files, or URLs), with `texts` read (`None`: not read).
    fn state(names: &[&str], texts: &[Option<&str>]) -> State {
        let sources = names
            .iter()
            .zip(texts)
            .map(|(name, text)| {
                let mut tracked =
                    Tracked::new(ConfigSource::parse(Path::new(name)).unwrap(), false);
                tracked.text = text.map(str::to_owned);
                tracked
            })
            .collect();
        State {
            sources,
            applied: None,
            applied_each: Vec::new(),
            refused: None,
            reported: None,
            settings: ReloadSettings::default(),
        }
    }

    #[test]
    fn a_changed_or_unread_source_is_named_and_an_unchanged_one_is_not() {
        let mut state = state(
            &[
                "base.toml",
                "team.toml",
                "https://config.example/limits.toml",
            ],
            &[Some("a = 1"), Some("b = 2"), Some("c = 3")],
        );
        state.applied_each = each_fingerprint(&state);
        assert!(changed_sources(&state).is_empty(), "nothing changed");
        state.sources[1].text = Some("b = 3".into());
        state.sources[2].text = None;
        assert_eq!(
            changed_sources(&state),
            [
                PathBuf::from("team.toml"),
                PathBuf::from("https://config.example/limits.toml")
            ]
        );
        // Same length, other text: still told apart.
        assert_ne!(Fingerprint::of("b = 2"), Fingerprint::of("b = 3"));
        assert_eq!(
            fingerprints(&state).len(),
            2,
            "the unread source is left out"
        );
    }

    #[test]
    fn only_files_are_watched_and_urls_are_polled() {
        let local = state(&["base.toml"], &[None]);
        assert_eq!(watched_files(&local), [PathBuf::from("base.toml")]);
        assert!(!has_remote(&local));
        let mixed = state(
            &["base.toml", "http://config.example/a.toml"],
            &[None, None],
        );
        assert_eq!(watched_files(&mixed), [PathBuf::from("base.toml")]);
        assert!(has_remote(&mixed));
        assert!(next_poll(&mixed) > Duration::ZERO);
    }

    #[test]
    fn a_members_table_reads_as_one() {
        let mut tracked = Tracked::new(ConfigSource::File("members.csv".into()), true);
        assert!(tracked.source_text().is_none(), "not read yet");
        tracked.text = Some("alice,pro\n".into());
        assert!(tracked.source_text().is_some_and(|text| text.members));
    }
}
