//! The RLQS stream: an Envoy's usage reports in, its buckets' assignments out — and other
//! Envoys' too, whenever a report moves the division of a bucket they share. A task ticks
//! every second to renew assignments, return departed Envoys' shares and follow reloads —
//! and, with several gateways sharing a Redis, to claim this gateway's part of each rule
//! (`across`) before dividing it.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::across::{self, Part};
use super::actions::{Outboxes, bucket_action, deliver};
use super::bucket_key::key_of;
use super::division::{Action, Allowance, Bucket, EnvoyId, Tuning};
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::rlqs_table::{RlqsBoard, RlqsBucket, RlqsEnvoy, RlqsFile};
use tollgate::Limits;
use tollgate::store::{RedisStore, ShareClaim, Store};

/// Assignments waiting for one Envoy's stream at most; past that the stream is too slow
/// to read them and is ended.
const OUTBOX: usize = 256;

/// Bounds on what Envoys may make the server hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Buckets one stream may report.
    pub(crate) buckets_per_stream: usize,
    /// Buckets across all streams.
    pub(crate) buckets: usize,
    /// Streams at once.
    pub(crate) streams: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            buckets_per_stream: 10_000,
            buckets: 100_000,
            streams: 1_000,
        }
    }
}

/// One bucket: its division, the rule it was divided under, and each Envoy's bucket id (to
/// answer in the id it used).
struct Entry {
    bucket: Bucket,
    rule: Option<String>,
    ids: HashMap<EnvoyId, BucketId>,
    /// What the rule allows (the division's allowance, unless gateways share it).
    allowed: Allowance,
    /// With gateways sharing the rule: this gateway's part, as last granted.
    part: Option<Part>,
    /// Shared, and no part known yet: nothing is divided (Envoy applies its
    /// `no_assignment_behavior`) until the next tick claims one.
    pending: bool,
}

/// Every bucket and stream.
struct State {
    buckets: HashMap<String, Entry>,
    outboxes: Outboxes,
    /// The keys each stream reported.
    reported: HashMap<EnvoyId, Vec<String>>,
}

/// The RLQS service: shared by every stream.
pub(crate) struct Quotas<St: Store> {
    limits: Limits<St>,
    state: Mutex<State>,
    started: Instant,
    next_envoy: AtomicU64,
    bounds: Bounds,
    board: RlqsBoard,
    /// Where gateways sharing the rules claim their parts, if they do.
    shared: Option<RedisStore>,
    /// Gateways dividing a rule, as the last claims counted them (at least 1).
    gateways: AtomicU32,
    /// Whether the last claims failed (logged once per outage).
    claims_failing: AtomicBool,
    /// Woken when a bucket arrives whose part must be claimed.
    arrived: tokio::sync::Notify,
}

