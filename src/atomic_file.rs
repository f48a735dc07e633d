//! Writing a file so that a crash or a full disk leaves the old file or the new one, never
//! half of one: write a temporary file beside it, sync it, rename it into place.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically. On failure the temporary file is removed (a disk
/// that filled half-way through gets its space back) and `path` is untouched.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let written = std::fs::File::create(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        super::write(&path, b"first").unwrap();
        super::write(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        // A directory cannot be renamed over: the write fails and leaves nothing behind.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), b"x").unwrap();
        assert!(super::write(&blocked, b"data").is_err());
        assert!(!dir.path().join("blocked.tmp").exists());
    }
}
