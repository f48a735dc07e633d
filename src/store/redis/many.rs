//! Several buckets decided together — a request's rule and the `also` limits it meets —
//! all taking their tokens or none.
//!
//! - **One server** (or Sentinel's master): every bucket in one call of the decision
//!   script, one round trip; the script peeks at each, and takes from each only if all
//!   admit, atomically.
//! - **A Redis Cluster**: a request's buckets live in different slots, so on different
//!   masters, and no script can span them. Each is taken at once (atomically, on its own
//!   master); if any refuses, those taken are given back. No limit ever admits past its
//!   budget; a request refused this way held the others' tokens for one round trip, in
//!   which another request meeting the same bucket may have been refused for want of them
//!   (at most its cost, for that one round trip).
//! - **Hybrid mode**: each bucket through its lease: looked at, then taken, one after the
//!   other — another request of this instance can come between the two, within hybrid
//!   mode's stated over-admission.
//!
//! When Redis cannot answer, `on_backend_error` decides every bucket, as for one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use tracing::Instrument as _;

use super::answer::within;
use super::scripts::{decision_from, many_args, script_args};
use super::{OwnedRequest, RedisStore};
use crate::config::{OnBackendError, RuleId, SyncMode};
use crate::decision::Decision;
use crate::store::{CheckMode, CheckRequest, ManyFuture, Store, StoreError};

impl RedisStore {
    /// [`Store::check_all`] for Redis: see the module docs.
    pub(super) fn decide_many<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        let inner = Arc::clone(&self.inner);
        let settings = inner.settings.load_full();
        let rules = inner.rules.load();
        let keys: Option<Vec<String>> = requests
            .iter()
            .map(|request| rules.bucket_key(&settings.key_prefix, request.bucket))
            .collect();
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let local = requests
            .iter()
            .any(|request| request.bucket.rule == RuleId::CALLER_DEFINED);
        let owned: Vec<OwnedRequest> = requests.iter().map(OwnedRequest::new).collect();
        let Some(keys) = keys.filter(|_| in_runtime && !local) else {
            return Box::pin(std::future::ready(Ok(self.fallback_all(&owned))));
        };
        if settings.sync == SyncMode::Local {
            return Box::pin(self.look_then_take(requests));
        }
        if inner.pool.is_cluster() {
            return Box::pin(self.take_then_give_back(requests));
        }
        Box::pin(async move {
            let shard = inner.shards.for_key(&keys[0]);
            if !shard
                .breaker
                .allows(shard.breaker.now(), settings.breaker_cooldown)
            {
                return Ok(self.fallback_all(&owned));
            }
            let caller_time = inner.caller_time.load(Ordering::Relaxed);
            let args = many_args(
                owned
                    .iter()
                    .map(|request| {
                        script_args(
                            caller_time.then_some(request.now),
                            request.mode,
                            request.cost,
                            request.strict,
                            request.algorithm,
                            &request.quotas,
                            &request.shaping,
                        )
                    })
                    .collect(),
            );
            let span = super::calls::redis_span(keys.len());
            let decided = inner.pool.decide_many(&settings, &keys, &args);
            let replies = within(settings.timeout, decided)
                .instrument(span.clone())
                .await
                .and_then(|replies| {
                    if replies.len() == owned.len() {
                        Ok(replies)
                    } else {
                        Err(format!(
                            "the decision script answered {} buckets of {}",
                            replies.len(),
                            owned.len()
                        ))
                    }
                });
            if let Err(error) = &replies {
                span.record("error.type", error.as_str());
            }
            let read = replies.and_then(|replies| {
                owned
                    .iter()
                    .zip(&replies)
                    .map(|(request, reply)| {
                        let held = matches!(request.mode, CheckMode::Consume | CheckMode::Session)
                            .then_some(&request.shaping);
                        decision_from(reply, request.algorithm, &request.quotas, held)
                            .map_err(|error| error.to_string())
                    })
                    .collect::<Result<Vec<Decision>, String>>()
            });
            match read {
                Ok(decisions) => {
                    shard.breaker.succeeded();
                    Ok(decisions)
                }
                Err(failure) => {
                    inner.call_failed(&shard, &settings, &failure);
                    Ok(self.fallback_all(&owned))
                }
            }
        })
    }

    /// Every bucket decided as `on_backend_error` says: all admitted, all refused, or all
    /// together in this instance's own buckets.
    fn fallback_all(&self, requests: &[OwnedRequest]) -> Vec<Decision> {
        let settings = self.inner.settings.load();
        match settings.on_backend_error {
            OnBackendError::Local => {
                self.inner.fallbacks.increment(1);
                let checks: Vec<CheckRequest<'_>> =
                    requests.iter().map(OwnedRequest::as_check).collect();
                self.inner.local.decide_all(&checks)
            }
            mode => requests
                .iter()
                .map(|request| {
                    self.inner
                        .fallback(request, mode, settings.breaker_cooldown)
                })
                .collect(),
        }
    }

    /// Hybrid mode: each bucket looked at through its lease, then (if all admit) taken.
    async fn look_then_take(
        &self,
        requests: &[CheckRequest<'_>],
    ) -> Result<Vec<Decision>, StoreError> {
        let consuming = requests.iter().any(|r| r.mode == CheckMode::Consume);
        if consuming {
            let looks: Vec<_> = requests
                .iter()
                .map(|request| {
                    self.check(CheckRequest {
                        mode: CheckMode::Peek,
                        ..*request
                    })
                })
                .collect();
            let looks = together(looks).await?;
            if !looks.iter().all(Decision::allowed) {
                return Ok(looks);
            }
        }
        together(
            requests
                .iter()
                .map(|request| self.check(*request))
                .collect(),
        )
        .await
    }

    /// A Redis Cluster: each bucket taken on its master at once; if any refuses, those
    /// taken are given back.
    async fn take_then_give_back(
        &self,
        requests: &[CheckRequest<'_>],
    ) -> Result<Vec<Decision>, StoreError> {
        let taken = together(
            requests
                .iter()
                .map(|request| self.check(*request))
                .collect(),
        )
        .await?;
        if taken.iter().all(Decision::allowed) {
            return Ok(taken);
        }
        let returns: Vec<_> = requests
            .iter()
            .zip(&taken)
            .filter(|(request, decision)| request.mode == CheckMode::Consume && decision.allowed())
            .map(|(request, _)| {
                self.check(CheckRequest {
                    mode: CheckMode::Refund,
                    ..*request
                })
            })
            .collect();
        if let Err(error) = together(returns).await {
            tracing::warn!(%error, "tokens taken for a request another limit refused were not all given back");
        }
        Ok(taken)
    }
}

/// Every one of `futures`, driven at once, in order; the first failure fails them all.
async fn together<F>(mut futures: Vec<F>) -> Result<Vec<Decision>, StoreError>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    let mut results: Vec<Option<Result<Decision, StoreError>>> =
        (0..futures.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, result) in futures.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match Pin::new(&mut *future).poll(cx) {
                    Poll::Ready(done) => *result = Some(done),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}
