//! What tuning costs: `cargo bench --bench tuning [-- CLIENTS]`.
//!
//! - memory: one rule's peak tracker after CLIENTS distinct clients (default 10,000,000;
//!   `[store] max_buckets` as large), from the process's resident set before and after, per
//!   client; and the sketch's fixed share once every client is folded into it;
//! - a suggestion's time at that size (a pass over the table);
//! - decision time per request at 100,000 live clients: a rule alone, with `suggest = true`
//!   and with one candidate, medians of five runs in one process (read as ratios: this
//!   machine is shared). Instructions per request through the layer are
//!   `loadtest/axum.sh`'s (`tollgate-suggest`, `tollgate-candidate`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::clock::{Clock, FakeClock};
use tollgate::key::Client;
use tollgate::traffic::PeakTracker;
use tollgate_testkit::{now_or_never, rss_bytes};

fn client(i: u32) -> Client<'static> {
    Client::Ip(IpAddr::V4(Ipv4Addr::from(i.wrapping_add(0x0a00_0000))))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn decisions(extra: &str, clients: u32) -> Duration {
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .from_toml(&format!(
            "[store]\nmax_buckets = 1000000\n[limits]\n\"/\" = {{ rate = \"1000000/s\", burst = 1000000{extra} }}\n"
        ))
        .unwrap();
    let keys: Vec<String> = (0..clients).map(|i| format!("{}", client(i))).collect();
    for key in &keys {
        now_or_never(limits.check(key, 1)).unwrap();
    }
    let rounds = 4;
    let started = Instant::now();
    for _ in 0..rounds {
        for key in &keys {
            std::hint::black_box(now_or_never(limits.check(key, 1)).unwrap());
        }
    }
    started.elapsed() / (rounds * clients)
}

fn main() {
    let clients: u32 = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(10_000_000);
    let clock = FakeClock::new();
    let before = rss_bytes();
    let tracker = PeakTracker::new(Duration::from_secs(60), clients as usize);
    for i in 0..clients {
        tracker.record(clock.now(), &client(i), 1);
    }
    let after = rss_bytes();
    println!(
        "peak tracker, {clients} clients: {:.1} B/client resident ({} MiB), {:.1} B/client by its own count",
        (after - before) as f64 / f64::from(clients),
        (after - before) >> 20,
        tracker.memory_bytes() as f64 / f64::from(clients),
    );
    let started = Instant::now();
    let suggestion = tracker.suggest(clock.now(), 1.0);
    println!(
        "suggest over {} clients: {:?} (p99 {})",
        suggestion.clients,
        started.elapsed(),
        suggestion.requests.p99
    );
    clock.advance(Duration::from_secs(3_600));
    let folded = tracker.sweep(clock.now());
    let sketch = PeakTracker::new(Duration::from_secs(60), 1);
    println!(
        "folded {folded}; the sketch and the named heavy clients are fixed: at most {} B per rule \
         (2 DDSketches of at most 2,048 bins, 64 names), whatever the clients",
        sketch.memory_bytes().max(2 * 2_048 * 8 + 64 * 64)
    );
    drop(tracker);

    let live = 100_000;
    let mut plain = Vec::new();
    let mut suggest = Vec::new();
    let mut candidate = Vec::new();
    for _ in 0..5 {
        plain.push(decisions("", live));
        suggest.push(decisions(", suggest = true", live));
        candidate.push(decisions(", candidates = [\"500000/s\"]", live));
    }
    let (plain, suggest, candidate) = (median(plain), median(suggest), median(candidate));
    println!(
        "decision at {live} live clients: rule alone {plain:?}, suggest {suggest:?} ({:.2}x), \
         one candidate {candidate:?} ({:.2}x)",
        suggest.as_secs_f64() / plain.as_secs_f64(),
        candidate.as_secs_f64() / plain.as_secs_f64()
    );
}
