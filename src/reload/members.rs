//! The membership sources a reloader follows (`[plans] members`, `[identity.api_keys]
//! members`): named by the rules rather than given to the limiter, so they are kept in step
//! with the rules' text and read when first named.

use super::engine::Reloader;
use super::sources::{State, Tracked};
use crate::config::ConfigError;
use crate::config::source::{ConfigSource, SourceText};

impl Reloader {
    /// Brings the tracked membership sources in line with what the rules' `[plans] members`
    /// name now (kept in order, after the rule sources; those already tracked keep their
    /// text). Whether the files to watch changed.
    pub(super) fn sync_members(&self, state: &mut State) -> bool {
        let texts: Vec<SourceText> = state
            .sources
            .iter()
            .filter(|t| !t.members)
            .filter_map(Tracked::source_text)
            .collect();
        let wanted = crate::config::membership_sources(&texts);
        let current: Vec<&ConfigSource> = state
            .sources
            .iter()
            .filter(|t| t.members)
            .map(|t| &t.source)
            .collect();
        if current.iter().copied().eq(wanted.iter()) {
            return false;
        }
        let rules = state.sources.iter().filter(|t| !t.members).count();
        let mut old: Vec<Tracked> = state.sources.drain(rules..).collect();
        for source in wanted {
            let tracked = match old.iter().position(|t| t.source == source) {
                Some(at) => old.swap_remove(at),
                None => Tracked::new(source, true),
            };
            state.sources.push(tracked);
        }
        state.applied_each.truncate(rules);
        let names: Vec<ConfigSource> = state.sources.iter().map(|t| t.source.clone()).collect();
        self.status.send_modify(|status| {
            let kept = std::mem::take(&mut status.sources);
            status.sources = names
                .iter()
                .map(|source| {
                    kept.iter()
                        .find(|s| s.name == source.name())
                        .cloned()
                        .unwrap_or_else(|| super::SourceStatus::new(source))
                })
                .collect();
            status.files = names.iter().map(|s| s.name().to_path_buf()).collect();
        });
        true
    }

    /// Reads (or fetches, falling back to the cache) each membership source not read yet.
    pub(super) fn read_unread_members(&self, state: &mut State) -> Result<(), ConfigError> {
        let mut first_error = None;
        for index in 0..state.sources.len() {
            let tracked = &state.sources[index];
            if !tracked.members || tracked.text.is_some() {
                continue;
            }
            let read = if tracked.source.is_remote() {
                self.fetch_first(state, index)
            } else {
                self.read_file_into(&mut state.sources, index)
            };
            if let Err(error) = read {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
