//! Config errors that say where: file, line, column, and what is wrong.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
    /// A config source given as a URL is not one tollgate can fetch.
    #[error("config source {url} is not a URL tollgate can fetch: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A remote document could not be fetched at start-up, and no cached copy was there to
    /// start from.
    #[error("cannot fetch config {url}: {reason}{}", match cache {
        Some(dir) => format!(" (and no cached copy in {})", dir.display()),
        None => " (and no [reload] cache_dir to start from)".to_owned(),
    })]
    Fetch {
        /// The URL.
        url: String,
        /// Why the fetch failed.
        reason: String,
        /// The cache directory that was searched, if one is configured.
        cache: Option<PathBuf>,
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