impl<St: Store> Quotas<St> {
    pub(crate) fn new(
        limits: Limits<St>,
        bounds: Bounds,
        board: RlqsBoard,
        shared: Option<RedisStore>,
    ) -> Arc<Quotas<St>> {
        Arc::new(Quotas {
            limits,
            state: Mutex::new(State {
                buckets: HashMap::new(),
                outboxes: HashMap::new(),
                reported: HashMap::new(),
            }),
            started: Instant::now(),
            next_envoy: AtomicU64::new(1),
            bounds,
            board,
            shared,
            gateways: AtomicU32::new(1),
            claims_failing: AtomicBool::new(false),
            arrived: tokio::sync::Notify::new(),
        })
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn file(&self) -> RlqsFile {
        self.limits
            .rules()
            .extension::<RlqsFile>()
            .cloned()
            .unwrap_or_default()
    }

    /// What the live rules allow for `(route, client)`, and the rule's name.
    fn allowance(&self, route: &str, client: &str) -> (Allowance, Option<String>) {
        let rules = self.limits.rules();
        let Some(rule) = rules.resolve(route, client) else {
            return (Allowance::AllowAll, None);
        };
        let name = Some(rule.name().to_owned());
        if rule.is_unlimited() || rule.is_shadow() || rule.quotas().is_empty() {
            return (Allowance::AllowAll, name);
        }
        let per_second = rule
            .quotas()
            .iter()
            .map(|quota| {
                f64::from(quota.rate().count()) / quota.rate().period().as_secs_f64().max(1e-9)
            })
            .fold(f64::INFINITY, f64::min);
        let burst = rule
            .quotas()
            .iter()
            .map(|quota| quota.burst())
            .min()
            .unwrap_or(1);
        (Allowance::Rate { per_second, burst }, name)
    }

    /// One report from `envoy`: each bucket's demand noted and its division redone.
    fn report(&self, envoy: EnvoyId, reports: RateLimitQuotaUsageReports) -> Result<(), Status> {
        let file = self.file();
        let tuning = Tuning {
            ttl: file.assignment_ttl,
            ..Tuning::default()
        };
        let now = self.now();
        let mut resolved = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in reports.bucket_quota_usages {
            let id = usage
                .bucket_id
                .ok_or_else(|| Status::invalid_argument("a bucket usage has no bucket_id"))?;
            let (route, client) = key_of(&id.bucket, &file.key)
                .map_err(|error| Status::invalid_argument(error.to_string()))?;
            let elapsed = usage
                .time_elapsed
                .and_then(|elapsed| Duration::try_from(elapsed).ok())
                .filter(|elapsed| !elapsed.is_zero());
            let requests = usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied);
            resolved.push((route, client, id, elapsed, requests));
        }
        metrics::counter!("tollgate_rlqs_reports_total").increment(1);
        let mut state = self.state.lock();
        let mut sends: Vec<(EnvoyId, BucketAction)> = Vec::new();
        for (route, client, id, elapsed, requests) in resolved {
            let key = if route.is_empty() {
                client.clone()
            } else {
                format!("{route}/{client}")
            };
            let known = state.buckets.contains_key(&key);
            let reported = state.reported.entry(envoy).or_default();
            if !reported.contains(&key) {
                if reported.len() >= self.bounds.buckets_per_stream {
                    return Err(Status::resource_exhausted(format!(
                        "a stream may report {} buckets at most",
                        self.bounds.buckets_per_stream
                    )));
                }
                reported.push(key.clone());
            }
            if !known && state.buckets.len() >= self.bounds.buckets {
                return Err(Status::resource_exhausted(format!(
                    "the server holds {} buckets at most",
                    self.bounds.buckets
                )));
            }
            let entry = state.buckets.entry(key).or_insert_with(|| {
                let (allowed, rule) = self.allowance(&route, &client);
                // Shared with other gateways: no share before this one's part is claimed.
                let pending = self.shared.is_some() && matches!(allowed, Allowance::Rate { .. });
                let nothing = Allowance::Rate {
                    per_second: 0.0,
                    burst: 0,
                };
                Entry {
                    bucket: Bucket::new(if pending { nothing } else { allowed }),
                    rule,
                    ids: HashMap::new(),
                    allowed,
                    part: None,
                    pending,
                }
            });
            entry.ids.insert(envoy, id);
            match elapsed {
                Some(elapsed) => entry.bucket.report(envoy, requests, elapsed, now),
                // No interval (a first report): a subscription, demand unknown.
                None => entry.bucket.report(envoy, 0, Duration::from_secs(1), now),
            }
            if entry.pending {
                self.arrived.notify_one();
                continue;
            }
            for (to, action) in entry.bucket.divide(now, &tuning) {
                if let Some(id) = entry.ids.get(&to) {
                    sends.push((to, bucket_action(id.clone(), action, tuning.ttl)));
                }
            }
        }
        deliver(&mut state.outboxes, sends);
        Ok(())
    }

    /// Every second: reloads followed (a bucket whose rule is gone is abandoned; one whose
    /// limit changed is divided anew), this gateway's parts claimed when gateways share
    /// the rules, then renewals and departed shares returned.
    async fn tick(&self) {
        let tuning = Tuning {
            ttl: self.file().assignment_ttl,
            ..Tuning::default()
        };
        let claims = self.follow_rules(&tuning);
        let parts = match &self.shared {
            Some(store) if !claims.is_empty() => self.claim(store, &claims, &tuning).await,
            _ => None,
        };
        self.divide(&tuning, &claims, parts, Scope::All);
    }

    /// Between ticks: the parts of buckets that arrived since the last, claimed at once, so
    /// their Envoys are not left to their `no_assignment_behavior` until the next tick.
    async fn claim_arrivals(&self) {
        let Some(store) = &self.shared else {
            return;
        };
        let tuning = Tuning {
            ttl: self.file().assignment_ttl,
            ..Tuning::default()
        };
        let now = self.now();
        let claims: Vec<(String, ShareClaim)> = {
            let state = self.state.lock();
            state
                .buckets
                .iter()
                .filter(|(_, entry)| entry.pending)
                .filter_map(|(key, entry)| {
                    across::claim(key, entry.allowed, &entry.bucket, None, now, tuning.ttl)
                        .map(|claim| (key.clone(), claim))
                })
                .collect()
        };
        if claims.is_empty() {
            return;
        }
        let parts = self.claim(store, &claims, &tuning).await;
        self.divide(&tuning, &claims, parts, Scope::Claimed);
    }

