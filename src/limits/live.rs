//! Keeping a limiter in step with its config (SPEC §5): re-reading on demand and on change,
//! and reporting how that went. The work is the [`Reloader`](crate::reload)'s; this is the
//! limiter's door to it.

use std::sync::Arc;

use super::Limits;
use crate::config::ConfigError;
use crate::reload::{ReloadStatus, Reloaded, WatchError};
use crate::store::Store;

impl<St: Store> Limits<St> {
    /// Re-reads the files now (the gateway binds this to SIGHUP).
    ///
    /// Returns what happened, or why the files were refused — in which case the previous
    /// rules keep serving and [`status`](Self::status) reports the error.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let shared = &self.shared;
        shared.reloader.reload(&shared.rules, &shared.store)
    }

    /// The configuration's current state. Its generation is the active rule set's own, so
    /// it never lags behind the rules requests see.
    pub fn status(&self) -> ReloadStatus {
        let generation = self.shared.rules.load().generation();
        self.shared.reloader.status(generation)
    }

    /// A receiver that sees every change of [`status`](Self::status): each applied reload and
    /// each failure.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<ReloadStatus> {
        self.shared.reloader.subscribe()
    }

    /// Starts watching the files this limiter was loaded from.
    pub(super) fn start_watching(&self) -> Result<(), WatchError> {
        // Weak: the watcher lives inside the limiter and must not keep it alive.
        let weak = Arc::downgrade(&self.shared);
        self.shared.reloader.watch(move || {
            // The limiter is gone: nothing to reload (the watcher is being dropped too).
            if let Some(shared) = weak.upgrade() {
                // Errors were logged and recorded by the reload itself.
                let _ = shared.reloader.reload(&shared.rules, &shared.store);
            }
        })
    }
}
