//! Config errors that say where: file, line, column, and what is wrong (SPEC §3, §5).

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in one file.
///
/// ```
/// use tollgate::config::Diagnostic;
///
/// let diagnostic = Diagnostic {
///     file: "limits.toml".into(),
///     line: 3,
///     column: 8,
///     message: "burst must be at least 1".into(),
/// };
/// assert_eq!(diagnostic.to_string(), "limits.toml:3:8: burst must be at least 1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as it was named to [`Limits::load`](crate::Limits::load).
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong, lower-case, quoting the offending value.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// Why a set of config files was refused. Nothing of a refused set is applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No file was named.
    #[error("no config files given")]
    NoFiles,
    /// A file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file is larger than any config could sensibly be (a log or a disk image saved
    /// over it by mistake); refused without reading it all.
    #[error("config file {} is larger than {limit} bytes; refusing to read it", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most a config file may hold, [`MAX_CONFIG_BYTES`](crate::config::MAX_CONFIG_BYTES).
        limit: u64,
    },
    /// The files were read but are not a valid config; every problem found is listed.
    #[error("{}", Lines(.0))]
    Invalid(Vec<Diagnostic>),
}

impl ConfigError {
    /// The located problems, if the files were readable.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Invalid(diagnostics) => diagnostics,
            _ => &[],
        }
    }
}

struct Lines<'a>(&'a [Diagnostic]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

/// A config file's text, for turning byte spans into lines and columns.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
    /// Byte offset of the start of each line, so locating a span is a binary search
    /// (a 10,000-rule file locates every rule's origin).
    line_starts: Vec<usize>,
}

impl Source {
    pub(crate) fn new(path: impl AsRef<Path>, text: impl Into<String>) -> Source {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Source {
            path: path.as_ref().to_path_buf(),
            text,
            line_starts,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_become_lines_and_columns() {
        let source = Source::new("a.toml", "x = 1\n\ny = \"é\" z\n");
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
        let source = Source::new("a.toml", "a\nb\n");
        let error = ConfigError::Invalid(vec![source.at(0..1, "first"), source.at(2..3, "second")]);
        assert_eq!(error.to_string(), "a.toml:1:1: first\na.toml:2:1: second");
    }
}
