//! Decisions under contention: several threads deciding at once, on one key and on many,
//! tollgate's memory store (a shard's mutex per decision) beside governor's keyed limiter
//! (a DashMap shard's read lock, then a compare-and-swap on the key's state), in the same
//! run.
//!
//! `cargo bench --bench contention` (`ROUNDS=5 DECISIONS=400000` to change the run). For
//! each thread count and key spread it prints the median over the rounds of decisions per
//! second, all threads together. Threads beyond the machine's cores share them: those
//! rows show what a lock holder descheduled mid-section costs, not scaling. BENCHMARKS.md
//! reads the results and says which design scales to many cores, and why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::cast_possible_truncation,
    missing_docs
)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use governor::RateLimiter;
use http::Request;
use tollgate::Limits;
use tollgate::key::PeerAddr;
use tollgate_testkit::now_or_never as settle;

/// Never denies: every decision takes the same path.
const GENEROUS: &str = "1000000000/s";

fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Decisions per second, all `threads` together, each making `per_thread` decisions over
/// `keys` clients (thread `t` starts at a different client).
fn run(threads: usize, per_thread: usize, decide: Arc<dyn Fn(usize) + Send + Sync>) -> f64 {
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let decide = Arc::clone(&decide);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    decide(t * 7_919 + i);
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for handle in handles {
        handle.join().unwrap();
    }
    (threads * per_thread) as f64 / began.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // Criterion's flags (`--bench`) are not ours to read; nothing else is passed.
    let rounds = env("ROUNDS", 5);
    let per_thread = env("DECISIONS", 400_000);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("contention: {cores} cores, {rounds} rounds of {per_thread} decisions a thread");
    println!(
        "| keys | threads | tollgate decisions/s | governor decisions/s | tollgate ÷ governor |"
    );
    println!("|---|---|---|---|---|");
    for keys in [1usize, 100_000] {
        let limits =
            Arc::new(Limits::from_toml(&format!("[limits]\n\"/\" = \"{GENEROUS}\"\n")).unwrap());
        let governor = Arc::new(RateLimiter::keyed(governor::Quota::per_second(
            std::num::NonZeroU32::new(1_000_000_000).unwrap(),
        )));
        let tollgate_decide: Arc<dyn Fn(usize) + Send + Sync> = {
            let limits = Arc::clone(&limits);
            Arc::new(move |i| {
                let mut request = Request::get("/api/search").body(()).unwrap();
                let peer = SocketAddr::new(client((i % keys) as u32), 40_000);
                request.extensions_mut().insert(PeerAddr(peer));
                black_box(
                    settle(limits.check_request(&request).unwrap())
                        .unwrap()
                        .allowed(),
                );
            })
        };
        let governor_decide: Arc<dyn Fn(usize) + Send + Sync> = {
            let governor = Arc::clone(&governor);
            Arc::new(move |i| {
                // The same request built, so both sides pay for it alike.
                let request = Request::get("/api/search").body(()).unwrap();
                black_box(&request);
                black_box(governor.check_key(&client((i % keys) as u32)).is_ok());
            })
        };
        // Every key live before the clock starts.
        for i in 0..keys {
            tollgate_decide(i);
            governor_decide(i);
        }
        for threads in [1usize, 2, 4] {
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            for _ in 0..rounds {
                ours.push(run(threads, per_thread, Arc::clone(&tollgate_decide)));
                theirs.push(run(threads, per_thread, Arc::clone(&governor_decide)));
            }
            let (ours, theirs) = (median(ours), median(theirs));
            println!(
                "| {keys} | {threads} | {:.0} | {:.0} | {:.2} |",
                ours,
                theirs,
                ours / theirs
            );
        }
    }
    also_contention(rounds, per_thread);
}

/// Two threads, 100,000 clients each, every request also drawing on one global `also`
/// bucket (issue 45), beside the rule alone, in the same run.
fn also_contention(rounds: usize, per_thread: usize) {
    println!();
    println!("| rule | threads | decisions/s | ÷ the rule alone |");
    println!("|---|---|---|---|");
    let decide_with = |toml: &str| -> Arc<dyn Fn(usize) + Send + Sync> {
        let limits = Arc::new(Limits::from_toml(toml).unwrap());
        Arc::new(move |i| {
            let mut request = Request::get("/api/search").body(()).unwrap();
            let peer = SocketAddr::new(client((i % 100_000) as u32), 40_000);
            request.extensions_mut().insert(PeerAddr(peer));
            black_box(
                settle(limits.check_request(&request).unwrap())
                    .unwrap()
                    .allowed(),
            );
        })
    };
    let alone = decide_with(&format!("[limits]\n\"/\" = \"{GENEROUS}\"\n"));
    let stacked = decide_with(&format!(
        "[limits.\"/\"]\nrate = \"{GENEROUS}\"\nalso.all = {{ rate = \"{GENEROUS}\", per = \"global\" }}\n"
    ));
    for i in 0..100_000 {
        alone(i);
        stacked(i);
    }
    for threads in [1usize, 2] {
        let mut ours = Vec::new();
        let mut base = Vec::new();
        for _ in 0..rounds {
            base.push(run(threads, per_thread, Arc::clone(&alone)));
            ours.push(run(threads, per_thread, Arc::clone(&stacked)));
        }
        let (ours, base) = (median(ours), median(base));
        println!("| rule alone | {threads} | {base:.0} | 1.00 |");
        println!(
            "| rule + one global `also` | {threads} | {ours:.0} | {:.2} |",
            ours / base
        );
    }
}
