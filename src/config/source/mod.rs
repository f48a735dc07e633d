//! Where config text comes from, and the text itself.
//!
//! A [`ConfigSource`] names one layer of configuration: a file on disk, or a document at an
//! `http://` or `https://` URL (a shared repository for a fleet). Files are read with the
//! checks a live reload needs (`file`: regular files only, opened so that a named pipe cannot
//! block, at most [`MAX_CONFIG_BYTES`], UTF-8); documents are fetched with conditional
//! requests, the same cap and bounded time (`remote`, feature `remote`), and their last good
//! copy can be kept on disk (`cache`). What is read is a [`SourceText`]: the text under the
//! name it was read from, able to turn a byte span into the line and column a [`Diagnostic`]
//! shows. Compilation sees only `SourceText`s; *when* to read is the reloader's business.

mod cache;
mod file;
// Without the feature a fetch only says it is unavailable, but the types stay, so the
// reload engine needs no `cfg` of its own.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
mod remote;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub(crate) use cache::Cache;
pub(crate) use file::{read_file, read_file_up_to};
pub(crate) use remote::{Fetched, Fetcher};

use super::error::{ConfigError, Diagnostic};

/// The most bytes a config file or remote document may hold: 10,000 rules take well under
/// 1 MiB, so a larger one is a mistake (a log or an image saved over the config), refused
/// without reading it all.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("limits.toml");
/// std::fs::write(&file, vec![b'#'; tollgate::config::MAX_CONFIG_BYTES as usize + 1])?;
/// let error = tollgate::Limits::load([&file]).unwrap_err();
/// assert!(error.to_string().contains("larger than 16777216 bytes"), "{error}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// One layer of configuration: where its text is read from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ConfigSource {
    /// A TOML file on disk.
    File(PathBuf),
    /// A TOML document served over HTTP.
    Url(RemoteUrl),
}

/// An `http://` or `https://` URL a config document is fetched from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RemoteUrl {
    /// As given (and shown): also the "file" its diagnostics name.
    text: PathBuf,
    /// Its host, which `[reload.headers]` are matched against.
    host: String,
}

impl RemoteUrl {
    /// The URL, for the HTTP client.
    pub(crate) fn as_str(&self) -> &str {
        self.text.to_str().unwrap_or_default()
    }

    /// The host part, lower-cased.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn host(&self) -> &str {
        &self.host
    }
}

impl ConfigSource {
    /// The source `name` names: a URL if it starts with `http://` or `https://`, else a file.
    pub(crate) fn parse(name: &Path) -> Result<ConfigSource, ConfigError> {
        let Some(text) = name
            .to_str()
            .filter(|t| t.starts_with("http://") || t.starts_with("https://"))
        else {
            return Ok(ConfigSource::File(name.to_path_buf()));
        };
        let bad = |reason: &str| ConfigError::BadUrl {
            url: text.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: http::Uri = text.parse().map_err(|_| bad("it does not parse"))?;
        let authority = uri.authority().ok_or_else(|| bad("it names no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad(
                "credentials in the URL would be shown in logs and on /config; \
                 send them as a header from the environment ([reload.headers])",
            ));
        }
        Ok(ConfigSource::Url(RemoteUrl {
            text: name.to_path_buf(),
            host: authority.host().to_ascii_lowercase(),
        }))
    }

    /// The sources `names` name, in layering order.
    pub(crate) fn parse_all<P: AsRef<Path>>(
        names: impl IntoIterator<Item = P>,
    ) -> Result<Vec<ConfigSource>, ConfigError> {
        names
            .into_iter()
            .map(|name| ConfigSource::parse(name.as_ref()))
            .collect()
    }

    /// The name diagnostics and status pages show for it: the path or the URL.
    pub(crate) fn name(&self) -> &Path {
        match self {
            ConfigSource::File(path) => path,
            ConfigSource::Url(url) => &url.text,
        }
    }

    /// Whether it is fetched over HTTP.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, ConfigSource::Url(_))
    }
}

/// What tells one version of a source from the next without reading it all again.
///
/// ```
/// use tollgate::config::Validator;
///
/// let etag = Validator::ETag("\"v42\"".into());
/// assert_eq!(etag.to_string(), "ETag \"v42\"");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Validator {
    /// A remote document's `ETag`, sent back as `If-None-Match`.
    ETag(String),
    /// A remote document's `Last-Modified`, sent back as `If-Modified-Since`.
    LastModified(String),
    /// A file's modification time when it was read.
    Modified(SystemTime),
}

