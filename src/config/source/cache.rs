//! The last good copy of each remote document, on disk (`[reload] cache_dir`), so that a
//! gateway can start while its repository is down. One file per URL, named after it and
//! written atomically; the document only — never a header, never a credential.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::RemoteUrl;

/// A directory of cached remote documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `url`'s copy lives: its readable part, then a hash of the whole URL so that
    /// two URLs never share a file.
    pub(crate) fn path_for(&self, url: &RemoteUrl) -> PathBuf {
        let text = url.as_str();
        let readable: String = text
            .split_once("://")
            .map_or(text, |(_, rest)| rest)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        self.dir
            .join(format!("{readable}-{:016x}.toml", fnv1a(text.as_bytes())))
    }

    /// The cached copy of `url` and when it was written, if there is one.
    pub(crate) fn read(&self, url: &RemoteUrl) -> Option<(String, SystemTime)> {
        let path = self.path_for(url);
        let (text, validator) = super::read_file(&path).ok()?;
        match validator {
            super::Validator::Modified(at) => Some((text, at)),
            _ => Some((text, SystemTime::UNIX_EPOCH)),
        }
    }

    /// Keeps `text` as `url`'s last good copy.
    pub(crate) fn write(&self, url: &RemoteUrl, text: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        crate::atomic_file::write(&self.path_for(url), text.as_bytes())
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms, which a file name must be.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::source::ConfigSource;

    fn url(text: &str) -> RemoteUrl {
        match ConfigSource::parse(Path::new(text)).unwrap() {
            ConfigSource::Url(url) => url,
            ConfigSource::File(_) => panic!("{text} is a URL"),
        }
    }

    #[test]
    fn a_copy_round_trips_under_a_name_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("nested"));
        let a = url("http://config.example/fleet/limits.toml");
        let b = url("http://config.example/fleet/limits.toml?v=2");
        assert_ne!(cache.path_for(&a), cache.path_for(&b));
        assert!(cache.read(&a).is_none());
        cache.write(&a, "[limits]\n").unwrap();
        assert_eq!(cache.read(&a).unwrap().0, "[limits]\n");
        assert!(cache.read(&b).is_none());
        let name = cache.path_for(&a);
        let name = name.file_name().unwrap().to_string_lossy();
        assert!(
            name.starts_with("config.example_fleet_limits.toml-"),
            "{name}"
        );
    }
}
