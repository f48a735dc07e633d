//! The RLQS stream: an Envoy's usage reports in, its buckets' assignments out — and other
//! Envoys' too, whenever a report moves the division of a bucket they share. A task ticks
//! every second to renew assignments, return departed Envoys' shares and follow reloads.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::bucket_key::key_of;
use super::division::{Action, Allowance, Bucket, EnvoyId, Tuning};
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    BucketAction, bucket_action,
};
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::grpc::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::grpc::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket, rate_limit_strategy};
use crate::rlqs_table::{RlqsBoard, RlqsBucket, RlqsEnvoy, RlqsFile};
use tollgate::Limits;
use tollgate::store::Store;

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
}

/// Every bucket and stream.
struct State {
    buckets: HashMap<String, Entry>,
    outboxes: HashMap<EnvoyId, mpsc::Sender<Result<RateLimitQuotaResponse, Status>>>,
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
}

impl<St: Store> Quotas<St> {
    pub(crate) fn new(limits: Limits<St>, bounds: Bounds, board: RlqsBoard) -> Arc<Quotas<St>> {
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
                let (allowance, rule) = self.allowance(&route, &client);
                Entry {
                    bucket: Bucket::new(allowance),
                    rule,
                    ids: HashMap::new(),
                }
            });
            entry.ids.insert(envoy, id);
            match elapsed {
                Some(elapsed) => entry.bucket.report(envoy, requests, elapsed, now),
                // No interval (a first report): a subscription, demand unknown.
                None => entry.bucket.report(envoy, 0, Duration::from_secs(1), now),
            }
            for (to, action) in entry.bucket.divide(now, &tuning) {
                if let Some(id) = entry.ids.get(&to) {
                    sends.push((to, bucket_action(id.clone(), action, tuning.ttl)));
                }
            }
        }
        deliver(&mut state, sends);
        Ok(())
    }

    /// Every second: renewals, departed shares returned, reloads followed (a bucket whose
    /// rule is gone is abandoned; one whose limit changed is divided anew).
    fn tick(&self) {
        let file = self.file();
        let tuning = Tuning {
            ttl: file.assignment_ttl,
            ..Tuning::default()
        };
        let now = self.now();
        let mut state = self.state.lock();
        let mut sends = Vec::new();
        let keys: Vec<String> = state.buckets.keys().cloned().collect();
        for key in keys {
            let (route, client) = match key.rsplit_once('/') {
                Some((route, client)) => (route.to_owned(), client.to_owned()),
                None => (String::new(), key.clone()),
            };
            let (allowance, rule) = self.allowance(&route, &client);
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
            if entry.bucket.allowance() != allowance {
                entry.bucket.set_allowance(allowance);
            }
            for (to, action) in entry.bucket.divide(now, &tuning) {
                if let Some(id) = entry.ids.get(&to) {
                    sends.push((to, bucket_action(id.clone(), action, tuning.ttl)));
                }
            }
            if entry.bucket.is_idle() {
                state.buckets.remove(&key);
            }
        }
        deliver(&mut state, sends);
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
                RlqsBucket {
                    key: key.clone(),
                    rule: entry.rule.clone(),
                    envoys,
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

/// Sends each Envoy its actions, one response per Envoy; a stream whose outbox is full
/// is ended (it cannot keep up) rather than waited for.
fn deliver(state: &mut State, sends: Vec<(EnvoyId, BucketAction)>) {
    let mut by_envoy: HashMap<EnvoyId, Vec<BucketAction>> = HashMap::new();
    for (to, action) in sends {
        let kind = match &action.bucket_action {
            Some(bucket_action::BucketAction::AbandonAction(_)) => "abandon",
            Some(bucket_action::BucketAction::QuotaAssignmentAction(assignment)) => {
                match assignment
                    .rate_limit_strategy
                    .as_ref()
                    .and_then(|strategy| strategy.strategy.as_ref())
                {
                    Some(rate_limit_strategy::Strategy::TokenBucket(_)) => "token_bucket",
                    _ => "allow_all",
                }
            }
            None => "none",
        };
        metrics::counter!("tollgate_rlqs_assignments_total", "action" => kind).increment(1);
        by_envoy.entry(to).or_default().push(action);
    }
    for (to, actions) in by_envoy {
        let Some(outbox) = state.outboxes.get(&to) else {
            continue;
        };
        let response = RateLimitQuotaResponse {
            bucket_action: actions,
        };
        if outbox.try_send(Ok(response)).is_err() {
            let _ = outbox.try_send(Err(Status::resource_exhausted(
                "assignments were not read in time",
            )));
            state.outboxes.remove(&to);
        }
    }
}

/// An action for bucket `id`.
fn bucket_action(id: BucketId, action: Action, ttl: Duration) -> BucketAction {
    let ttl = prost_types::Duration::try_from(ttl).ok();
    let assign = |strategy| {
        bucket_action::BucketAction::QuotaAssignmentAction(bucket_action::QuotaAssignmentAction {
            assignment_time_to_live: ttl,
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })
    };
    let action = match action {
        Action::Assign(share) => assign(rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
            max_tokens: share.max_tokens,
            tokens_per_fill: Some(share.tokens_per_fill),
            fill_interval: prost_types::Duration::try_from(share.fill_interval).ok(),
        })),
        Action::AllowAll => assign(rate_limit_strategy::Strategy::BlanketRule(
            rate_limit_strategy::BlanketRule::AllowAll.into(),
        )),
        Action::Abandon => {
            bucket_action::BucketAction::AbandonAction(bucket_action::AbandonAction {})
        }
    };
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(action),
    }
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

/// Ticks `quotas` every second until it is the last holder.
pub(crate) async fn tick<St: Store>(quotas: Arc<Quotas<St>>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if Arc::strong_count(&quotas) == 1 {
            return;
        }
        quotas.tick();
    }
}
