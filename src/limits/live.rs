//! Keeping a limiter in step with its config: re-reading on demand and on change,
//! and reporting how that went. The work is the [`Reloader`](crate::reload)'s; this is the
//! limiter's door to it.

use std::sync::Arc;

use super::{Active, Limits, Shared};
use crate::config::{ConfigError, RuleId, RuleSet};
use crate::reload::{ReloadStatus, Reloaded, Target, Trigger, WatchError};
use crate::store::Store;

/// The limiter's side of a reload: the store learns the new rules before they are swapped
/// in with fresh counters, and forgets the retired rules' buckets after.
impl<St: Store> Target for Shared<St> {
    fn current(&self) -> Arc<RuleSet> {
        Arc::clone(self.active.load().rules())
    }

    fn install(&self, next: RuleSet, retired: &[RuleId]) {
        let housekeeping = self.store.housekeeping();
        let next = Active::new(next, &self.traffic);
        if let Some(store) = housekeeping {
            store.configure(next.store_rules());
        }
        self.active.store(Arc::new(next));
        if let Some(store) = housekeeping {
            store.forget(retired);
        }
    }
}

impl<St: Store> Limits<St> {
    /// Re-reads the files and re-fetches the URLs now (the gateway binds this to SIGHUP),
    /// even if what they hold was refused before.
    ///
    /// Returns what happened, or why the sources were refused — in which case the previous
    /// rules keep serving and [`status`](Self::status) reports the error. A URL that cannot
    /// be fetched keeps its last good copy (its error is in the status); the files still
    /// reload.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let shared = &self.shared;
        shared.reloader.reload(Trigger::Forced, shared.as_ref())
    }

    /// The configuration's current state. Its generation is the active rule set's own, so
    /// it never lags behind the rules requests see.
    pub fn status(&self) -> ReloadStatus {
        let generation = self.shared.active.load().generation();
        self.shared.reloader.status(generation)
    }

    /// A receiver that sees every change of [`status`](Self::status): each applied reload and
    /// each failure.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<ReloadStatus> {
        self.shared.reloader.subscribe()
    }

    /// Starts watching the files this limiter was loaded from, and polling its URLs.
    pub(super) fn start_watching(&self) -> Result<(), WatchError> {
        // Weak: the watcher lives inside the limiter and must not keep it alive.
        let weak = Arc::downgrade(&self.shared);
        self.shared.reloader.watch(move |trigger| {
            // The limiter is gone: nothing to reload (the watcher is being dropped too).
            let shared = weak.upgrade()?;
            // Errors were logged and recorded by the reload itself.
            let _ = shared.reloader.reload(trigger, shared.as_ref());
            Some(shared.reloader.next_poll())
        })
    }
}
