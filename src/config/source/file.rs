//! Reading a config file: only regular files, opened so that nothing can block the reload,
//! at most [`MAX_CONFIG_BYTES`] of UTF-8 text.

use std::path::Path;
use std::time::SystemTime;

use super::{MAX_CONFIG_BYTES, Validator};
use crate::config::ConfigError;

/// Reads the file at `path` whole, with its modification time; refuses what is not a
/// regular file of UTF-8 text within [`MAX_CONFIG_BYTES`].
pub(crate) fn read_file(path: &Path) -> Result<(String, Validator), ConfigError> {
    read_file_up_to(path, MAX_CONFIG_BYTES)
}

/// [`read_file`] with a limit of `max` bytes (membership tables are larger than rules).
pub(crate) fn read_file_up_to(path: &Path, max: u64) -> Result<(String, Validator), ConfigError> {
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
    let metadata = file.metadata().map_err(read_error)?;
    let kind = metadata.file_type();
    if !kind.is_file() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file (a {})", describe_file_type(kind)),
        )));
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells "too large" apart from "exactly at it".
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > max {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
            limit: max,
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
    let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    Ok((text, Validator::Modified(modified)))
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
    fn a_directory_is_refused_by_name_and_a_file_read_with_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let error = read_file(dir.path()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("not a regular file (a directory)"),
            "{error}"
        );
        let file = dir.path().join("limits.toml");
        std::fs::write(&file, "[limits]\n").unwrap();
        let (text, validator) = read_file(&file).unwrap();
        assert_eq!(text, "[limits]\n");
        assert!(matches!(validator, Validator::Modified(t) if t > SystemTime::UNIX_EPOCH));
    }
}
