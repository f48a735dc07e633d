//! A fixed-count load generator for the RLQS front end, which `server/loadtest/rlqs.sh`
//! runs: `STREAMS` Envoys, each on a stream of its own reporting `BUCKETS` buckets per
//! report, as fast as the server takes them, until `REPORTS` reports have been sent in all
//! (bounded in time too). Each stream reads its assignments as Envoy does. Prints
//! `reports/s bucket-usages/s assignments`.
//!
//! ```sh
//! cargo run --release -p tollgate-server --example rlqs_load -- 127.0.0.1:18081 8 10 200000
//! ```
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_stream::wrappers::ReceiverStream;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tollgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaUsageReports,
};

/// How long any one run may take, whatever the count.
const TIME_LIMIT: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, address, streams, buckets, reports] = args.as_slice() else {
        eprintln!("usage: rlqs_load ADDR STREAMS BUCKETS REPORTS");
        std::process::exit(2);
    };
    let streams: u64 = streams.parse().expect("STREAMS is a number");
    let buckets: u64 = buckets.parse().expect("BUCKETS is a number");
    let reports: u64 = reports.parse().expect("REPORTS is a number");
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .expect("the RLQS listener answers");
    let sent = Arc::new(AtomicU64::new(0));
    let assignments = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for stream in 0..streams {
        let mut client = RateLimitQuotaServiceClient::new(channel.clone());
        let (sent, assignments) = (Arc::clone(&sent), Arc::clone(&assignments));
        tasks.push(tokio::spawn(async move {
            let (outbox, outgoing) = tokio::sync::mpsc::channel(4);
            let mut answers = client
                .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
                .await
                .expect("a stream opens")
                .into_inner();
            let counted = Arc::clone(&assignments);
            tokio::spawn(async move {
                while let Ok(Some(response)) = answers.message().await {
                    counted.fetch_add(response.bucket_action.len() as u64, Ordering::Relaxed);
                }
            });
            let usages: Vec<BucketQuotaUsage> = (0..buckets)
                .map(|bucket| BucketQuotaUsage {
                    bucket_id: Some(BucketId {
                        bucket: [
                            ("name".to_owned(), "api".to_owned()),
                            ("client".to_owned(), format!("c{bucket}")),
                        ]
                        .into_iter()
                        .collect(),
                    }),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    // Demand that moves: the shares are divided anew now and then.
                    num_requests_allowed: 10 + (stream * 7 + bucket) % 13,
                    num_requests_denied: stream % 3,
                })
                .collect();
            let mut first = true;
            while sent.fetch_add(1, Ordering::Relaxed) < reports && started.elapsed() < TIME_LIMIT {
                let report = RateLimitQuotaUsageReports {
                    domain: if first { "envoy".into() } else { String::new() },
                    bucket_quota_usages: usages.clone(),
                };
                first = false;
                if outbox.send(report).await.is_err() {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let done = sent.load(Ordering::Relaxed).min(reports);
    println!(
        "{:.0} {:.0} {}",
        done as f64 / seconds,
        (done * buckets) as f64 / seconds,
        assignments.load(Ordering::Relaxed)
    );
}
