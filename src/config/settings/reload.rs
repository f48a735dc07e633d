//! The `[reload]` table: how remote config documents are polled, cached and fetched with
//! credentials.
//!
//! It says how to fetch the remote documents, so it is read from local files only: a remote
//! document that sets it is refused. At start-up it is read before anything is fetched
//! ([`ReloadSettings::bootstrap`]), so that the cache can stand in for a repository that is
//! down.

use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;

use super::super::error::Diagnostic;
use super::super::raw::{RawFile, RawReload};
use super::super::source::SourceText;
use super::is_env_name;
use crate::quota::parse_duration;

/// The `[reload]` table.
///
/// ```
/// use std::time::Duration;
///
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[reload]\npoll_interval = \"30s\"\ncache_dir = \"/var/cache/tollgate\"\n\
///      [reload.headers.\"config.example.com\"]\nAuthorization = \"TOLLGATE_CONFIG_AUTH\"\n",
/// )?;
/// let reload = rules.reload();
/// assert_eq!(reload.poll_interval, Duration::from_secs(30));
/// assert_eq!(reload.headers[0].env, "TOLLGATE_CONFIG_AUTH");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadSettings {
    /// How often remote documents are polled (`poll_interval`, default
    /// [`ReloadSettings::DEFAULT_POLL_INTERVAL`]), each wait jittered by ±20%.
    pub poll_interval: Duration,
    /// Where the last good copy of each remote document is kept (`cache_dir`, default none).
    pub cache_dir: Option<PathBuf>,
    /// Headers sent with fetches, their values read from the environment.
    pub headers: Vec<RemoteHeader>,
}

/// One `[reload.headers."host"]` entry: a header sent to `host` only, its value read from
/// the environment variable `env` at each fetch (never from config, never shown).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteHeader {
    /// The host (as in the URL, lower-cased) the header is sent to.
    pub host: String,
    /// The header.
    pub name: HeaderName,
    /// The environment variable holding its value.
    pub env: String,
}

impl ReloadSettings {
    /// How often remote documents are polled unless told otherwise.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(10);
    /// The shortest poll interval accepted.
    pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);

    /// The `[reload]` settings of the local files among `texts`, before any remote document
    /// is fetched. Problems are ignored here (defaults stand in); compiling reports them.
    pub(crate) fn bootstrap(texts: &[SourceText]) -> ReloadSettings {
        let mut settings = ReloadSettings::default();
        for source in texts.iter().filter(|t| !t.remote) {
            if let Ok(raw) = toml::from_str::<RawFile>(&source.text)
                && let Some(reload) = &raw.reload
            {
                settings.apply(source, reload.get_ref(), &mut Vec::new());
            }
        }
        settings
    }

    /// Applies one file's `[reload]` table, reporting every bad value.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawReload,
        out: &mut Vec<Diagnostic>,
    ) {
        if let Some(text) = &raw.poll_interval {
            match parse_duration(text.get_ref()) {
                Some(d) if d >= Self::MIN_POLL_INTERVAL => self.poll_interval = d,
                _ => out.push(source.at(
                    text.span(),
                    format!(
                        "poll_interval \"{}\" is not a duration of at least 100ms like \"10s\"",
                        text.get_ref()
                    ),
                )),
            }
        }
        if let Some(dir) = &raw.cache_dir {
            match dir.get_ref().trim() {
                "" => out.push(source.at(
                    dir.span(),
                    "cache_dir is empty: name a directory, or leave it out",
                )),
                dir => self.cache_dir = Some(PathBuf::from(dir)),
            }
        }
        for (host, headers) in &raw.headers {
            let valid_host = !host.get_ref().is_empty()
                && host
                    .get_ref()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
            if !valid_host {
                out.push(source.at(
                    host.span(),
                    format!(
                        "[reload.headers] keys are hosts like \"config.example.com\", found \"{}\"",
                        host.get_ref()
                    ),
                ));
                continue;
            }
            for (name, env) in headers {
                let Ok(header) = HeaderName::from_bytes(name.get_ref().as_bytes()) else {
                    out.push(source.at(
                        name.span(),
                        format!("\"{}\" is not a header name", name.get_ref()),
                    ));
                    continue;
                };
                if !is_env_name(env.get_ref()) {
                    out.push(source.at(
                        env.span(),
                        format!(
                            "the value of a [reload.headers] entry names the environment variable \
                             holding the header's value (like \"TOLLGATE_CONFIG_TOKEN\"), found \"{}\"; \
                             secrets never go in config files",
                            env.get_ref()
                        ),
                    ));
                    continue;
                }
                self.headers.retain(|h| {
                    !(h.host == *host.get_ref().to_ascii_lowercase() && h.name == header)
                });
                self.headers.push(RemoteHeader {
                    host: host.get_ref().to_ascii_lowercase(),
                    name: header,
                    env: env.get_ref().clone(),
                });
            }
        }
    }
}

impl Default for ReloadSettings {
    fn default() -> Self {
        ReloadSettings {
            poll_interval: Self::DEFAULT_POLL_INTERVAL,
            cache_dir: None,
            headers: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bad_reload_setting_is_reported_with_its_place() {
        let text = "[reload]\npoll_interval = \"10ms\"\ncache_dir = \" \"\n\
                    [reload.headers.\"a/b\"]\nX = \"Y\"\n\
                    [reload.headers.\"ok.example\"]\n\"bad header\" = \"TOKEN\"\nAuthorization = \"Bearer abc\"\n";
        let error = crate::config::RuleSet::from_toml(text)
            .unwrap_err()
            .to_string();
        for expected in [
            "<inline>:2:17: poll_interval \"10ms\" is not a duration of at least 100ms",
            "<inline>:3:13: cache_dir is empty",
            "<inline>:4:17: [reload.headers] keys are hosts",
            "<inline>:7:1: \"bad header\" is not a header name",
            "<inline>:8:17: the value of a [reload.headers] entry names the environment variable",
        ] {
            assert!(
                error.contains(expected),
                "missing {expected:?} in:\n{error}"
            );
        }
    }
}