    /// Each bucket's rule read again: those whose rule is gone or replaced abandoned; what
    /// the others' rules allow noted. The claims to make, when gateways share the rules.
    fn follow_rules(&self, tuning: &Tuning) -> Vec<(String, ShareClaim)> {
        let now = self.now();
        let mut state = self.state.lock();
        let mut sends = Vec::new();
        let mut claims = Vec::new();
        let keys: Vec<String> = state.buckets.keys().cloned().collect();
        for key in keys {
            let (route, client) = match key.rsplit_once('/') {
                Some((route, client)) => (route.to_owned(), client.to_owned()),
                None => (String::new(), key.clone()),
            };
            let (allowed, rule) = self.allowance(&route, &client);
            let Some(entry) = state.buckets.get_mut(&key) else {
                continue;
            };
            if entry.rule.is_some() && entry.rule != rule {
                // Its rule was removed or replaced: Envoy forgets the bucket and subscribes
                // again, to be divided under what now applies.
                for (to, id) in entry.ids.drain() {
                    sends.push((to, bucket_action(id, Action::Abandon, tuning.ttl)));
                }
                state.buckets.remove(&key);
                continue;
            }
            entry.allowed = allowed;
            if self.shared.is_some()
                && let Some(claim) = across::claim(
                    &key,
                    allowed,
                    &entry.bucket,
                    entry.part.as_ref(),
                    now,
                    tuning.ttl,
                )
            {
                claims.push((key, claim));
            }
        }
        deliver(&mut state.outboxes, sends);
        claims
    }

    /// This gateway's parts of the `claims`' rules, or `None` when Redis did not answer.
    async fn claim(
        &self,
        store: &RedisStore,
        claims: &[(String, ShareClaim)],
        tuning: &Tuning,
    ) -> Option<Vec<tollgate::store::SharePart>> {
        let asked: Vec<ShareClaim> = claims.iter().map(|(_, claim)| claim.clone()).collect();
        match store.claim_shares(&asked, &across::terms(tuning.ttl)).await {
            Ok(parts) => {
                metrics::counter!("tollgate_rlqs_claims_total", "outcome" => "claimed")
                    .increment(1);
                if self.claims_failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("RLQS: Redis answers again; gateways divide the rules anew");
                }
                let most = parts.iter().map(|part| part.instances).max().unwrap_or(1);
                self.gateways.store(most.max(1), Ordering::Relaxed);
                Some(parts)
            }
            Err(error) => {
                metrics::counter!("tollgate_rlqs_claims_total", "outcome" => "failed").increment(1);
                if !self.claims_failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        "RLQS: cannot claim this gateway's parts in Redis; keeping the last \
                         parts, then the rule divided by the gateways last counted"
                    );
                }
                None
            }
        }
    }

    /// The buckets of `scope` divided under what each may now hand out (with gateways
    /// sharing: this gateway's part as `parts` grant, or as it stands without Redis), and
    /// their Envoys told.
    fn divide(
        &self,
        tuning: &Tuning,
        claims: &[(String, ShareClaim)],
        parts: Option<Vec<tollgate::store::SharePart>>,
        scope: Scope,
    ) {
        let now = self.now();
        let mut state = self.state.lock();
        let gateways = self.gateways.load(Ordering::Relaxed);
        let granted: HashMap<&str, &tollgate::store::SharePart> = match &parts {
            Some(parts) => claims
                .iter()
                .zip(parts)
                .map(|((key, _), part)| (key.as_str(), part))
                .collect(),
            None => HashMap::new(),
        };
        let claimed: std::collections::HashSet<&str> =
            claims.iter().map(|(key, _)| key.as_str()).collect();
        let mut sends = Vec::new();
        let keys: Vec<String> = match scope {
            Scope::All => state.buckets.keys().cloned().collect(),
            Scope::Claimed => claims.iter().map(|(key, _)| key.clone()).collect(),
        };
        for key in keys {
            let Some(entry) = state.buckets.get_mut(&key) else {
                continue;
            };
            let allowance = if !claimed.contains(key.as_str()) {
                if entry.pending && matches!(entry.allowed, Allowance::Rate { .. }) {
                    // Arrived since the claims were made: its part comes with the next tick.
                    continue;
                }
                entry.part = None;
                entry.allowed
            } else if let Some(part) = granted.get(key.as_str()) {
                let part = across::granted(entry.allowed, part, now);
                entry.part = Some(part);
                part.allowance
            } else {
                across::without_redis(
                    entry.allowed,
                    entry.part.as_ref(),
                    gateways,
                    now,
                    tuning.ttl,
                )
            };
            entry.pending = false;
            if entry.bucket.allowance() != allowance {
                entry.bucket.set_allowance(allowance);
            }
            for (to, action) in entry.bucket.divide(now, tuning) {
                if let Some(id) = entry.ids.get(&to) {
                    sends.push((to, bucket_action(id.clone(), action, tuning.ttl)));
                }
            }
            if entry.bucket.is_idle() {
                state.buckets.remove(&key);
            }
        }
        deliver(&mut state.outboxes, sends);
        if scope == Scope::Claimed {
            return;
        }
        metrics::gauge!("tollgate_rlqs_buckets").set(state.buckets.len() as f64);
        let mut shown: Vec<RlqsBucket> = state
            .buckets
            .iter()
            .map(|(key, entry)| {
                let mut envoys: Vec<RlqsEnvoy> = entry
                    .bucket
                    .envoys()
                    .map(|(stream, demand, share)| RlqsEnvoy {
                        stream,
                        demand,
                        tokens_per_second: share.map(|share| share.per_second()),
                        max_tokens: share.map(|share| share.max_tokens),
                    })
                    .collect();
                envoys.sort_by(|a, b| b.demand.total_cmp(&a.demand));
                let part = entry.part.as_ref();
                RlqsBucket {
                    key: key.clone(),
                    rule: entry.rule.clone(),
                    envoys,
                    gateways: part.map(|part| part.gateways),
                    part_per_second: part.and_then(|part| match part.allowance {
                        Allowance::Rate { per_second, .. } => Some(per_second),
                        Allowance::AllowAll => None,
                    }),
                }
            })
            .collect();
        drop(state);
        shown.sort_by(|a, b| a.key.cmp(&b.key));
        self.board.replace(shown);
    }

    /// `envoy`'s stream ended: its shares stay counted until they expire.
    fn leave(&self, envoy: EnvoyId) {
        let mut state = self.state.lock();
        state.outboxes.remove(&envoy);
        for key in state.reported.remove(&envoy).unwrap_or_default() {
            if let Some(entry) = state.buckets.get_mut(&key) {
                entry.bucket.left(envoy);
                entry.ids.remove(&envoy);
            }
        }
        metrics::gauge!("tollgate_rlqs_streams").set(state.outboxes.len() as f64);
    }
}

