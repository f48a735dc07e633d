//! An overloaded upstream behind the real gateway: goodput and latency with no limit, a
//! static concurrency cap set too high, and the adaptive limit: `cargo bench --bench adaptive`.
//!
//! The upstream has `WORKERS` (8) workers taking `SERVICE_MS` (20 ms) each, first come first
//! served — 400 requests/s of capacity, latency flat up to 8 in flight and growing beyond. An
//! open-loop generator (requests sent on a clock, whatever the answers) offers three times
//! that, 1,200/s, for `SECONDS` (8), through the gateway in this process on loopback. Judged
//! after the first 2 s (the adaptive limit's first probe and descent): goodput (200s that
//! arrived per second of the judged window), the p50/p99 of requests sent in it and admitted,
//! and how fast refusals came back; requests unanswered after 30 s count as failed. The unloaded
//! latency is measured first, one request at a time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

use tollgate_testkit::upstream;

use std::time::{Duration, Instant};

use upstream::quantile;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const WORKERS: usize = 8;
const SERVICE_MS: u64 = 20;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run(name: &str, rule: &str, upstream: std::net::SocketAddr, seconds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, format!("[limits]\n\"/\" = {rule}\n")).unwrap();
    let mut options = tollgate_server::Settings::new([&file]);
    options.listen = Some("127.0.0.1:0".parse().unwrap());
    options.admin = Some("127.0.0.1:0".parse().unwrap());
    options.upstream = Some(format!("http://{upstream}").parse().unwrap());
    let gateway = tollgate_server::Gateway::start(options).await.unwrap();
    let proxy = gateway.listen_addr();
    let rate = 3 * WORKERS as u64 * 1_000 / SERVICE_MS;
    let results = upstream::open_loop(proxy, rate, Duration::from_secs(seconds)).await;
    let from = Duration::from_secs(2);
    let window = (seconds - 2) as f64;
    let judged = results.iter().filter(|sent| sent.at >= from).count();
    let mut ok = upstream::latencies(&results, from, StatusCode::OK);
    let mut refused = upstream::latencies(&results, from, StatusCode::TOO_MANY_REQUESTS);
    let failed = judged - ok.len() - refused.len();
    // Goodput: successful responses that *arrived* in the judged window, per second.
    let arrived = results
        .iter()
        .filter(|sent| {
            let done = sent.at + sent.took;
            sent.status == StatusCode::OK && done >= from && done < Duration::from_secs(seconds)
        })
        .count();
    let goodput = arrived as f64 / window;
    let (p50, p99) = (quantile(&mut ok, 0.5), quantile(&mut ok, 0.99));
    let refused_p99 = quantile(&mut refused, 0.99);
    println!(
        "{name:<28} goodput {goodput:>6.0}/s ({:>3.0}% of {}/s)  admitted p50 {:>8.1} ms  p99 {:>8.1} ms  refused {:>5} (p99 {:>5.1} ms)  failed {failed}",
        goodput * 100.0 * SERVICE_MS as f64 / (WORKERS as f64 * 1_000.0),
        WORKERS as u64 * 1_000 / SERVICE_MS,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        refused.len(),
        refused_p99.as_secs_f64() * 1e3,
    );
    gateway.shutdown().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = env("SECONDS", 8).max(3);
    let upstream = upstream::queueing(WORKERS, Duration::from_millis(SERVICE_MS)).await;
    // Unloaded: one request at a time straight to the upstream.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut unloaded = Vec::new();
    for _ in 0..50 {
        let sent = Instant::now();
        let request = Request::get(format!("http://{upstream}/"))
            .body(Empty::new())
            .unwrap();
        client.request(request).await.unwrap();
        unloaded.push(sent.elapsed());
    }
    let unloaded_p50 = quantile(&mut unloaded, 0.5);
    println!(
        "upstream: {WORKERS} workers × {SERVICE_MS} ms; unloaded p50 {:.1} ms; offered 3× for {seconds} s, judged after 2 s",
        unloaded_p50.as_secs_f64() * 1e3
    );
    run("(a) no limit", "{ unlimited = true }", upstream, seconds).await;
    // Let the unlimited run's backlog drain before the next.
    tokio::time::sleep(Duration::from_secs(2)).await;
    run(
        "(b) static cap of 64",
        "{ concurrency = 64, per = \"global\" }",
        upstream,
        seconds,
    )
    .await;
    run(
        "(c) adaptive",
        "{ concurrency = \"adaptive\" }",
        upstream,
        seconds,
    )
    .await;
}
