//! Decisions per second through the Redis backend at increasing concurrency, beside
//! `redis-benchmark` on the same server in the same run: `cargo bench --bench redis`.
//!
//! Starts its own `redis-server` on a free loopback port (and stops it by PID). For each
//! concurrency level, tollgate decides through **one** multiplexed connection
//! (`connections = 1`) from that many tasks for a fixed time; the ceiling is
//! `redis-benchmark -c 1 -P <level>`: one connection, `<level>` `EVALSHA`s of a trivial
//! script in flight. Round trips per decision are counted from the server's
//! `INFO commandstats` (EVALSHA calls / decisions). Medians of `ROUNDS` (default 3).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

use tollgate_testkit::redis as redis_server;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use tollgate::Limits;
use tollgate::store::BackendStore;

const LEVELS: [usize; 5] = [1, 4, 16, 64, 256];
const SECONDS: u64 = 3;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Decisions made by `tasks` tasks sharing one connection, and the time they took.
async fn tollgate_run(limits: &Limits<BackendStore>, tasks: usize) -> (u64, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(SECONDS);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (limits, done) = (limits.clone(), Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            let mut i = 0u32;
            // Bounded in time and in count.
            while Instant::now() < until && i < 10_000_000 {
                let key = format!("bench/10.{}.{}.{}", task % 256, (i >> 8) % 256, i % 256);
                limits.check(&key, 1).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    let started = Instant::now();
    for handle in handles {
        handle.await.unwrap();
    }
    (done.load(Ordering::Relaxed), started.elapsed())
}

/// `redis-benchmark`'s requests per second for one connection with `depth` in flight,
/// sending `EVALSHA sha` with `args`.
fn ceiling(port: &str, depth: usize, sha: &str, args: &[&str]) -> Option<f64> {
    let output = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-c",
            "1",
            "-q",
            "-n",
            "200000",
        ])
        .args(["-r", "65536", "-P", &depth.to_string()])
        .args(["EVALSHA", sha])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    // "EVALSHA ...: 123456.79 requests per second, p50=..."; progress lines end in \r.
    text.split(['\r', '\n'])
        .filter_map(|line| line.split_once(": ")?.1.split_whitespace().next())
        .filter_map(|n| n.parse::<f64>().ok())
        .next_back()
}

fn main() {
    let Some(server) = RedisServer::start("cargo bench --bench redis") else {
        return;
    };
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nconnections = 1\ntimeout = \"2s\"\n\
         [limits]\n\"/\" = \"1000000/s\"\n",
        server.url()
    );
    let limits = runtime.block_on(async {
        let limits = Limits::builder()
            .store(BackendStore::new())
            .from_toml(&config)
            .unwrap();
        limits.check("warm-up", 1).await.unwrap();
        limits
    });
    server.command("SCRIPT LOAD \"return 1\"").unwrap();
    let trivial = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"; // SHA1 of "return 1"
    // tollgate's own script (loaded by the warm-up decision), sent raw by redis-benchmark
    // with the arguments of a `1000000/s` GCRA decision: the server's share of the cost.
    // The decision script, assembled as the store assembles it (scripts/mod.rs).
    let decide = redis::Script::new(concat!(
        include_str!("../src/store/redis/scripts/decide/begin.lua"),
        include_str!("../src/store/redis/scripts/decide/log.lua"),
        include_str!("../src/store/redis/scripts/decide/subwindow.lua"),
        include_str!("../src/store/redis/scripts/decide/counters.lua"),
    ));
    let decide_args = [
        "1",
        "bench:{__rand_int__}c",
        "",
        "c",
        "1",
        "0",
        "g",
        "1",
        "1",
        "1000000",
        "1000000",
    ];

    println!(
        "Redis backend, one connection, {SECONDS} s per level, medians of {rounds} (tokio: 1 worker; redis-server and the client share 2 cores)"
    );
    println!(
        "| tasks in flight | tollgate decisions/s | redis-benchmark, trivial script | ratio | redis-benchmark, tollgate's script | ratio | EVALSHA per decision |"
    );
    println!("|---|---|---|---|---|---|---|");
    for level in LEVELS {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut script = Vec::new();
        let mut per_decision = Vec::new();
        for _ in 0..rounds {
            let before = server.command_calls("evalsha");
            let (decisions, elapsed) = runtime.block_on(tollgate_run(&limits, level));
            let calls = server.command_calls("evalsha") - before;
            per_decision.push(calls as f64 / decisions.max(1) as f64);
            ours.push(decisions as f64 / elapsed.as_secs_f64());
            theirs.extend(ceiling(&port, level, trivial, &["0"]));
            script.extend(ceiling(&port, level, decide.get_hash(), &decide_args));
        }
        let (ours, per_decision) = (median(ours), median(per_decision));
        let cell = |values: Vec<f64>| {
            if values.is_empty() {
                ("—".to_owned(), "—".to_owned())
            } else {
                let m = median(values);
                (format!("{m:.0}"), format!("{:.2}", ours / m))
            }
        };
        let ((trivial_rate, trivial_ratio), (script_rate, script_ratio)) =
            (cell(theirs), cell(script));
        println!(
            "| {level} | {ours:.0} | {trivial_rate} | {trivial_ratio} | {script_rate} | {script_ratio} | {per_decision:.3} |"
        );
    }
    let _ = limits.store().redis().map(|redis| {
        assert!(!redis.breaker_open(), "every decision went to Redis");
    });
}
