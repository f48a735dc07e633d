//! Hybrid mode (`[store] sync = "local"`): decide locally, settle with Redis in batches.
//!
//! Plain periodic sync — each instance counts locally and pushes its increments every
//! interval (Limitador's `redis_cached`, Kong's `sync_rate`) — over-admits: every instance
//! spends against a view that does not include the others' unpushed increments, and a
//! measurement at 1000/s found +13.1 % over the limit at a 50 ms interval. Hybrid mode
//! pushes *before* it spends instead: an instance **leases** tokens from Redis — one
//! `EVALSHA` of the decision script in mode `l` charges them there, atomically with the
//! request that asked — and then spends them without a round trip. So:
//!
//! - **A lease is a share.** It is `min(left, cap)`, where `left` is what the bucket's
//!   tightest quota still holds and `cap`, the instance's share, is one `sync_interval`'s
//!   worth of the quota's rate divided by the number of instances sharing the Redis (each
//!   announces itself every two seconds in `<key_prefix>{instances}`). So the instances
//!   together lease at most one interval of refill at a time. (A share of `left / N`
//!   instead shrinks geometrically near empty — a call per step — which at 1.5× the limit
//!   cost six times the calls.) When nothing is left, Redis refuses.
//! - **A refusal is repeated locally.** When Redis refuses (GCRA knows when the next
//!   token is due), the instance refuses that bucket locally until then, and for at least
//!   one `sync_interval` (at most half the time the bucket takes to refill, so that the
//!   refill is not lost); so a client 20× over its limit costs about one Redis call per
//!   instance per interval, not one per request.
//! - **Rules too slow to lease** — fewer than one token per instance per `sync_interval`,
//!   such as `6/hour` — and the window algorithms are decided by Redis on every request
//!   (with the local refusal above for GCRA).
//!
//! # The bound
//!
//! Every token spent locally was charged in Redis first, so a bucket never admits more
//! than a single strict limiter would, except for tokens leased *before* a span of time
//! and spent *within* it: at most one lease per instance, `instances × cap ≤ rate ×
//! sync_interval` tokens. Over any span, hybrid admits at most the strict limit plus one
//! `sync_interval` of the rate (at `1000/s` and 100 ms: 100 tokens); over a long run, no
//! more than the limit. A fresh client's burst spread over every instance is bounded by
//! the burst itself. (The instance count comes from the heartbeat. An instance that
//! joins leases nothing until its second heartbeat, two seconds after its first: by then
//! the others have had a heartbeat of their own since it announced itself, and divide by
//! the new count. Until then its requests are decided by Redis one by one.)
//!
//! # Settlements, and when Redis fails
//!
//! Every `sync_interval` a background task sends, in one pipeline per Redis node, the
//! buckets' settlements: leases of buckets idle for ten intervals (at least a second)
//! given back, and the requests admitted while Redis could not be reached (by
//! `on_backend_error`, after the instance's leases ran out) charged — even past empty.
//! A settlement Redis did not apply is sent again at the next round: admissions are
//! never dropped. If no answer comes, returned tokens are taken as returned and the
//! charge is sent again unchanged, under the same sequence number, which Redis applies
//! once (it keeps each instance's last on the bucket): a lost reply never gives tokens
//! back twice, nor charges twice.
//!
//! # Late replies
//!
//! A request waits `timeout` for its lease call, then is decided by `on_backend_error`.
//! But the call went out: on a slow link Redis still runs it — charges the request and
//! grants a lease — after the request stopped waiting. Its reply is still awaited, for
//! up to a second (the connection's reply timeout is at least that in hybrid mode): the
//! lease is kept, and the request's charge credited against what the fallback admitted.
//! Dropping late replies instead reserved shares nobody spent and charged requests
//! twice: under replies 100 ms late, hybrid mode refused 29 % of the budget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use super::super::scripts::{LeaseTerms, decision_from, lease_args, leased_from, script_args};
use super::super::shards::Shard;
use super::super::{Inner, OwnedRequest, RedisFuture};
use super::leases::{Outcome, Settlement, Verdict};
use super::{HEARTBEAT_EVERY_NANOS, PEER_TTL_MICROS};
use crate::Quota;
use crate::clock::{Timestamp, duration_nanos};
use crate::config::RedisSettings;
use crate::store::{CheckMode, CheckRequest};

