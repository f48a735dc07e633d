//! Resident memory per bucket, measured: `cargo bench --bench memory`.
//!
//! Each scenario runs in a fresh child process and reads its own `VmRSS` before and after
//! inserting distinct clients (one request each, one rule), so allocator state from one
//! scenario cannot flatter another. governor's keyed limiter (DashMap store) is measured
//! the same way as the reference. Scenarios vary the algorithm and the kind of client
//! (IPv4 addresses, or API keys of 16 characters as a header identity would give).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Instant;
use tollgate_testkit::{now_or_never as settle, rss_bytes};

fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn tollgate(clients: u32, max_buckets: u64, algorithm: &str, kind: &str) {
    // A daily rate: nothing refills (and so nothing is swept) during the run.
    let config = format!(
        "[store]\nmax_buckets = {max_buckets}\n[limits]\n\"/\" = {{ rate = \"10/d\", algorithm = \"{algorithm}\" }}\n"
    );
    let limits = tollgate::Limits::from_toml(&config).unwrap();
    let before = rss_bytes();
    let started = Instant::now();
    for i in 0..clients {
        let key = match kind {
            "ipv4" => client(i).to_string(),
            _ => format!("key-{i:012}"),
        };
        settle(limits.check(&key, 1)).unwrap();
    }
    let elapsed = started.elapsed();
    let after = rss_bytes();
    let held = limits.store().len() as u64;
    println!(
        "tollgate  {algorithm:<14} {kind:<4} clients={clients:>9} max_buckets={max_buckets:>9}  held={held:>9}  evictions={:>9}  rss +{:>6} MiB  {:>5.1} bytes/held bucket  ({:.0} ns/insert)",
        limits.store().evictions(),
        (after - before) / (1 << 20),
        (after - before) as f64 / held.max(1) as f64,
        elapsed.as_nanos() as f64 / f64::from(clients),
    );
}

/// Sliding logs filled to their limit: `limit` requests from each client under `limit/d`.
fn sliding_log(clients: u32, limit: u32) {
    let config =
        format!("[limits]\n\"/\" = {{ rate = \"{limit}/d\", algorithm = \"sliding-log\" }}\n");
    let limits = tollgate::Limits::from_toml(&config).unwrap();
    let before = rss_bytes();
    for i in 0..clients {
        let key = client(i).to_string();
        for _ in 0..limit {
            settle(limits.check(&key, 1)).unwrap();
        }
    }
    let after = rss_bytes();
    let held = limits.store().len() as u64;
    println!(
        "tollgate  sliding-log limit={limit:>5} clients={clients:>9}  held={held:>9}  rss +{:>6} MiB  {:>7.1} bytes/held bucket ({:.1} per logged request)",
        (after - before) / (1 << 20),
        (after - before) as f64 / held.max(1) as f64,
        (after - before) as f64 / held.max(1) as f64 / f64::from(limit),
    );
}

fn governor(clients: u32) {
    let quota = governor::Quota::per_minute(std::num::NonZeroU32::new(10).unwrap());
    let limiter = governor::RateLimiter::keyed(quota);
    let before = rss_bytes();
    for i in 0..clients {
        let _ = limiter.check_key(&client(i));
    }
    let after = rss_bytes();
    println!(
        "governor  clients={clients:>9}  held={:>9}  rss +{:>6} MiB  {:>5.1} bytes/key",
        limiter.len(),
        (after - before) / (1 << 20),
        (after - before) as f64 / f64::from(clients),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(position) = args.iter().position(|a| a == "--scenario") {
        let name = &args[position + 1];
        let clients: u32 = args[position + 2].parse().unwrap();
        match name.as_str() {
            "tollgate" => tollgate(
                clients,
                args[position + 3].parse().unwrap(),
                &args[position + 4],
                &args[position + 5],
            ),
            "governor" => governor(clients),
            "log" => sliding_log(clients, args[position + 3].parse().unwrap()),
            _ => unreachable!(),
        }
        return;
    }
    let me = std::env::current_exe().unwrap();
    let run = |args: &[&str]| {
        let status = Command::new(&me)
            .arg("--scenario")
            .args(args)
            .status()
            .unwrap();
        assert!(status.success());
    };
    println!(
        "memory per bucket, one rule, distinct clients, one request each ({})",
        chrono_free_date()
    );
    let unbounded = "100000000";
    run(&["governor", "1000000"]);
    run(&["tollgate", "1000000", unbounded, "gcra", "ipv4"]);
    run(&["tollgate", "10000000", unbounded, "gcra", "ipv4"]);
    // The bound under a flood: ten million clients against max_buckets = 1,000,000.
    run(&["tollgate", "10000000", "1000000", "gcra", "ipv4"]);
    // The other layouts: API keys, and the window algorithms.
    run(&["tollgate", "1000000", unbounded, "gcra", "key"]);
    run(&["tollgate", "1000000", unbounded, "sliding-window", "ipv4"]);
    run(&["tollgate", "1000000", unbounded, "fixed-window", "ipv4"]);
    // Sliding logs, full: memory grows with the limit (issue 21).
    run(&["log", "200000", "5"]);
    run(&["log", "20000", "100"]);
    run(&["log", "2000", "1000"]);
}

fn chrono_free_date() -> String {
    String::from_utf8(
        Command::new("date")
            .arg("-u")
            .arg("+%F")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned()
}
