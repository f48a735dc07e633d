//! Background upkeep of a limiter: restoring the snapshot at start, then, until the last
//! clone is gone, sweeping refilled buckets and writing snapshots.

use super::Shared;
use crate::store::Store;

/// Reads `[store] snapshot` back, if set: a missing or damaged snapshot is logged and
/// ignored, never fatal.
pub(super) fn restore<St: Store>(shared: &Shared<St>) {
    let rules = shared.active.load();
    let Some(path) = &rules.store().snapshot else {
        return;
    };
    let Some(snapshots) = shared.store.snapshots() else {
        return;
    };
    match snapshots.restore_snapshot(rules.store_rules(), shared.clock.now()) {
        Ok(restored) => tracing::info!(restored, snapshot = %path.display(), "buckets restored"),
        Err(error) => tracing::warn!(%error, "snapshot ignored; starting with full buckets"),
    }
}

/// In the background until the limiter is gone: drops refilled buckets (and folds idle
/// clients' peaks into their rules' sketches) every `[store] sweep_interval`, and writes the snapshot every `snapshot_interval` if one is set.
pub(super) fn start<St: Store>(
    shared: std::sync::Weak<Shared<St>>,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-maintenance".into())
        .spawn(move || {
            let (mut last_sweep, mut last_snapshot) =
                (std::time::Instant::now(), std::time::Instant::now());
            loop {
                let Some(settings) = shared.upgrade().map(|s| s.active.load().store().clone())
                else {
                    return;
                };
                let due = |last: std::time::Instant, every: std::time::Duration| {
                    every.saturating_sub(last.elapsed())
                };
                let mut wait = due(last_sweep, settings.sweep_interval);
                if settings.snapshot.is_some() {
                    wait = wait.min(due(last_snapshot, settings.snapshot_interval));
                }
                // Woken early only by the last clone going away.
                match stop.recv_timeout(wait) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if last_sweep.elapsed() >= settings.sweep_interval {
                    last_sweep = std::time::Instant::now();
                    let swept = (shared.store.housekeeping())
                        .map_or(0, |store| store.sweep(shared.clock.now()));
                    if swept > 0 {
                        tracing::debug!(swept, "swept buckets that had refilled");
                    }
                    #[cfg(feature = "insight")]
                    {
                        let folded = shared.traffic.sweep_peaks(shared.clock.now());
                        if folded > 0 {
                            tracing::debug!(folded, "folded idle clients' peaks into the sketches");
                        }
                    }
                }
                if settings.snapshot.is_some()
                    && last_snapshot.elapsed() >= settings.snapshot_interval
                {
                    last_snapshot = std::time::Instant::now();
                    let rules = shared.active.load();
                    let saved = (shared.store.snapshots()).map_or(Ok(0), |store| {
                        store.save_snapshot(rules.store_rules(), shared.clock.now())
                    });
                    if let Err(error) = saved {
                        tracing::warn!(%error, "cannot write the snapshot");
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start bucket maintenance; idle buckets stay until evicted");
    }
}