/// The most tokens one instance leases at once for `quotas`: one `interval`'s worth of
/// the tightest rate, divided among `peers` instances (0: do not lease).
pub(super) fn lease_cap(quotas: &[Quota], interval: Duration, peers: u64) -> u64 {
    if peers == 0 {
        return 0;
    }
    let interval = duration_nanos(interval);
    quotas
        .iter()
        .map(|quota| interval / quota.interval_nanos().max(1))
        .min()
        .map_or(0, |tokens| tokens / peers)
}

/// How long a lease call's reply is still waited for after its request gave up on it
/// (and was decided by `on_backend_error`): as long as a renewal counts as in flight.
const LATE_REPLY_WAIT: Duration = Duration::from_secs(1);

/// Settlements for one Redis node (on a cluster, routed by the slot of the first).
struct Batch {
    node: Option<(String, u16)>,
    slot: u16,
    settlements: Vec<Settlement>,
}

/// How long a refusal from Redis is repeated locally at least: one `interval`, but no
/// longer than half the time the tightest quota takes to refill from empty (beyond, the
/// refill would overflow the bucket and be lost to every instance).
fn refusal_hold(quotas: &[Quota], interval: Duration) -> Duration {
    let half_refill = quotas
        .iter()
        .map(|quota| quota.capacity_nanos() / 2)
        .min()
        .unwrap_or(0);
    interval.min(Duration::from_nanos(half_refill))
}

/// Leases of buckets idle this long are given back.
fn idle_after(interval: Duration) -> Duration {
    (interval * 10).max(Duration::from_secs(1))
}

