//! How far the sliding-window estimate strays from the exact count, by resolution:
//! `cargo bench --bench sliding_error`.
//!
//! A rule of 100/min is driven through the fake clock by a greedy client (a request every
//! 10 ms) after traffic shapes chosen to hurt an estimate: a burst of the whole budget at
//! the very end of a sub-window, bursts at random instants, and a steady stream. For each
//! resolution (1 sub-window — the two-window counter —, 2, 6 and 60) and for the exact
//! sliding log, it reports the most requests admitted in any rolling 60 s window, as a
//! multiple of the limit: 1.00 is exact; above 1 is over-admission. Deterministic: the
//! random instants come from a fixed seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::time::Duration;

use tollgate::Limits;
use tollgate::clock::{Clock, FakeClock};
use tollgate_testkit::now_or_never as settle;

const LIMIT: u64 = 100;
const PERIOD_MS: u64 = 60_000;

/// The most admitted in any window of `PERIOD_MS` (timestamps in ms, sorted).
fn rolling_max(admitted: &[u64]) -> usize {
    let mut best = 0;
    let mut start = 0;
    for end in 0..admitted.len() {
        while admitted[end] - admitted[start] >= PERIOD_MS {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// A small fixed-seed generator (xorshift): the same "random" instants every run.
fn instants(seed: u64, count: usize, span_ms: u64) -> Vec<u64> {
    let mut state = seed;
    let mut out: Vec<u64> = (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % span_ms
        })
        .collect();
    out.sort_unstable();
    out
}

/// Runs `pattern` (bursts: instant in ms and size), then the greedy client, against `rule`;
/// the worst rolling-window admission over the limit.
fn run(rule: &str, bursts: &[(u64, u64)], steady_every_ms: Option<u64>) -> f64 {
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .from_toml(&format!("[limits]\n\"/\" = {rule}\n"))
        .unwrap();
    let start = clock.now().as_unix_nanos() / 1_000_000;
    let mut admitted = Vec::new();
    let mut t = 0;
    let greedy_from = bursts.last().map_or(PERIOD_MS, |&(at, _)| at + 10);
    let mut bursts = bursts.iter().peekable();
    let end = 4 * PERIOD_MS;
    while t < end {
        while let Some(&&(at, size)) = bursts.peek() {
            if at > t {
                break;
            }
            for _ in 0..size {
                if settle(limits.check("c", 1)).unwrap().allowed() {
                    admitted.push(t);
                }
            }
            bursts.next();
        }
        let knock = match steady_every_ms {
            Some(every) => t % every == 0,
            None => t >= greedy_from,
        };
        if knock && settle(limits.check("c", 1)).unwrap().allowed() {
            admitted.push(t);
        }
        t += 10;
        clock.advance(Duration::from_millis(10));
    }
    let _ = start;
    rolling_max(&admitted) as f64 / LIMIT as f64
}

fn main() {
    let rules: Vec<(String, String)> = [1u64, 2, 6, 60]
        .iter()
        .map(|&k| {
            let resolution = PERIOD_MS / k;
            (
                format!("{k} sub-window{}", if k == 1 { "" } else { "s" }),
                format!(
                    "{{ rate = \"100/min\", algorithm = \"sliding-window\", resolution = \"{resolution}ms\" }}"
                ),
            )
        })
        .chain(std::iter::once((
            "exact log".to_owned(),
            "{ rate = \"100/min\", algorithm = \"sliding-log\" }".to_owned(),
        )))
        .collect();
    // The whole budget at the last instant of a 1 s sub-window, of a 10 s one, of a 30 s
    // one and of the minute (each the worst case of one resolution).
    let edge = |ms: u64| vec![(PERIOD_MS + ms - 10, LIMIT)];
    // The budget spread evenly over the last 10 s of a minute (a ramp, not one instant).
    let ramp: Vec<(u64, u64)> = (0..100)
        .map(|i| (2 * PERIOD_MS - 10_000 + i * 100, 1))
        .collect();
    let random_bursts: Vec<(u64, u64)> = instants(0x9e37_79b9_7f4a_7c15, 12, 3 * PERIOD_MS)
        .into_iter()
        .map(|at| (at, 40))
        .collect();
    println!("most admitted in any rolling minute, as a multiple of the limit (100/min)");
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>13} {:>8}",
        "counter",
        "burst@1s",
        "burst@10s",
        "burst@30s",
        "burst@60s",
        "ramp 10s",
        "random bursts",
        "steady"
    );
    for (name, rule) in &rules {
        let figures: [f64; 7] = [
            run(rule, &edge(1_000), None),
            run(rule, &edge(10_000), None),
            run(rule, &edge(30_000), None),
            run(rule, &edge(60_000), None),
            run(rule, &ramp, None),
            run(rule, &random_bursts, None),
            run(rule, &[], Some(50)),
        ];
        println!(
            "{:<14} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>13.2} {:>8.2}",
            name,
            figures[0],
            figures[1],
            figures[2],
            figures[3],
            figures[4],
            figures[5],
            figures[6]
        );
    }
}
