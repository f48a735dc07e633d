//! Watching config files: the files' directories, through `notify`, debounced by a thread of
//! our own that can tell a change from a read.
//!
//! inotify reports opens and closes too, and a reload opens and reads the file: a watcher
//! that reacted to every event would re-read its own reads for ever (and, after an invalid
//! save, report the same error dozens of times a second). Only events that can change what a
//! file holds count: writes, creations, renames, removals, metadata changes.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};

use super::{DEBOUNCE, WatchError};

/// A running watcher; dropping it stops the watcher and its debounce thread.
pub(super) struct FileWatcher {
    _watcher: RecommendedWatcher,
}

impl FileWatcher {
    /// Watches the directories of `files` and calls `changed` once each burst of changes to
    /// any of them has settled for [`DEBOUNCE`].
    pub(super) fn start(
        files: &[PathBuf],
        changed: impl Fn() + Send + 'static,
    ) -> Result<FileWatcher, WatchError> {
        let mut directories = BTreeSet::new();
        let mut names = HashSet::new();
        for path in files {
            let directory = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            directories.insert(directory.to_path_buf());
            if let Some(name) = path.file_name() {
                names.insert(name.to_os_string());
            }
        }
        let (events, received) = std::sync::mpsc::channel();
        let mut watcher = notify::recommended_watcher(events).map_err(WatchError::Start)?;
        for directory in directories {
            watcher
                .watch(&directory, RecursiveMode::NonRecursive)
                .map_err(|source| WatchError::Watch {
                    path: directory.clone(),
                    source,
                })?;
        }
        let spawned = std::thread::Builder::new()
            .name("tollgate-config-watch".into())
            .spawn(move || debounce(&received, &names, changed));
        if let Err(error) = spawned {
            return Err(WatchError::Start(notify::Error::io(error)));
        }
        Ok(FileWatcher { _watcher: watcher })
    }
}

/// Waits for a change, lets the burst settle, calls `changed`; until the watcher is gone.
fn debounce(
    received: &Receiver<notify::Result<Event>>,
    names: &HashSet<OsString>,
    changed: impl Fn(),
) {
    let relevant = |message: &notify::Result<Event>| match message {
        Ok(event) => is_change(&event.kind) && event.paths.iter().any(|p| concerns(p, names)),
        Err(error) => {
            tracing::warn!(%error, "config file watcher error");
            false
        }
    };
    loop {
        // Block until something changes (the sender goes when the watcher is dropped).
        loop {
            match received.recv() {
                Ok(message) if relevant(&message) => break,
                Ok(_) => {}
                Err(_) => return,
            }
        }
        let mut deadline = Instant::now() + DEBOUNCE;
        loop {
            match received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(message) if relevant(&message) => deadline = Instant::now() + DEBOUNCE,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        changed();
    }
}

/// Whether an event of this kind can change what a file holds. Opening, reading and closing
/// without writing cannot — and are what a reload itself does.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether an event on `path` may have changed one of the files: the file itself, or a
/// Kubernetes ConfigMap's `..data` link and timestamped directories.
fn concerns(path: &Path, names: &HashSet<OsString>) -> bool {
    path.file_name()
        .is_some_and(|name| names.contains(name) || name.to_string_lossy().starts_with(".."))
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode};

    use super::*;

    #[test]
    fn reads_are_not_changes_and_writes_are() {
        for read in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!is_change(&read), "{read:?}");
        }
        for change in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(is_change(&change), "{change:?}");
        }
    }
}
