//! Envoy's rate limit quota service, played against by simulated Envoys built from the
//! protos: each streams its usage reports every interval, enforces the token bucket it is
//! assigned as Envoy's filter does (a changed bucket starts full), and offers a load of its
//! own. The admitted total stays within the bound, the budget follows demand, a departed
//! Envoy's share returns, a removed rule is abandoned, and bad reports are refused.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_server::grpc::proto::envoy::r#type::v3::rate_limit_strategy::Strategy;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaUsageReports,
};

use crate::support::{ServiceProcess, logged_address};

/// How often the simulated Envoys report.
const INTERVAL: Duration = Duration::from_millis(250);

/// What one bucket's assignment is at a simulated Envoy.
#[derive(Clone, Debug, Default)]
struct Enforced {
    /// Tokens a second and at most, or `None` for allow-all; `abandoned` once told to.
    bucket: Option<(f64, f64)>,
    tokens: f64,
    abandoned: bool,
    assignments: u32,
    /// Tokens given by the buckets' starting full: `max_tokens` at each change.
    refilled: f64,
    /// Requests admitted with no assignment (the filter's default: allow).
    unassigned: u64,
}

/// A simulated Envoy on one stream, for one bucket.
struct Envoy {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    enforced: Arc<Mutex<Enforced>>,
    /// The stream's end status, if the server ended it.
    ended: Arc<Mutex<Option<tonic::Status>>>,
    allowed: u64,
    denied: u64,
    admitted_total: u64,
    last_report: Instant,
    id: BucketId,
}

