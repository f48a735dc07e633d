//! One decision's call to Redis, and what a failure does: the call under its span and the
//! caller's timeout, a failure counted against its shard (logged at most every few
//! seconds), the breaker fed, the slot table read again, and the fallback
//! `on_backend_error` names.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::Instrument as _;

use super::Inner;
use super::answer::within;
use super::owned::OwnedRequest;
use super::shards::Shard;
use crate::algorithm::Algorithm;
use crate::config::{OnBackendError, RedisSettings};
use crate::decision::Decision;
use crate::store::StoreError;

/// Failures are logged at most once per this many seconds.
const LOG_EVERY_SECS: u64 = 5;
/// A cluster's slot table is read again at least this often while decisions flow.
const SHARDS_EVERY_SECS: u64 = 30;

impl Inner {
    /// What a decision is when Redis cannot make it.
    pub(super) fn fallback(
        &self,
        request: &OwnedRequest,
        mode: OnBackendError,
        wait: Duration,
    ) -> Decision {
        self.fallbacks.increment(1);
        match mode {
            OnBackendError::Allow => Decision::unlimited(),
            OnBackendError::Local => self.local.decide(request.as_check()),
            OnBackendError::Deny => {
                let retry = u64::try_from(wait.as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1_000_000_000);
                let (limit, window) =
                    request
                        .quotas
                        .first()
                        .map_or((0, 0), |q| match request.algorithm {
                            Algorithm::Gcra => (u64::from(q.burst()), q.capacity_nanos()),
                            _ => (u64::from(q.rate().count()), q.period_nanos()),
                        });
                Decision::counted(false, 0, limit, window, 0, retry, retry, retry)
            }
        }
    }

    /// Counts a failure against `shard` and logs it, at most once every [`LOG_EVERY_SECS`].
    pub(super) fn report(&self, shard: &Shard, error: &dyn std::fmt::Display) {
        shard.errors.increment(1);
        let now = self.started.elapsed().as_secs() + LOG_EVERY_SECS;
        let last = self.last_log.load(Ordering::Relaxed);
        if now >= last + LOG_EVERY_SECS
            && self
                .last_log
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(
                %error,
                suppressed,
                "rate-limit backend failed; on_backend_error applies"
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One call of the decision script on `key`, its reply read by `read`, within
    /// `timeout`: a success closes `shard`'s breaker; a failure (an error, a reply not
    /// understood, no answer in time) is described for [`call_failed`](Self::call_failed).
    pub(super) async fn decide_in_redis<T>(
        &self,
        shard: &Shard,
        settings: &RedisSettings,
        key: &str,
        args: &[String],
        read: impl FnOnce(&[i64]) -> Result<T, StoreError>,
    ) -> Result<T, String> {
        let span = redis_span(1);
        let decided = self.pool.decide(settings, key, args);
        let answer = within(settings.timeout, decided)
            .instrument(span.clone())
            .await
            .and_then(|reply| {
                let read = read(&reply).map_err(|error| error.to_string())?;
                shard.breaker.succeeded();
                Ok(read)
            });
        if let Err(error) = &answer {
            span.record("error.type", error.as_str());
        }
        answer
    }

    /// [`decide_in_redis`](Self::decide_in_redis), and on a failure the failure counted
    /// ([`call_failed`](Self::call_failed)) and `fallback`'s decision instead.
    pub(super) async fn decide_or_else(
        self: &Arc<Self>,
        shard: &Shard,
        settings: &RedisSettings,
        key: &str,
        args: &[String],
        read: impl FnOnce(&[i64]) -> Result<Decision, StoreError>,
        fallback: impl FnOnce(&Self) -> Decision,
    ) -> Decision {
        match self.decide_in_redis(shard, settings, key, args, read).await {
            Ok(decision) => decision,
            Err(failure) => {
                self.call_failed(shard, settings, &failure);
                fallback(self)
            }
        }
    }

    /// A call to Redis for `shard` failed: the breaker counts it, it is reported, and on a
    /// cluster the slot table is read again soon.
    pub(super) fn call_failed(
        self: &Arc<Self>,
        shard: &Shard,
        settings: &RedisSettings,
        failure: &str,
    ) {
        shard.breaker.failed(
            shard.breaker.now(),
            settings.breaker_failures,
            settings.breaker_cooldown,
        );
        self.report(shard, &failure);
        self.refresh_shards(true);
    }

    /// On a cluster, reads the slot table again in the background when it is due: on the
    /// first decision, every [`SHARDS_EVERY_SECS`], and at most once a second after a
    /// failure (`failed`).
    pub(super) fn refresh_shards(self: &Arc<Self>, failed: bool) {
        let now = self.started.elapsed().as_secs();
        let every = if failed { 1 } else { SHARDS_EVERY_SECS };
        if !self.shards.refresh_due(now, every) {
            return;
        }
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            let settings = inner.settings.load_full();
            let wait = settings.timeout.max(Duration::from_millis(250));
            if let Some(reply) = inner.pool.cluster_slots(&settings, wait).await {
                inner.shards.update(&reply);
                inner.pool.slots_changed();
            }
        });
    }
}

/// A client span for one call of the decision script deciding `buckets` buckets, under the
/// decision's span (target `tollgate::decision`, DEBUG, like it): the Redis round trip in
/// the request's trace. Disabled, costing a callsite check, when nobody takes it.
pub(super) fn redis_span(buckets: usize) -> tracing::Span {
    tracing::debug_span!(
        target: "tollgate::decision",
        "redis",
        otel.name = "EVALSHA",
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = "EVALSHA",
        ratelimit.buckets = buckets,
        error.type = tracing::field::Empty,
    )
}
