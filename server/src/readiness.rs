//! Whether the service can do its job, for load balancers and orchestrators: `/livez`
//! (the process serves), `/readyz` (it can decide as configured) and the gRPC health status
//! of Envoy's rate limit service, all from one [`Readiness`].
//!
//! | phase, store | `/readyz` | `status` |
//! |---|---|---|
//! | rules not loaded yet | 503 | `loading` |
//! | Redis answers (or buckets in memory) | 200 | `ready` |
//! | Redis does not answer, `on_backend_error = "deny"` | 503 | `not_ready` |
//! | Redis does not answer, `"allow"` or `"local"` (a fallback decides) | 200 | `degraded` |
//! | the configured Redis backend could not be made | 503 | `not_ready` |
//! | from SIGTERM on, while requests in flight drain | 503 | `draining` |
//!
//! Each answer is JSON with the `status`, the `reason` and the config `generation`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Serialize;
use tollgate::Limits;
use tollgate::config::OnBackendError;
use tollgate::store::BackendStore;

/// Where the service is in its life.
const LOADING: u8 = 0;
const SERVING: u8 = 1;
const DRAINING: u8 = 2;

/// The service's phase and, once loaded, its limits: what the probes report from.
#[derive(Debug, Default)]
pub struct Readiness {
    phase: AtomicU8,
    limits: OnceLock<Limits<BackendStore>>,
}

/// How ready the service is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// Rules are not loaded yet.
    Loading,
    /// Decisions are made as configured.
    Ready,
    /// Redis does not answer, and a fallback (`allow` or `local`) decides meanwhile.
    Degraded,
    /// Decisions cannot be made as configured.
    NotReady,
    /// Shutting down: requests in flight finish, new ones should go elsewhere.
    Draining,
}

impl Status {
    /// Whether a load balancer should send requests (200): ready or degraded.
    pub fn serving(self) -> bool {
        matches!(self, Status::Ready | Status::Degraded)
    }
}

/// One answer of `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// How ready.
    pub status: Status,
    /// Why, in a few words.
    pub reason: String,
    /// The config generation in force (0 before it loads).
    pub generation: u64,
}

impl Readiness {
    /// A service still loading its rules.
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// The rules are loaded: `limits` decide from now on.
    pub fn loaded(&self, limits: Limits<BackendStore>) {
        let _ = self.limits.set(limits);
        let _ = self
            .phase
            .compare_exchange(LOADING, SERVING, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Shutdown has begun.
    pub fn draining(&self) {
        self.phase.store(DRAINING, Ordering::SeqCst);
    }

    /// The config generation in force (0 before it loads).
    pub fn generation(&self) -> u64 {
        self.limits
            .get()
            .map_or(0, |limits| limits.rules().generation())
    }

    /// How ready the service is now; asks Redis (a `PING`, bounded by `[store] timeout`)
    /// when buckets live there.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use tollgate_server::readiness::{Readiness, Status};
    ///
    /// let readiness = Readiness::new();
    /// assert_eq!(readiness.check().await.status, Status::Loading);
    /// # }
    /// ```
    pub async fn check(&self) -> Report {
        let generation = self.generation();
        let report = |status, reason: &str| Report {
            status,
            reason: reason.to_owned(),
            generation,
        };
        match self.phase.load(Ordering::SeqCst) {
            DRAINING => return report(Status::Draining, "shutting down; requests in flight drain"),
            LOADING => return report(Status::Loading, "the rules are not loaded yet"),
            _ => {}
        }
        let Some(limits) = self.limits.get() else {
            return report(Status::Loading, "the rules are not loaded yet");
        };
        let store = limits.store();
        if let Some(reason) = store.unusable() {
            return report(
                Status::NotReady,
                &format!("the Redis backend could not be made: {reason}"),
            );
        }
        let Some(redis) = store.redis() else {
            return report(Status::Ready, "buckets in memory");
        };
        match redis.ping().await {
            Ok(()) => report(Status::Ready, "Redis answers"),
            Err(error) => match limits.rules().store().redis.on_backend_error {
                OnBackendError::Deny => report(
                    Status::NotReady,
                    &format!("{error}; on_backend_error = \"deny\" refuses every request"),
                ),
                OnBackendError::Allow => report(
                    Status::Degraded,
                    &format!("{error}; on_backend_error = \"allow\" admits meanwhile"),
                ),
                _ => report(
                    Status::Degraded,
                    &format!("{error}; this instance's own buckets decide meanwhile"),
                ),
            },
        }
    }
}