/// Which buckets a division looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Every bucket (the tick).
    All,
    /// Those just claimed (arrivals between ticks).
    Claimed,
}

/// The gRPC service over shared [`Quotas`].
pub(crate) struct Service<St: Store>(pub(crate) Arc<Quotas<St>>);

type Assignments = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<St: Store> RateLimitQuotaService for Service<St> {
    type StreamRateLimitQuotasStream = Assignments;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Assignments>, Status> {
        let quotas = Arc::clone(&self.0);
        let envoy = quotas.next_envoy.fetch_add(1, Ordering::Relaxed);
        let (outbox, assignments) = mpsc::channel(OUTBOX);
        {
            let mut state = quotas.state.lock();
            if state.outboxes.len() >= quotas.bounds.streams {
                return Err(Status::resource_exhausted(format!(
                    "{} streams at most",
                    quotas.bounds.streams
                )));
            }
            state.outboxes.insert(envoy, outbox.clone());
            metrics::gauge!("tollgate_rlqs_streams").set(state.outboxes.len() as f64);
        }
        let mut reports = request.into_inner();
        tokio::spawn(async move {
            let mut domain: Option<String> = None;
            loop {
                let message = match reports.message().await {
                    Ok(Some(message)) => message,
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(envoy, %status, "an RLQS stream broke");
                        break;
                    }
                };
                // The domain comes with the first report; later ones may leave it out.
                if domain.is_none() {
                    if message.domain.is_empty() {
                        let _ = outbox
                            .send(Err(Status::invalid_argument(
                                "the first report names no domain",
                            )))
                            .await;
                        break;
                    }
                    domain = Some(message.domain.clone());
                }
                if let Err(status) = quotas.report(envoy, message) {
                    let _ = outbox.send(Err(status)).await;
                    break;
                }
            }
            quotas.leave(envoy);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(assignments),
        )))
    }
}

/// Ticks `quotas` every second until it is the last holder; between ticks, claims the
/// parts of buckets that arrive (at most every 50 ms).
pub(crate) async fn tick<St: Store>(quotas: Arc<Quotas<St>>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                if Arc::strong_count(&quotas) == 1 {
                    return;
                }
                quotas.tick().await;
            }
            () = quotas.arrived.notified() => {
                // A moment for the arrivals of one report (or several) to come together.
                tokio::time::sleep(Duration::from_millis(50)).await;
                quotas.claim_arrivals().await;
            }
        }
    }
}
