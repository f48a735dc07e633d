//! A fixed-count load generator for the gRPC front end, which `bench/grpc.sh` runs: `STREAMS`
//! requests in flight at once on one HTTP/2 connection (as Envoy multiplexes its calls), each
//! stream sending its next request when its answer arrives, until `REQUESTS` have been
//! answered. Prints `decisions/s p50-µs p99-µs over-limit`.
//!
//! ```sh
//! cargo run --release --example bench_grpc -- 127.0.0.1:8081 decide 16 100000
//! cargo run --release --example bench_grpc -- 127.0.0.1:8081 health 16 100000   # the baseline
//! ```
//!
//! `decide`: `ShouldRateLimit` for domain `edge`, descriptor `(remote_address, <ip>)` over
//! 10,000 addresses. `health`: `grpc.health.v1.Health/Check`, the same round trip doing no
//! rate-limit work — the baseline measured in the same run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// How long any one run may take, whatever the count: the loop is bounded in time too.
const TIME_LIMIT: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (address, mode, streams, requests, ca) = match args.as_slice() {
        [_, address, mode, streams, requests] => (address, mode, streams, requests, None),
        [_, address, mode, streams, requests, ca] => (address, mode, streams, requests, Some(ca)),
        _ => {
            eprintln!("usage: grpc_load ADDR decide|health STREAMS REQUESTS [CA_FILE: over TLS]");
            std::process::exit(2);
        }
    };
    let streams: u64 = streams.parse().expect("STREAMS is a number");
    let requests: u64 = requests.parse().expect("REQUESTS is a number");
    let health = match mode.as_str() {
        "decide" => false,
        "health" => true,
        other => {
            eprintln!("mode {other}: decide or health");
            std::process::exit(2);
        }
    };
    let channel = match ca {
        None => Channel::from_shared(format!("http://{address}")).unwrap(),
        Some(ca) => {
            let port = address.rsplit(':').next().unwrap_or_default();
            let ca =
                tonic::transport::Certificate::from_pem(std::fs::read(ca).expect("the CA file"));
            Channel::from_shared(format!("https://localhost:{port}"))
                .unwrap()
                .tls_config(
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(ca)
                        .domain_name("localhost"),
                )
                .unwrap()
        }
    }
    .connect()
    .await
    .expect("the gateway's gRPC listener is up");
    let issued = Arc::new(AtomicU64::new(0));
    let over = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let (channel, issued, over) = (channel.clone(), Arc::clone(&issued), Arc::clone(&over));
        tasks.push(tokio::spawn(async move {
            let mut limiter = RateLimitServiceClient::new(channel.clone());
            let mut probe = HealthClient::new(channel);
            let mut latencies = Vec::new();
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= requests || started.elapsed() > TIME_LIMIT {
                    return latencies;
                }
                let sent = Instant::now();
                if health {
                    probe
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await
                        .unwrap();
                } else {
                    let address = Ipv4Addr::from(0x0a00_0000 + (n % 10_000) as u32);
                    let answer = limiter
                        .should_rate_limit(RateLimitRequest {
                            domain: "edge".into(),
                            descriptors: vec![RateLimitDescriptor {
                                entries: vec![Entry {
                                    key: "remote_address".into(),
                                    value: address.to_string(),
                                }],
                                ..Default::default()
                            }],
                            hits_addend: 0,
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    if answer.overall_code() == Code::OverLimit {
                        over.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies.push(sent.elapsed().as_nanos() as u64);
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64 / 1_000.0;
    println!(
        "{:.0} {:.1} {:.1} {}",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.5),
        at(0.99),
        over.load(Ordering::Relaxed)
    );
}
