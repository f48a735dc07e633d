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
                                    if bucket != enforced.bucket || enforced.assignments == 0 {
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
        // Requests arrive evenly over the interval: the bucket refills between them.
        let step = elapsed.as_secs_f64() / requests.max(1) as f64;
        if requests == 0
            && let Some((per_second, max)) = enforced.bucket
        {
            enforced.tokens = (enforced.tokens + per_second * elapsed.as_secs_f64()).min(max);
        }
        for _ in 0..requests {
            if let Some((per_second, max)) = enforced.bucket {
                enforced.tokens = (enforced.tokens + per_second * step).min(max);
            }
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
                self.allowed = self.allowed.saturating_add(1);
                self.admitted_total += 1;
            } else {
                self.denied = self.denied.saturating_add(1);
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

/// The rates (tokens a second) of the token buckets `envoys` enforce.
fn rates(envoys: &[Envoy]) -> Vec<f64> {
    envoys
        .iter()
        .filter_map(Envoy::share)
        .map(|(rate, _)| rate)
        .collect()
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

impl Outcome {
    /// What was admitted in all, asserted within the bound.
    fn within_bound(&self) -> u64 {
        let total: u64 = self.admitted.iter().sum();
        assert!(total as f64 <= self.bound, "{self:?}");
        total
    }
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
    let (service, address) = service(&dir, RULES).await;
    let id = bucket(&[("name", "api")]);
    let mut envoys = Vec::new();
    for _ in 0..4 {
        envoys.push(Envoy::connect(address, id.clone()).await);
    }
    // Skewed: one busy Envoy, three quiet ones; all offer more than the budget together.
    let outcome = run(&mut envoys, &[1000, 20, 20, 20], 16, 100.0).await;
    let total = outcome.within_bound();
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

    // The admin listener shows the bucket, its Envoys busiest first, and their shares.
    let shown: serde_json::Value =
        serde_json::from_str(&crate::support::get(service.admin, "/rlqs", &[]).await.body).unwrap();
    assert_eq!(shown["enabled"], true);
    let api = &shown["buckets"][0];
    assert_eq!(
        (api["key"].as_str(), api["rule"].as_str()),
        (Some("api"), Some("api")),
        "{shown}"
    );
    let shown_envoys = api["envoys"].as_array().unwrap();
    assert_eq!(shown_envoys.len(), 4, "{shown}");
    assert!(
        shown_envoys[0]["demand"].as_f64().unwrap() > 500.0,
        "{shown}"
    );
    assert!(
        shown_envoys[0]["tokens_per_second"].as_f64().unwrap() >= 60.0,
        "{shown}"
    );

    let page = crate::support::get(service.admin, "/", &[]).await.body;
    assert!(
        page.contains("Envoys sharing budgets (RLQS)") && page.contains("<td>api</td><td>api</td>"),
        "the page shows the bucket"
    );

    // The demand shifts to Envoy 1: within a few intervals it has the larger share.
    let outcome = run(&mut envoys, &[0, 1000, 20, 20], 8, 100.0).await;
    outcome.within_bound();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_envoys_share_evenly_and_a_departed_envoys_share_returns_after_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let (_service, address) = service(&dir, RULES).await;
    let id = bucket(&[("name", "api")]);
    let mut envoys = Vec::new();
    for _ in 0..8 {
        envoys.push(Envoy::connect(address, id.clone()).await);
    }
    let outcome = run(&mut envoys, &[200; 8], 12, 100.0).await;
    outcome.within_bound();
    let shares = rates(&envoys);
    assert_eq!(shares.len(), 8, "every Envoy has a share");
    // Even (12.5 each), give or take the twentieth of the rate (5) a share must move
    // before it is re-sent.
    assert!(
        shares.iter().all(|share| (7.5..=17.5).contains(share)),
        "even: {shares:?}"
    );
    assert!(shares.iter().sum::<f64>() <= 100.0 + 1e-6, "{shares:?}");

    // Seven leave abruptly (their streams drop); the last gets the budget once their
    // assignments (2 s) have run out — not before.
    let mut last = envoys.pop().unwrap();
    let departed: f64 = rates(&envoys).iter().sum();
    drop(envoys);
    let mut alone = vec![last];
    run(&mut alone, &[200], 4, 100.0).await;
    let soon = alone[0].share().unwrap().0;
    assert!(
        soon <= 100.0 - departed + 1e-6,
        "the departed shares ({departed}) still count until they expire: {soon}"
    );
    run(&mut alone, &[200], 12, 100.0).await;
    last = alone.pop().unwrap();
    let later = last.share().unwrap().0;
    assert!(later >= 90.0, "the whole rate returns: {later}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_rules_allow_all_and_a_rule_removed_by_a_reload_is_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[limits]\napi = \"100/s\"\nhealth = { unlimited = true }\n[rlqs]\nassignment_ttl = \"2s\"\n";
    let (_service, address) = service(&dir, rules).await;
    let mut limited = vec![Envoy::connect(address, bucket(&[("name", "api")])).await];
    let mut free = vec![Envoy::connect(address, bucket(&[("name", "health")])).await];
    run(&mut limited, &[10], 4, 100.0).await;
    run(&mut free, &[10], 2, 100.0).await;
    assert!(
        limited[0].share().is_some(),
        "a token bucket for a limited rule"
    );
    {
        let enforced = free[0].enforced.lock().unwrap();
        assert!(
            enforced.bucket.is_none() && enforced.assignments >= 1,
            "allow-all: {enforced:?}"
        );
    }
    // The api rule goes; within a reload and a tick the Envoy is told to abandon it.
    std::fs::write(
        dir.path().join("gateway.toml"),
        "[limits]\nweb = \"100/s\"\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !limited[0].enforced.lock().unwrap().abandoned {
        assert!(
            Instant::now() < deadline,
            "no abandon_action after the rule was removed"
        );
        run(&mut limited, &[10], 1, 100.0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reports_are_refused_with_a_status_and_huge_counts_change_nothing_bad() {
    let dir = tempfile::tempdir().unwrap();
    let (service, address) = service(&dir, RULES).await;
    // Each of these ends its stream with INVALID_ARGUMENT, naming what was wrong.
    for (id, wrong) in [
        (BucketId::default(), "no entries"),
        (bucket(&[("env", "prod")]), "no \"name\" entry"),
        (bucket(&[("name", "")]), "empty"),
    ] {
        let envoy = Envoy::connect(address, id).await;
        let status = ended(&envoy).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(wrong), "{status:?}");
    }
    // A first report without a domain.
    let mut envoy = Envoy::connect(address, bucket(&[("name", "api")])).await;
    envoy.report(false).await;
    // (The first report named one; a stream whose first report did not:)
    let (reports, outgoing) = mpsc::channel(4);
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitQuotaServiceClient::new(channel);
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    reports
        .send(RateLimitQuotaUsageReports {
            domain: String::new(),
            bucket_quota_usages: Vec::new(),
        })
        .await
        .unwrap();
    let status = answers.message().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

    // A flood of buckets on one stream: refused past the bound, the service unharmed.
    let (reports, outgoing) = mpsc::channel(4);
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    let flood = (0..10_001)
        .map(|n| BucketQuotaUsage {
            bucket_id: Some(bucket(&[("name", &format!("flood{n}"))])),
            time_elapsed: Some(prost_types::Duration::try_from(Duration::from_secs(1)).unwrap()),
            num_requests_allowed: 1,
            num_requests_denied: 0,
        })
        .collect();
    reports
        .send(RateLimitQuotaUsageReports {
            domain: "envoy".into(),
            bucket_quota_usages: flood,
        })
        .await
        .unwrap();
    let status = loop {
        match answers.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the flood was not refused"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    // A report from a newer Envoy, with fields this server does not know: they are
    // skipped, and the report is read for what it says.
    let newer = report_with_unknown_fields(address, bucket(&[("name", "newer")])).await;
    assert!(
        newer
            .bucket_action
            .iter()
            .any(|action| action.bucket_id == Some(bucket(&[("name", "newer")]))),
        "{newer:?}"
    );

    // Counts at the top of u64: demand is huge, the shares stay within the rate.
    let mut envoys = vec![
        envoy,
        Envoy::connect(address, bucket(&[("name", "api")])).await,
    ];
    envoys[0].allowed = u64::MAX;
    envoys[0].denied = u64::MAX;
    run(&mut envoys, &[10, 10], 4, 100.0).await;
    let sum: f64 = rates(&envoys).iter().sum();
    assert!(sum > 0.0 && sum <= 100.0 + 1e-6, "{sum}");
    // Still serving.
    assert_eq!(
        crate::support::get(service.admin, "/livez", &[])
            .await
            .status,
        200
    );
}

/// A usage report as a newer Envoy might send it: the known fields, and two more.
#[derive(Clone, PartialEq, prost::Message)]
struct NewerUsageReports {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(message, repeated, tag = "2")]
    bucket_quota_usages: Vec<BucketQuotaUsage>,
    #[prost(string, tag = "77")]
    future_text: String,
    #[prost(uint64, tag = "78")]
    future_count: u64,
}

/// Sends one report for `id` carrying unknown fields on a stream of its own, and returns
/// the first answer.
async fn report_with_unknown_fields(
    address: SocketAddr,
    id: BucketId,
) -> tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse {
    let report = NewerUsageReports {
        domain: "envoy".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(id),
            time_elapsed: None,
            num_requests_allowed: 0,
            num_requests_denied: 0,
        }],
        future_text: "a field from the future".into(),
        future_count: 7,
    };
    // Sent through a codec of the newer type, so the wire carries the unknown fields.
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let (reports, outgoing) = mpsc::channel(1);
    reports.send(report).await.unwrap();
    let codec = tonic_prost::ProstCodec::<
        NewerUsageReports,
        tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse,
    >::default();
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
    );
    let mut answers = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(outgoing)),
            path,
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    let answer = tokio::time::timeout(Duration::from_secs(5), answers.message())
        .await
        .expect("an answer within 5 s")
        .unwrap()
        .expect("an answer, not the end of the stream");
    drop(reports);
    answer
}

/// How `envoy`'s stream ended (within 5 s).
async fn ended(envoy: &Envoy) -> tonic::Status {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = envoy.ended.lock().unwrap().clone() {
            return status;
        }
        assert!(Instant::now() < deadline, "the stream was not ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two gateways sharing `redis` under `prefix`, two Envoys on each (A's first), for bucket
/// `api`: the gateways (each with its config's directory) and the Envoys.
async fn two_gateways(
    redis: &crate::support::redis::RedisServer,
    prefix: &str,
) -> ([(ServiceProcess, tempfile::TempDir); 2], Vec<Envoy>) {
    let rules = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}:\"\n\
         timeout = \"500ms\"\n{RULES}",
        redis.url()
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, address_a) = service(&dir_a, &rules).await;
    let (b, address_b) = service(&dir_b, &rules).await;
    let id = bucket(&[("name", "api")]);
    let mut envoys = Vec::new();
    for address in [address_a, address_a, address_b, address_b] {
        envoys.push(Envoy::connect(address, id.clone()).await);
    }
    ([(a, dir_a), (b, dir_b)], envoys)
}

/// What happens to a run's Envoys halfway (an Envoy leaves, a gateway dies).
type Halfway = Box<dyn FnOnce(&mut Vec<Envoy>) + Send>;

/// One measured row: `envoys` offer `load` for 32 intervals — or for 16, then `halfway`
/// changes them (an Envoy leaves, a gateway dies) and the rest offer `after` for 16 more.
/// Asserts the bound; returns offered, admitted and the bound, each ÷ what was allowed.
async fn measure_row(
    envoys: &mut Vec<Envoy>,
    load: &[u64],
    halfway: Option<(Halfway, Vec<u64>)>,
) -> (f64, f64, f64) {
    let started = Instant::now();
    let rounds = if halfway.is_some() { 16 } else { 32 };
    let first = run(envoys, load, rounds, 100.0).await;
    let (mut admitted, mut bound) = (first.admitted.iter().sum::<u64>(), first.bound);
    if let Some((change, after)) = halfway {
        change(envoys);
        let second = run(envoys, &after, 16, 100.0).await;
        admitted += second.admitted.iter().sum::<u64>();
        bound += second.bound;
    }
    let seconds = started.elapsed().as_secs_f64();
    let allowed = 100.0 * seconds + 20.0;
    assert!(admitted as f64 <= bound, "{admitted} > {bound}");
    let offered: u64 = load.iter().sum();
    (
        offered as f64 * seconds / allowed,
        admitted as f64 / allowed,
        bound / allowed,
    )
}

/// RELIABILITY.md's RLQS table: admitted ÷ allowed for 2, 4 and 8 Envoys under even and
/// skewed demand, and with an Envoy leaving abruptly halfway; each run asserts the bound.
/// `RLQS_MEASURE=1 cargo test -p tollgate-server --test integration rlqs_measure -- --nocapture`
/// (about a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_measure() {
    if std::env::var("RLQS_MEASURE").is_err() {
        eprintln!("rlqs_measure: set RLQS_MEASURE=1 to measure (about a minute)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_service, address) = service(&dir, RULES).await;
    eprintln!("| Envoys | demand | offered ÷ allowed | admitted ÷ allowed | bound ÷ allowed |");
    eprintln!("|---|---|---|---|---|");
    let mut name = 0;
    for (count, skewed, leave) in [
        (2, false, false),
        (2, true, false),
        (4, false, false),
        (4, true, false),
        (8, false, false),
        (8, true, false),
        (4, false, true),
    ] {
        name += 1;
        let id = bucket(&[("name", "api"), ("run", &name.to_string())]);
        // Each run its own bucket: `[rlqs] key` is empty, so every run's key is "api";
        // a fresh bucket needs the old Envoys' shares to have expired.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut envoys = Vec::new();
        for _ in 0..count {
            envoys.push(Envoy::connect(address, id.clone()).await);
        }
        // Together they offer twice the rate: evenly, or one Envoy 90 % of it.
        let load: Vec<u64> = (0..count)
            .map(|i| match (skewed, i) {
                (false, _) => 200 / count as u64,
                (true, 0) => 180,
                (true, _) => 20 / (count as u64 - 1),
            })
            .collect();
        // One Envoy's stream drops halfway; the others carry its demand.
        let halfway = leave.then(|| {
            let drop_one: Halfway = Box::new(|envoys| {
                envoys.pop();
            });
            (drop_one, load[..count - 1].to_vec())
        });
        let (offered, admitted, bound) = measure_row(&mut envoys, &load, halfway).await;
        eprintln!(
            "| {count} | {}{} | {offered:.2} | {admitted:.2} | {bound:.2} |",
            if skewed {
                "skewed (90 % on one)"
            } else {
                "even"
            },
            if leave { ", one leaves halfway" } else { "" },
        );
        drop(envoys);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_lowers_the_rate_re_divides_it_within_a_second_or_two() {
    let dir = tempfile::tempdir().unwrap();
    let (_service, address) = service(&dir, RULES).await;
    let id = bucket(&[("name", "api")]);
    let mut envoys = vec![
        Envoy::connect(address, id.clone()).await,
        Envoy::connect(address, id).await,
    ];
    run(&mut envoys, &[200, 200], 8, 100.0).await;
    let sum = |envoys: &[Envoy]| -> f64 { rates(envoys).iter().sum() };
    assert!(sum(&envoys) > 80.0, "{}", sum(&envoys));
    std::fs::write(
        dir.path().join("gateway.toml"),
        RULES.replace("100/s", "40/s"),
    )
    .unwrap();
    // A reload (within a second) and a tick (a second): the shares sum to the new rate.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sum(&envoys) > 40.0 + 1e-6 {
        assert!(
            Instant::now() < deadline,
            "still {} after the reload",
            sum(&envoys)
        );
        run(&mut envoys, &[200, 200], 1, 40.0).await;
    }
    assert!(
        sum(&envoys) >= 30.0,
        "and most of it given out: {}",
        sum(&envoys)
    );
}

/// The shares `envoys` enforce, summed (tokens a second).
fn total_share(envoys: &[Envoy]) -> f64 {
    rates(envoys).iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_divide_one_budget_by_demand_and_a_dead_ones_part_returns() {
    let Some(redis) = crate::support::redis::RedisServer::start("rlqs across two gateways") else {
        return;
    };
    let ([(a, _dir_a), (b, _dir_b)], mut envoys) = two_gateways(&redis, "rlqs-two").await;
    // The busy Envoy is gateway A's: A's part, and that Envoy's share, grow to most of it.
    let outcome = run(&mut envoys, &[1000, 20, 20, 20], 24, 100.0).await;
    let total = outcome.within_bound();
    assert!(
        total as f64 >= 0.6 * 100.0 * 6.0,
        "the budget is used: {outcome:?}"
    );
    let busy = envoys[0].share().expect("the busy Envoy has a share").0;
    assert!(
        busy >= 50.0,
        "the busy Envoy gets most: {:?}",
        rates(&envoys)
    );
    assert!(total_share(&envoys) <= 100.0 + 1e-6, "{:?}", rates(&envoys));
    let shown = |admin| async move {
        let body = crate::support::get(admin, "/rlqs", &[]).await.body;
        let shown: serde_json::Value = serde_json::from_str(&body).unwrap();
        shown["buckets"][0].clone()
    };
    let (on_a, on_b) = (shown(a.admin).await, shown(b.admin).await);
    assert_eq!(
        (on_a["gateways"].as_u64(), on_b["gateways"].as_u64()),
        (Some(2), Some(2))
    );
    let part = |bucket: &serde_json::Value| bucket["part_per_second"].as_f64().unwrap();
    assert!(
        part(&on_a) >= 50.0 && part(&on_a) + part(&on_b) <= 100.0 + 1e-6,
        "A's part is the larger: {on_a} {on_b}"
    );

    // The demand moves to gateway B's first Envoy: the parts follow, never overlapping.
    let outcome = run(&mut envoys, &[0, 20, 1000, 20], 32, 100.0).await;
    outcome.within_bound();
    let (was_busy, now_busy) = (envoys[0].share().unwrap().0, envoys[2].share().unwrap().0);
    assert!(
        now_busy > 50.0 && now_busy > was_busy * 2.0,
        "the shares moved across gateways: {:?}",
        rates(&envoys)
    );
    assert!(total_share(&envoys) <= 100.0 + 1e-6, "{:?}", rates(&envoys));

    // Gateway B dies with its Envoys: its claim lapses (the assignments' 2 s and two more)
    // and A's Envoys get the budget back.
    drop(b);
    envoys.truncate(2);
    let deadline = Instant::now() + Duration::from_secs(15);
    while total_share(&envoys) < 90.0 {
        assert!(
            Instant::now() < deadline,
            "B's part never came back: {:?}",
            rates(&envoys)
        );
        run(&mut envoys, &[1000, 20], 4, 100.0).await;
    }
    let on_a = shown(a.admin).await;
    assert_eq!(on_a["gateways"].as_u64(), Some(1), "{on_a}");
}

/// RELIABILITY.md's rows for two gateways dividing one budget through Redis:
/// `RLQS_MEASURE=1 cargo test -p tollgate-server --test integration rlqs_measure_across -- --nocapture`
/// (about a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_measure_across() {
    if std::env::var("RLQS_MEASURE").is_err() {
        eprintln!("rlqs_measure_across: set RLQS_MEASURE=1 to measure (about a minute)");
        return;
    }
    let Some(redis) = crate::support::redis::RedisServer::start("rlqs measure across") else {
        return;
    };
    eprintln!(
        "| gateways × Envoys | demand | offered ÷ allowed | admitted ÷ allowed | bound ÷ allowed |"
    );
    eprintln!("|---|---|---|---|---|");
    for (run_number, (skewed, dies)) in [(false, false), (true, false), (false, true)]
        .into_iter()
        .enumerate()
    {
        // Each run on keys of its own: a fresh budget, no claims left from the last.
        let ([(_a, _dir_a), b], mut envoys) =
            two_gateways(&redis, &format!("measure{run_number}")).await;
        // Twice the rate: evenly, or 90 % on one of gateway A's Envoys.
        let load: Vec<u64> = if skewed {
            vec![180, 7, 7, 6]
        } else {
            vec![50; 4]
        };
        // Gateway B dies halfway with its Envoys; A's carry the demand. (B lives to the end
        // of the row otherwise: only the dying branch moves it.)
        let halfway: Option<(Halfway, Vec<u64>)> = if dies {
            let die: Halfway = Box::new(move |envoys| {
                drop(b);
                envoys.truncate(2);
            });
            Some((die, vec![100, 100]))
        } else {
            None
        };
        let (offered, admitted, bound) = measure_row(&mut envoys, &load, halfway).await;
        eprintln!(
            "| 2 × 2 | {}{} | {offered:.2} | {admitted:.2} | {bound:.2} |",
            if skewed {
                "skewed (90 % on one of A's)"
            } else {
                "even"
            },
            if dies { ", gateway B dies halfway" } else { "" },
        );
    }
}
