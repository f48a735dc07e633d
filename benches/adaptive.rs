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

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

const WORKERS: usize = 8;
const SERVICE_MS: u64 = 20;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn upstream() -> std::net::SocketAddr {
    let gate = Arc::new(Semaphore::new(WORKERS));
    let app = axum::Router::new().fallback(move || {
        let gate = Arc::clone(&gate);
        async move {
            let Ok(_worker) = gate.acquire().await else {
                return StatusCode::SERVICE_UNAVAILABLE;
            };
            tokio::time::sleep(Duration::from_millis(SERVICE_MS)).await;
            StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

fn quantile(values: &mut [Duration], q: f64) -> Duration {
    values.sort_unstable();
    let at = ((values.len() as f64 * q) as usize).min(values.len().saturating_sub(1));
    values.get(at).copied().unwrap_or_default()
}

async fn run(name: &str, rule: &str, upstream: std::net::SocketAddr, seconds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, format!("[limits]\n\"/\" = {rule}\n")).unwrap();
    let mut options = tollgate::gateway::GatewayOptions::new([&file]);
    options.listen = Some("127.0.0.1:0".parse().unwrap());
    options.admin = Some("127.0.0.1:0".parse().unwrap());
    options.upstream = Some(format!("http://{upstream}").parse().unwrap());
    let gateway = tollgate::gateway::Gateway::start(options).await.unwrap();
    let proxy = gateway.listen_addr();
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let rate = 3 * WORKERS as u64 * 1_000 / SERVICE_MS;
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    let started = Instant::now();
    let mut tasks = Vec::new();
    // Bounded in count and time: `rate × seconds` requests, each with a 30 s timeout.
    while started.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        let client = client.clone();
        let sent = Instant::now();
        tasks.push(tokio::spawn(async move {
            let request = Request::get(format!("http://{proxy}/work"))
                .body(Empty::new())
                .unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(30), async {
                let response = client.request(request).await.ok()?;
                let status = response.status();
                response.into_body().collect().await.ok()?;
                Some(status)
            })
            .await;
            let status = answer.ok().flatten().unwrap_or(StatusCode::GATEWAY_TIMEOUT);
            (sent - started, status, sent.elapsed())
        }));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let judged: Vec<_> = results
        .iter()
        .filter(|(at, ..)| *at >= Duration::from_secs(2))
        .collect();
    let window = (seconds - 2) as f64;
    let mut ok: Vec<Duration> = judged
        .iter()
        .filter(|(_, s, _)| *s == StatusCode::OK)
        .map(|(.., t)| *t)
        .collect();
    let mut refused: Vec<Duration> = judged
        .iter()
        .filter(|(_, s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .map(|(.., t)| *t)
        .collect();
    let failed = judged.len() - ok.len() - refused.len();
    // Goodput: successful responses that *arrived* in the judged window, per second.
    let arrived = results
        .iter()
        .filter(|(at, status, took)| {
            let done = *at + *took;
            *status == StatusCode::OK
                && done >= Duration::from_secs(2)
                && done < Duration::from_secs(seconds)
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
    let upstream = upstream().await;
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
