//! Polling remote config documents: a background thread that asks for a poll, waits as
//! long as the answer says, and stops when the limiter is gone. The waits themselves —
//! the interval, backoff after failures, jitter — are computed here.

use std::hash::BuildHasher as _;
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::time::Duration;

/// Backoff after failed fetches never waits longer than this (unless the interval does).
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A running poller; dropping it stops the thread at its next wake-up.
pub(super) struct Poller {
    /// A message polls now; dropping the sender stops the thread.
    wake: Sender<()>,
}

impl Poller {
    /// Calls `poll` after `first`, then after whatever each call returns, until a call
    /// returns `None` or the poller is dropped.
    pub(super) fn start(
        first: Duration,
        poll: impl Fn() -> Option<Duration> + Send + 'static,
    ) -> Poller {
        let (wake, woken) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("tollgate-config-poll".into())
            .spawn(move || {
                let mut wait = first;
                loop {
                    match woken.recv_timeout(wait) {
                        Ok(()) | Err(RecvTimeoutError::Timeout) => match poll() {
                            Some(next) => wait = next,
                            None => return,
                        },
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start polling remote config; SIGHUP still re-fetches it");
        }
        Poller { wake }
    }

    /// Polls now rather than at the next wake-up.
    pub(super) fn poll_now(&self) {
        // The thread is gone only if it stopped; nothing to wake then.
        let _ = self.wake.send(());
    }
}

/// The wait before the next poll: `interval`, doubled per failure in a row (at most
/// [`MAX_BACKOFF`], or the interval if that is longer), then jittered by ±20% so that a
/// fleet started together does not poll the repository in lock-step.
pub(super) fn next_wait(interval: Duration, failures: u32, random: u64) -> Duration {
    let backoff = interval
        .saturating_mul(1 << failures.min(16))
        .min(MAX_BACKOFF.max(interval));
    // A factor in [0.8, 1.2), from 4,096 steps of the random number.
    let step = (random % 4_096) as f64 / 4_096.0;
    backoff.mul_f64(0.8 + 0.4 * step)
}

/// A random number for jitter: std's hasher keys are random per process and per call.
pub(super) fn random() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_jittered_around_the_interval_and_back_off_after_failures() {
        let ten = Duration::from_secs(10);
        assert_eq!(next_wait(ten, 0, 0), Duration::from_secs(8));
        assert_eq!(next_wait(ten, 0, 2_048), Duration::from_secs(10));
        assert!(next_wait(ten, 0, 4_095) < Duration::from_secs(12));
        assert_eq!(next_wait(ten, 1, 2_048), Duration::from_secs(20));
        assert_eq!(next_wait(ten, 3, 2_048), Duration::from_secs(80));
        assert_eq!(next_wait(ten, 30, 2_048), MAX_BACKOFF, "capped");
        let hour = Duration::from_secs(3_600);
        assert_eq!(
            next_wait(hour, 5, 2_048),
            hour,
            "never below the interval itself"
        );
        // Jitter spreads a fleet: 1,000 draws cover the whole ±20% band.
        let waits: Vec<Duration> = (0..1_000).map(|_| next_wait(ten, 0, random())).collect();
        let (low, high) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
        assert!(*low < Duration::from_millis(8_400) && *high > Duration::from_millis(11_600));
    }
}