fn bucket(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

impl Envoy {
    async fn connect(address: SocketAddr, id: BucketId) -> Envoy {
        let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, outgoing) = mpsc::channel(16);
        let enforced = Arc::new(Mutex::new(Enforced::default()));
        let ended = Arc::new(Mutex::new(None));
        let mut answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
            .await
            .unwrap()
            .into_inner();
        let (applied, end) = (Arc::clone(&enforced), Arc::clone(&ended));
        tokio::spawn(async move {
            loop {
                match answers.message().await {
                    Ok(Some(response)) => {
                        for action in response.bucket_action {
                            let mut enforced = applied.lock().unwrap();
                            match action.bucket_action {
                                Some(BucketAction::QuotaAssignmentAction(assignment)) => {
                                    let strategy = assignment
                                        .rate_limit_strategy
                                        .and_then(|strategy| strategy.strategy);
                                    let bucket = match strategy {
                                        Some(Strategy::TokenBucket(bucket)) => {
                                            let interval = bucket.fill_interval.unwrap();
                                            let seconds = interval.seconds as f64
                                                + f64::from(interval.nanos) / 1e9;
                                            let per_second =
                                                f64::from(bucket.tokens_per_fill.unwrap())
                                                    / seconds;
                                            Some((per_second, f64::from(bucket.max_tokens)))
                                        }
                                        _ => None,
                                    };
                                    // A changed bucket starts full, as Envoy's does.
                                    if bucket != enforced.bucket {
                                        let full = bucket.map_or(0.0, |(_, max)| max);
                                        enforced.tokens = full;
                                        enforced.refilled += full;
                                        enforced.bucket = bucket;
                                        enforced.assignments += 1;
                                    }
                                    enforced.abandoned = false;
                                }
                                Some(BucketAction::AbandonAction(_)) => enforced.abandoned = true,
                                None => {}
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(status) => {
                        *end.lock().unwrap() = Some(status);
                        return;
                    }
                }
            }
        });
        let mut envoy = Envoy {
            reports,
            enforced,
            ended,
            allowed: 0,
            denied: 0,
            admitted_total: 0,
            last_report: Instant::now(),
            id,
        };
        envoy.report(true).await;
        envoy
    }

    /// Offers `requests` over `elapsed`, admitting what its token bucket allows (all, with
    /// no assignment yet: Envoy's no-assignment behaviour here is to allow).
    fn offer(&mut self, requests: u64, elapsed: Duration) {
        let mut enforced = self.enforced.lock().unwrap();
        if let Some((per_second, max)) = enforced.bucket {
            enforced.tokens = (enforced.tokens + per_second * elapsed.as_secs_f64()).min(max);
        }
        for _ in 0..requests {
            let admit = match enforced.bucket {
                // Allow-all, or no assignment yet (the filter's default is to allow).
                None => {
                    if enforced.assignments == 0 {
                        enforced.unassigned += 1;
                    }
                    true
                }
                Some(_) if enforced.tokens >= 1.0 => {
                    enforced.tokens -= 1.0;
                    true
                }
                Some(_) => false,
            };
            if admit {
                self.allowed += 1;
                self.admitted_total += 1;
            } else {
                self.denied += 1;
            }
        }
    }

    async fn report(&mut self, first: bool) {
        let elapsed = self.last_report.elapsed().max(Duration::from_millis(1));
        self.last_report = Instant::now();
        let usage = BucketQuotaUsage {
            bucket_id: Some(self.id.clone()),
            time_elapsed: Some(prost_types::Duration::try_from(elapsed).unwrap()),
            num_requests_allowed: self.allowed,
            num_requests_denied: self.denied,
        };
        self.allowed = 0;
        self.denied = 0;
        let _ = self
            .reports
            .send(RateLimitQuotaUsageReports {
                domain: if first { "envoy".into() } else { String::new() },
                bucket_quota_usages: vec![usage],
            })
            .await;
    }

    fn share(&self) -> Option<(f64, f64)> {
        self.enforced.lock().unwrap().bucket
    }
}

/// The service serving RLQS with `rules`, and its RLQS address.
async fn service(dir: &tempfile::TempDir, rules: &str) -> (ServiceProcess, SocketAddr) {
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, rules).unwrap();
    let service = ServiceProcess::start(
        &[
            "--config",
            &config.display().to_string(),
            "--rlqs",
            "127.0.0.1:0",
        ],
        &[],
    );
    let address = logged_address(&service, "(RLQS, gRPC) on ").await;
    (service, address)
}

/// What a run admitted, and what the bound allows for it.
#[derive(Debug)]
struct Outcome {
    admitted: Vec<u64>,
    /// The rate over the run's time, plus every token a bucket's starting full gave, plus
    /// what was admitted before any assignment.
    bound: f64,
}

/// Runs `envoys` for `rounds` reporting intervals, each offering `load[i]` requests a
/// second, under a rule of `rate` a second.
async fn run(envoys: &mut [Envoy], load: &[u64], rounds: u32, rate: f64) -> Outcome {
    let before: Vec<u64> = envoys.iter().map(|envoy| envoy.admitted_total).collect();
    let given = |envoys: &[Envoy]| -> f64 {
        envoys
            .iter()
            .map(|envoy| {
                let enforced = envoy.enforced.lock().unwrap();
                enforced.refilled + enforced.unassigned as f64
            })
            .sum()
    };
    let given_before = given(envoys);
    let started = Instant::now();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.tick().await;
    let mut last = Instant::now();
    for _ in 0..rounds {
        tick.tick().await;
        let elapsed = last.elapsed();
        last = Instant::now();
        for (envoy, rate) in envoys.iter_mut().zip(load) {
            let requests = (*rate as f64 * elapsed.as_secs_f64()).round() as u64;
            envoy.offer(requests, elapsed);
            envoy.report(false).await;
        }
    }
    let admitted = envoys
        .iter()
        .zip(before)
        .map(|(envoy, before)| envoy.admitted_total - before)
        .collect();
    Outcome {
        admitted,
        // The tokens a full bucket starts with are spent in the round after the change.
        bound: rate * (started.elapsed().as_secs_f64() + INTERVAL.as_secs_f64())
            + (given(envoys) - given_before),
    }
}

const RULES: &str =
    "[limits]\napi = { rate = \"100/s\", burst = 20 }\n[rlqs]\nassignment_ttl = \"2s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_budget_divided_by_demand_stays_within_the_bound_and_follows_a_shift() {
    let dir = tempfile::tempdir().unwrap();
    let (_service, address) = service(&dir, RULES).await;
    let id = bucket(&[("name", "api")]);
    let mut envoys = Vec::new();
    for _ in 0..4 {
        envoys.push(Envoy::connect(address, id.clone()).await);
    }
    // Skewed: one busy Envoy, three quiet ones; all offer more than the budget together.
    let outcome = run(&mut envoys, &[1000, 20, 20, 20], 16, 100.0).await;
    let total: u64 = outcome.admitted.iter().sum();
    assert!(total as f64 <= outcome.bound, "{outcome:?}");
    assert!(
        total as f64 >= 0.7 * 100.0 * 4.0,
        "the budget is used: {outcome:?}"
    );
    let busy = envoys[0]
        .share()
        .expect("the busy Envoy has an assignment")
        .0;
    let quiet = envoys[1]
        .share()
        .expect("a quiet Envoy has an assignment")
        .0;
    assert!(
        busy >= 60.0,
        "the busy Envoy gets most: {busy} against {quiet}"
    );
    assert!(quiet >= 1.0, "a quiet Envoy keeps a floor: {quiet}");

    // The demand shifts to Envoy 1: within a few intervals it has the larger share.
    let outcome = run(&mut envoys, &[0, 1000, 20, 20], 8, 100.0).await;
    assert!(
        outcome.admitted.iter().sum::<u64>() as f64 <= outcome.bound,
        "{outcome:?}"
    );
    let (was_busy, now_busy) = (envoys[0].share().unwrap().0, envoys[1].share().unwrap().0);
    assert!(
        now_busy > was_busy * 2.0,
        "shares moved: {was_busy} then {now_busy}"
    );
    // Shares in force never sum past the rate.
    let sum: f64 = envoys
        .iter()
        .filter_map(|envoy| envoy.share())
        .map(|(rate, _)| rate)
        .sum();
    assert!(sum <= 100.0 + 1e-6, "{sum}");
}
