//! The hybrid-mode simulation's table for BENCHMARKS.md: `cargo bench --bench hybrid`.
//!
//! For N ∈ {2, 4, 16} instances and `sync_interval` ∈ {10, 100, 1000} ms, under (a) a
//! steady load 20× over a 1000/s limit, (b) a load at half the limit, (c) a fresh
//! client's burst of five times the burst within 100 ms, spread over every instance, (d)
//! a steady load 1.5× over, where the bucket is always near empty:
//! Redis operations per request (the server's `INFO commandstats`) and admissions beside
//! one strict limiter fed the same arrivals. Deterministic: a simulated clock, one real
//! `redis-server` (started on a free loopback port, stopped by PID). `SECONDS` (default
//! 5) sets the length of the steady runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

use tollgate_testkit::redis;

#[allow(dead_code, unreachable_pub)]
#[path = "../tests/integration/support/hybrid_sim.rs"]
mod hybrid_sim;

use hybrid_sim::{Load, simulate};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(server) = redis::RedisServer::start("the hybrid simulation") else {
        std::process::exit(2);
    };
    let seconds = std::env::var("SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    println!("hybrid mode, 1000/s burst 1000, {seconds} s of steady load, one redis-server\n");
    println!(
        "| load | instances | sync_interval | requests | Redis ops/request | admitted | strict | admitted/strict | over strict (bound) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut run = 0;
    for load in [Load::Steady, Load::Half, Load::Burst, Load::Edge] {
        for instances in [2, 4, 16] {
            for interval in [10, 100, 1_000] {
                run += 1;
                let m = simulate(
                    &server,
                    &format!("bench{run}"),
                    instances,
                    interval,
                    load,
                    seconds,
                )
                .await;
                println!(
                    "| {load} | {instances} | {interval} ms | {} | {:.4} | {} | {} | {:.3} | {} ({}) |",
                    m.requests,
                    m.ops_per_request(),
                    m.admitted,
                    m.strict,
                    m.admitted_ratio(),
                    m.over(),
                    m.bound
                );
            }
        }
    }
}