impl Inner {
    /// A GCRA consume or peek in hybrid mode: from the lease if it can be, else through
    /// Redis (renewing the lease).
    pub(in crate::store::redis) fn check_hybrid(
        self: &Arc<Self>,
        request: &CheckRequest<'_>,
        key: String,
        settings: Arc<RedisSettings>,
        shard: Arc<Shard>,
    ) -> RedisFuture {
        let hybrid = &self.hybrid;
        let caller_time = self.caller_time.load(Ordering::Relaxed);
        hybrid.saw(request.now);
        if !caller_time {
            self.start_sync();
        }
        let lease = match hybrid.leases.decide(&key, request) {
            Verdict::Local(decision) => {
                hybrid.decided_locally.increment(1);
                return Box::pin(std::future::ready(Ok(decision)));
            }
            Verdict::Remote { lease } => lease,
        };
        hybrid.decided_by_redis.increment(1);
        let owned = OwnedRequest::new(request);
        if !shard
            .breaker
            .allows(shard.breaker.now(), settings.breaker_cooldown)
        {
            let decision = self.hybrid_fallback(&key, &owned, &settings, lease);
            return Box::pin(std::future::ready(Ok(decision)));
        }
        let now = caller_time.then_some(request.now);
        let peek = request.mode == CheckMode::Peek;
        let args = if peek {
            script_args(
                now,
                CheckMode::Peek,
                request.cost,
                request.strict,
                request.algorithm,
                request.quotas,
                request.shaping,
            )
        } else {
            // Not before the others count this instance (see the bound above).
            let peers = if hybrid.known_to_others() {
                hybrid.peers()
            } else {
                0
            };
            let terms = LeaseTerms {
                shares: peers,
                cap: if lease {
                    lease_cap(request.quotas, settings.sync_interval, peers)
                } else {
                    0
                },
                ..LeaseTerms::default()
            };
            lease_args(now, request.cost, request.strict, request.quotas, terms)
        };
        let inner = Arc::clone(self);
        if peek {
            // A peek charges nothing: a late reply changes nothing either.
            return Box::pin(async move {
                let read =
                    |reply: &[i64]| decision_from(reply, owned.algorithm, &owned.quotas, None);
                let fallback =
                    |inner: &Inner| inner.hybrid_fallback(&key, &owned, &settings, false);
                Ok(inner
                    .decide_or_else(&shard, &settings, &key, &args, read, fallback)
                    .await)
            });
        }
        Box::pin(async move {
            let mut call = {
                let (inner, settings, key) =
                    (Arc::clone(&inner), Arc::clone(&settings), key.clone());
                Box::pin(async move { inner.pool.decide(&settings, &key, &args).await })
            };
            let hold = refusal_hold(&owned.quotas, settings.sync_interval);
            let failure = match tokio::time::timeout(settings.timeout, &mut call).await {
                Ok(Ok(reply)) => match leased_from(&reply, &owned.quotas) {
                    Ok(answer) => {
                        shard.breaker.succeeded();
                        inner
                            .hybrid
                            .leases
                            .leased(&key, &owned.as_check(), &answer, hold);
                        return Ok(answer.decision);
                    }
                    Err(error) => error.to_string(),
                },
                Ok(Err(error)) => error.to_string(),
                Err(_) => {
                    // The call went out and Redis may still run it: it charges the
                    // request and grants a lease whether or not anyone waits. Waiting
                    // for the late reply keeps both (see `Leases::answered_late`).
                    inner.call_failed(&shard, &settings, "no answer within the timeout");
                    let owned = Arc::new(owned);
                    let decision = inner.hybrid_fallback(&key, &owned, &settings, false);
                    let late = Arc::clone(&inner);
                    let request = Arc::clone(&owned);
                    tokio::spawn(async move {
                        let reply = tokio::time::timeout(LATE_REPLY_WAIT, call).await;
                        let leases = &late.hybrid.leases;
                        let answer = match reply {
                            Ok(Ok(reply)) => leased_from(&reply, &request.quotas).ok(),
                            _ => None,
                        };
                        match answer {
                            Some(answer) => {
                                leases.answered_late(&key, &request.as_check(), &answer, hold);
                            }
                            _ if lease => leases.renewal_failed(&key),
                            _ => {}
                        }
                    });
                    return Ok(decision);
                }
            };
            inner.call_failed(&shard, &settings, &failure);
            Ok(inner.hybrid_fallback(&key, &owned, &settings, lease))
        })
    }

    /// `on_backend_error`'s decision, its admission kept to charge in Redis later;
    /// `renewal_over`: this request's lease renewal has ended, another may start.
    fn hybrid_fallback(
        &self,
        key: &str,
        owned: &OwnedRequest,
        settings: &RedisSettings,
        renewal_over: bool,
    ) -> crate::decision::Decision {
        let leases = &self.hybrid.leases;
        if renewal_over {
            leases.renewal_failed(key);
        }
        let decision = self.fallback(owned, settings.on_backend_error, settings.breaker_cooldown);
        if decision.allowed() && owned.mode != CheckMode::Peek {
            leases.admitted_without_redis(key, &owned.as_check());
        }
        decision
    }

