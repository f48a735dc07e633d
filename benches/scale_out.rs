//! Scaling out: decisions per second, p50/p99 latency and Redis commands per decision for
//! a single Redis, a Redis Cluster, and hybrid mode on each, at 1 and 4 gateways:
//! `cargo bench --bench scale_out`.
//!
//! Starts its own `redis-server` and a six-node cluster (3 masters, 3 replicas) on free
//! loopback ports, stopped by PID. A "gateway" is one `Limits` with its own store and
//! connections, in this process; 16 tasks in all, spread over the gateways, decide as
//! fast as they can for `SECONDS` (default 2) per round, over 64 clients of a `1000/s`
//! rule (mostly admitted). Commands are the servers' `INFO commandstats` (`EVALSHA` and
//! `EVAL`, heartbeats included) over decisions. Medians of `ROUNDS` (default 3).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

use tollgate_testkit::{cluster, redis};

use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::store::BackendStore;

const TASKS: usize = 16;
const CLIENTS: usize = 64;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One round: decisions per second, p50 and p99 in microseconds.
async fn round(fleet: &[Limits<BackendStore>], seconds: u64) -> (u64, f64, f64, f64) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let limits = fleet[task % fleet.len()].clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut i = task * 7;
            // Bounded in time and in count.
            while Instant::now() < until && latencies.len() < 5_000_000 {
                let key = format!("api/10.0.0.{}", i % CLIENTS);
                let sent = Instant::now();
                limits.check(&key, 1).await.unwrap();
                latencies.push(sent.elapsed().as_nanos() as u64);
                i += 1;
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)] as f64 / 1e3
    };
    (
        latencies.len() as u64,
        latencies.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
    )
}

fn main() {
    let Some(server) = redis::RedisServer::start("cargo bench --bench scale_out") else {
        std::process::exit(2);
    };
    let Some(cluster) = cluster::RedisCluster::start("cargo bench --bench scale_out") else {
        std::process::exit(2);
    };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let seconds: u64 = std::env::var("SECONDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seeds = format!(
        "[{}]",
        cluster
            .urls()
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let single_url = format!("\"{}\"", server.url());
    let setups = [
        ("single Redis", "redis", single_url.as_str(), ""),
        (
            "Redis Cluster (3 masters)",
            "redis-cluster",
            seeds.as_str(),
            "",
        ),
        (
            "hybrid, single Redis",
            "redis",
            single_url.as_str(),
            "sync = \"local\"\n",
        ),
        (
            "hybrid, Redis Cluster",
            "redis-cluster",
            seeds.as_str(),
            "sync = \"local\"\n",
        ),
    ];
    println!("{TASKS} tasks over 64 clients of 1000/s, {seconds} s rounds, medians of {rounds}\n");
    println!("| backend | gateways | decisions/s | p50 µs | p99 µs | Redis commands/decision |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut run = 0;
    for (name, backend, url, extra) in setups {
        for gateways in [1usize, 4] {
            let (mut rates, mut p50s, mut p99s, mut commands) = (vec![], vec![], vec![], vec![]);
            for _ in 0..rounds {
                run += 1;
                let config = format!(
                    "[store]\nbackend = \"{backend}\"\nurl = {url}\nkey_prefix = \"run{run}:\"\n\
                     timeout = \"1s\"\n{extra}[limits]\n\"api\" = \"1000/s\"\n"
                );
                let calls = || {
                    if backend == "redis" {
                        server.command_calls("evalsha") + server.command_calls("eval")
                    } else {
                        cluster.command_calls("evalsha") + cluster.command_calls("eval")
                    }
                };
                let (decisions, rate, p50, p99, used) = runtime.block_on(async {
                    let fleet: Vec<Limits<BackendStore>> = (0..gateways)
                        .map(|_| {
                            Limits::builder()
                                .store(BackendStore::new())
                                .from_toml(&config)
                                .unwrap()
                        })
                        .collect();
                    // Connect, load the script and (hybrid) count the fleet first.
                    for limits in &fleet {
                        limits.check("api/10.0.0.250", 1).await.unwrap();
                    }
                    if !extra.is_empty() {
                        tokio::time::sleep(Duration::from_millis(2_300)).await;
                    }
                    let before = calls();
                    let (decisions, rate, p50, p99) = round(&fleet, seconds).await;
                    (decisions, rate, p50, p99, calls() - before)
                });
                rates.push(rate);
                p50s.push(p50);
                p99s.push(p99);
                commands.push(used as f64 / decisions as f64);
            }
            println!(
                "| {name} | {gateways} | {:.0} | {:.0} | {:.0} | {:.4} |",
                median(rates),
                median(p50s),
                median(p99s),
                median(commands)
            );
        }
    }
}
