//! A simulated upstream for concurrency tests and benchmarks: `workers` workers taking
//! `service` each, first come first served — latency flat up to `workers` in flight and
//! growing beyond. Also used by `benches/adaptive.rs`.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::sync::Semaphore;

/// Serves the upstream on a free loopback port until the runtime ends.
pub async fn queueing(workers: usize, service: Duration) -> std::net::SocketAddr {
    let gate = Arc::new(Semaphore::new(workers));
    let app = axum::Router::new().fallback(move || {
        let gate = Arc::clone(&gate);
        async move {
            let Ok(_worker) = gate.acquire().await else {
                return StatusCode::SERVICE_UNAVAILABLE;
            };
            tokio::time::sleep(service).await;
            StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

/// The `q` quantile of `values` (sorted here).
pub fn quantile(values: &mut [Duration], q: f64) -> Duration {
    values.sort_unstable();
    let at = ((values.len() as f64 * q) as usize).min(values.len().saturating_sub(1));
    values.get(at).copied().unwrap_or_default()
}

/// One request of an open-loop run.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// When it was sent, from the start of the run.
    pub at: Duration,
    /// Its status; 504 when unanswered within 30 s, 502 when the connection failed.
    pub status: StatusCode,
    /// Sent to body read.
    pub took: Duration,
}

/// Sends `GET /work` to `proxy` `per_second` times a second for `run`, whatever the answers
/// (open loop: a slow server does not slow the sender), and waits for every answer.
/// Bounded: `per_second × run` requests, each given 30 s.
pub async fn open_loop(proxy: std::net::SocketAddr, per_second: u64, run: Duration) -> Vec<Sent> {
    use http_body_util::{BodyExt, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / per_second.max(1)));
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    while started.elapsed() < run {
        tick.tick().await;
        let client = client.clone();
        let sent = tokio::time::Instant::now();
        tasks.push(tokio::spawn(async move {
            let request = http::Request::get(format!("http://{proxy}/work"))
                .body(Empty::new())
                .unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(30), async {
                let Ok(response) = client.request(request).await else {
                    return StatusCode::BAD_GATEWAY;
                };
                let status = response.status();
                let _ = response.into_body().collect().await;
                status
            })
            .await;
            Sent {
                at: sent.duration_since(started),
                status: answer.unwrap_or(StatusCode::GATEWAY_TIMEOUT),
                took: sent.elapsed(),
            }
        }));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// How long the requests sent from `from` on that were answered with `status` took.
pub fn latencies(results: &[Sent], from: Duration, status: StatusCode) -> Vec<Duration> {
    results
        .iter()
        .filter(|sent| sent.at >= from && sent.status == status)
        .map(|sent| sent.took)
        .collect()
}