    /// Starts the background settlement task, once: every `sync_interval` it runs a
    /// round, until the store is dropped.
    fn start_sync(self: &Arc<Self>) {
        if self.hybrid.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            // The first round at once: the instance announces itself (and counts the
            // others) before it leases anything.
            loop {
                let interval = {
                    let Some(inner) = weak.upgrade() else {
                        return;
                    };
                    if let Some(now) = inner.hybrid.now() {
                        inner.sync_round(now).await;
                    }
                    inner.settings.load().sync_interval
                };
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// One settlement round as of `now`: the heartbeat when due, then every due
    /// settlement, in one pipeline per Redis node.
    pub(in crate::store::redis) async fn sync_round(self: &Arc<Self>, now: Timestamp) {
        let settings = self.settings.load_full();
        self.heartbeat(&settings, now).await;
        let due = self
            .hybrid
            .leases
            .due(now, idle_after(settings.sync_interval));
        if due.is_empty() {
            return;
        }
        let caller_time = self.caller_time.load(Ordering::Relaxed);
        // One batch per node: on a cluster, by the master each key's shard names.
        let mut batches: Vec<Batch> = Vec::new();
        for settlement in due {
            let (node, slot) = if self.pool.is_cluster() {
                let shard = self.shards.for_key(&settlement.key);
                (
                    shard.master.clone(),
                    super::super::shards::slot_of(&settlement.key),
                )
            } else {
                (None, 0)
            };
            match batches
                .iter_mut()
                .find(|batch| node.is_some() && batch.node == node)
            {
                Some(batch) => batch.settlements.push(settlement),
                None => batches.push(Batch {
                    node,
                    slot,
                    settlements: vec![settlement],
                }),
            }
        }
        let mut outcomes = Vec::new();
        for Batch {
            slot,
            settlements: batch,
            ..
        } in batches
        {
            let calls: Vec<(String, Vec<String>)> = batch
                .iter()
                .map(|settlement| {
                    let terms = LeaseTerms {
                        returned: settlement.returned,
                        pending: settlement.pending,
                        mark: (settlement.sequence > 0)
                            .then_some((self.hybrid.id.as_str(), settlement.sequence)),
                        ..LeaseTerms::default()
                    };
                    let args = lease_args(
                        caller_time.then_some(now),
                        0,
                        settlement.strict,
                        &settlement.quotas,
                        terms,
                    );
                    (settlement.key.clone(), args)
                })
                .collect();
            let sent = self.pool.pipeline(&settings, &calls, slot);
            let wait = settings.timeout.max(Duration::from_millis(250));
            let results = match tokio::time::timeout(wait, sent).await {
                Ok(Ok(values)) if values.len() == batch.len() => values
                    .iter()
                    .map(|value| match value {
                        Value::ServerError(_) => Outcome::Refused,
                        _ => Outcome::Reached,
                    })
                    .collect(),
                _ => vec![Outcome::Unknown; batch.len()],
            };
            if results.contains(&Outcome::Refused) {
                // NOSCRIPT (a restarted server), MOVED (a stale slot table): load the
                // script again and read the table; the settlement goes again next round.
                let _ = tokio::time::timeout(wait, self.pool.load_script(&settings)).await;
                self.refresh_shards(true);
            }
            outcomes.extend(batch.into_iter().zip(results));
        }
        self.hybrid.leases.settled(&outcomes);
    }

    /// Announces this instance and counts the others, every two seconds.
    async fn heartbeat(&self, settings: &RedisSettings, now: Timestamp) {
        let hybrid = &self.hybrid;
        let nanos = now.as_unix_nanos().max(1);
        let last = hybrid.last_heartbeat.load(Ordering::Relaxed);
        if last != 0 && nanos < last.saturating_add(HEARTBEAT_EVERY_NANOS) {
            return;
        }
        hybrid.last_heartbeat.store(nanos, Ordering::Relaxed);
        let key = format!("{}{{instances}}", settings.key_prefix);
        let at = if self.caller_time.load(Ordering::Relaxed) {
            (nanos / 1_000).to_string()
        } else {
            String::new()
        };
        let call = async {
            let mut connection = self.pool.connection(settings).await?;
            hybrid
                .heartbeat
                .key(&key)
                .arg(&hybrid.id)
                .arg(at)
                .arg(PEER_TTL_MICROS)
                .invoke_async::<u64>(&mut connection)
                .await
        };
        let wait = settings.timeout.max(Duration::from_millis(250));
        if let Ok(Ok(count)) = tokio::time::timeout(wait, call).await {
            let count = count.max(1);
            hybrid.heartbeats.fetch_add(1, Ordering::Relaxed);
            hybrid.peers.store(count, Ordering::Relaxed);
            hybrid.instances.set(count as f64);
        }
    }
}
