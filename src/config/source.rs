//! Where config text comes from, and the text itself (SPEC §5).
//!
//! A [`ConfigSource`] names one layer of configuration and knows how to read it; today that
//! is a file on disk, read with the checks a live reload needs (regular files only, opened
//! so that a named pipe cannot block, at most [`MAX_CONFIG_BYTES`], UTF-8). What is read is
//! a [`SourceText`]: the text under the name it was read from, able to turn a byte span into
//! the line and column a [`Diagnostic`] shows. Compilation sees only `SourceText`s, so a new
//! kind of source (a URL, say) is added here without touching it.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, Diagnostic};

/// The most bytes a config file may hold: 10,000 rules take well under 1 MiB, so a larger
/// file is a mistake (a log or an image saved over the config), refused without reading it
/// all.
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
}

impl ConfigSource {
    /// The sources `paths` name, in layering order.
    pub(crate) fn files<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Vec<ConfigSource> {
        paths
            .into_iter()
            .map(|path| ConfigSource::File(path.as_ref().to_path_buf()))
            .collect()
    }

    /// The name diagnostics and status pages show for it.
    pub(crate) fn name(&self) -> &Path {
        match self {
            ConfigSource::File(path) => path,
        }
    }

    /// Reads its text now.
    pub(crate) fn read(&self) -> Result<SourceText, ConfigError> {
        match self {
            ConfigSource::File(path) => read_file(path),
        }
    }

    /// Reads every source, in order; the first that cannot be read refuses the set.
    pub(crate) fn read_all(sources: &[ConfigSource]) -> Result<Vec<SourceText>, ConfigError> {
        if sources.is_empty() {
            return Err(ConfigError::NoFiles);
        }
        sources.iter().map(ConfigSource::read).collect()
    }
}

/// A config document's text under the name it was read from, for turning byte spans into
/// lines and columns.
#[derive(Clone, Debug)]
pub(crate) struct SourceText {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
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
            line_starts,
        }
    }

    /// Config given as a string rather than read from a source: errors name it `<inline>`.
    pub(crate) fn inline(text: impl Into<String>) -> SourceText {
        SourceText::new("<inline>", text)
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

fn read_file(path: &Path) -> Result<SourceText, ConfigError> {
    use std::io::Read;
    let read_error = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Opened non-blocking: a named pipe saved in the file's place would otherwise make the
    // open wait for a writer for ever, and every later reload behind it. (Regular files
    // read the same either way.)
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(read_error)?;
    // Only regular files, checked on the open file so nothing can be swapped in between:
    // a directory, a pipe or a device is never a config.
    let kind = file.metadata().map_err(read_error)?.file_type();
    if !kind.is_file() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file (a {})", describe_file_type(kind)),
        )));
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells "too large" apart from "exactly at it".
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|error| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                error.utf8_error().valid_up_to()
            ),
        ))
    })?;
    Ok(SourceText::new(path, text))
}

/// What a file that is not a regular file is, for the error.
fn describe_file_type(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            return "named pipe";
        }
        if kind.is_socket() {
            return "socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "device";
        }
    }
    "special file"
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
    fn a_directory_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let error = ConfigSource::File(dir.path().to_owned())
            .read()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("not a regular file (a directory)"),
            "{error}"
        );
        assert!(matches!(
            ConfigSource::read_all(&[]),
            Err(ConfigError::NoFiles)
        ));
    }
}