impl std::fmt::Display for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Validator::ETag(tag) => write!(f, "ETag {tag}"),
            Validator::LastModified(date) => write!(f, "Last-Modified {date}"),
            Validator::Modified(time) => {
                let seconds = time
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                write!(f, "modified at {seconds:.3} (UNIX seconds)")
            }
        }
    }
}

/// A config document's text under the name it was read from, for turning byte spans into
/// lines and columns.
#[derive(Clone, Debug)]
pub(crate) struct SourceText {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
    /// Fetched from a URL rather than read from a local file.
    pub(crate) remote: bool,
    /// A `[plans] members` table rather than rules.
    pub(crate) members: bool,
    /// Byte offset of the start of each line, so locating a span is a binary search
    /// (a 10,000-rule file locates every rule's origin).
    line_starts: Vec<usize>,
}

impl SourceText {
    pub(crate) fn new(path: impl AsRef<Path>, text: impl Into<String>) -> SourceText {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        SourceText {
            path: path.as_ref().to_path_buf(),
            text,
            remote: false,
            members: false,
            line_starts,
        }
    }

    /// Whether it is envoyproxy/ratelimit's YAML rather than TOML: a `.yaml` or `.yml`
    /// name, in any case.
    pub(crate) fn is_yaml(&self) -> bool {
        is_yaml(&self.path)
    }

    /// The text of `source`.
    pub(crate) fn of(source: &ConfigSource, text: impl Into<String>) -> SourceText {
        let mut read = SourceText::new(source.name(), text);
        read.remote = source.is_remote();
        read
    }

    /// Config given as a string rather than read from a source: errors name it `<inline>`.
    pub(crate) fn inline(text: impl Into<String>) -> SourceText {
        SourceText::new("<inline>", text)
    }

    /// The byte offset of `line` (1-based) and `column` (0-based, in characters), as YAML
    /// parsers report positions; clamped to the text.
    #[cfg_attr(not(feature = "yaml"), allow(dead_code))]
    pub(crate) fn offset(&self, line: usize, column: usize) -> usize {
        let Some(&start) = line.checked_sub(1).and_then(|i| self.line_starts.get(i)) else {
            return self.text.len();
        };
        let rest = self.text.get(start..).unwrap_or_default();
        start
            + rest
                .char_indices()
                .nth(column)
                .map_or(rest.len(), |(at, _)| at)
    }

    /// A diagnostic at the start of `span`.
    pub(crate) fn at(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let offset = span.start.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = line
            .checked_sub(1)
            .and_then(|i| self.line_starts.get(i))
            .copied()
            .unwrap_or(0);
        let column = self
            .text
            .get(line_start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        Diagnostic {
            file: self.path.clone(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// Whether `path` names a YAML file (`.yaml`, `.yml`, any case): read as
/// envoyproxy/ratelimit's configuration rather than TOML.
pub(crate) fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| {
            extension.eq_ignore_ascii_case("yaml") || extension.eq_ignore_ascii_case("yml")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_become_lines_and_columns() {
        let source = SourceText::new("a.toml", "x = 1\n\ny = \"é\" z\n");
        let at = |offset: usize| {
            let d = source.at(offset..offset + 1, "m");
            (d.line, d.column)
        };
        assert_eq!(at(0), (1, 1));
        assert_eq!(at(4), (1, 5));
        assert_eq!(at(7), (3, 1));
        // "é" is two bytes but one column: `z` is the ninth character.
        assert_eq!(at(16), (3, 9));
        assert_eq!(at(1_000), (4, 1));
    }

    #[test]
    fn several_problems_print_one_per_line() {
        let source = SourceText::new("a.toml", "a\nb\n");
        let error = ConfigError::Invalid(vec![source.at(0..1, "first"), source.at(2..3, "second")]);
        assert_eq!(error.to_string(), "a.toml:1:1: first\na.toml:2:1: second");
    }

    #[test]
    fn names_starting_with_a_scheme_are_urls_and_the_rest_files() {
        let parse = |name: &str| ConfigSource::parse(Path::new(name));
        assert!(matches!(
            parse("config/gateway.toml"),
            Ok(ConfigSource::File(_))
        ));
        assert!(matches!(
            parse("./http-limits.toml"),
            Ok(ConfigSource::File(_))
        ));
        let Ok(ConfigSource::Url(url)) = parse("https://Config.Example.com:8443/fleet/limits.toml")
        else {
            panic!("a URL");
        };
        assert_eq!(url.host(), "config.example.com");
        assert_eq!(
            url.as_str(),
            "https://Config.Example.com:8443/fleet/limits.toml"
        );
        for bad in [
            "https://",
            "http://user:secret@example.com/x.toml",
            "http://exa mple.com/",
        ] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("config source {bad} is not a URL")),
                "{error}"
            );
        }
    }
}
