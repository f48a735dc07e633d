//! Plan membership at scale: `cargo bench --bench plans`.
//!
//! A membership table of `--members` identities (default 1,000,000; `"user-0000042" =
//! "pro"` rows, three plans) beside a rule with limits per plan. Measured in one process,
//! each figure the median of a few runs:
//!
//! - memory: the process's resident set before and after loading the limiter, per
//!   identity (the table, and the text the reloader keeps to notice changes);
//! - load and reload time: the first load, a forced reload after one row changed (the
//!   table is read again), and one after only the rules changed (the table is reused);
//! - lookup cost: `Plans::member_plan` alone, and a decision on a rule with plans whose
//!   client is found in the table, beside the same decision on the same rule without
//!   plans (the baseline, measured in the same run).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::time::{Duration, Instant};
use tollgate_testkit::{now_or_never as settle, rss_bytes};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

const PLANS: [&str; 3] = ["free", "pro", "enterprise"];

fn members_text(count: u32, changed: bool) -> String {
    let mut text = String::with_capacity(count as usize * 26);
    for i in 0..count {
        let plan = if changed && i == 0 {
            "pro"
        } else {
            PLANS[(i % 3) as usize]
        };
        text.push_str(&format!("\"user-{i:07}\" = \"{plan}\"\n"));
    }
    text
}

fn rules(with_plans: bool, rate: &str) -> String {
    let plans = if with_plans {
        "[plans]\nmembers = [\"plans.toml\"]\ndefault = \"free\"\n"
    } else {
        ""
    };
    let per_plan = if with_plans {
        ", plans = { free = \"1000000/s\", pro = \"2000000/s\", enterprise = { unlimited = true } }"
    } else {
        ""
    };
    format!("{plans}[limits]\napi = {{ rate = \"{rate}\"{per_plan} }}\n")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u32 = args
        .iter()
        .position(|a| a == "--members")
        .and_then(|at| args.get(at + 1)?.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let members = dir.path().join("plans.toml");
    let rules_file = dir.path().join("limits.toml");
    std::fs::write(&members, members_text(count, false)).unwrap();
    std::fs::write(&rules_file, rules(true, "1000000/s")).unwrap();
    let bytes = std::fs::metadata(&members).unwrap().len();

    println!(
        "plan membership: {count} identities, a {:.1} MiB table",
        bytes as f64 / f64::from(1 << 20)
    );
    let before = rss_bytes();
    let started = Instant::now();
    let limits = tollgate::Limits::load([&rules_file]).unwrap();
    let first_load = started.elapsed();
    let after = rss_bytes();
    assert_eq!(limits.rules().plans().members(), count as usize);
    let table = limits.rules().plans().members_memory();
    println!(
        "  memory: the table {:.1} MiB, {:.1} bytes per identity; the process's rss +{:.1} MiB, {:.1} bytes per identity (with the text kept to re-read it, {:.1} bytes per identity, and what the allocator kept of the parse)",
        table as f64 / f64::from(1 << 20),
        table as f64 / f64::from(count),
        (after - before) as f64 / f64::from(1 << 20),
        (after - before) as f64 / f64::from(count),
        bytes as f64 / f64::from(count),
    );
    println!(
        "  first load (read, parse, build): {:.0} ms",
        first_load.as_secs_f64() * 1e3
    );

    let mut table_reloads = Vec::new();
    let mut rules_reloads = Vec::new();
    for round in 0..3 {
        std::fs::write(&members, members_text(count, round % 2 == 0)).unwrap();
        let started = Instant::now();
        limits.reload().unwrap();
        table_reloads.push(started.elapsed());
        let rate = if round % 2 == 0 {
            "999999/s"
        } else {
            "1000000/s"
        };
        std::fs::write(&rules_file, rules(true, rate)).unwrap();
        let started = Instant::now();
        limits.reload().unwrap();
        rules_reloads.push(started.elapsed());
    }
    println!(
        "  reload after one row changed (table read again): {:.0} ms (median of 3)",
        median(table_reloads).as_secs_f64() * 1e3
    );
    println!(
        "  reload after only the rules changed (table reused): {:.0} ms (median of 3)",
        median(rules_reloads).as_secs_f64() * 1e3
    );

    // Lookups: identities spread over the table, in a fixed pseudo-random order.
    let ids: Vec<String> = (0..100_000u32)
        .map(|i| format!("user-{:07}", (i.wrapping_mul(2_654_435_761)) % count))
        .collect();
    let keys: Vec<String> = ids.iter().map(|id| format!("api/{id}")).collect();
    let rules_now = limits.rules();
    let plans = rules_now.plans();
    let mut lookups = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut found = 0usize;
        for id in &ids {
            found += usize::from(plans.member_plan(id).is_some());
        }
        assert_eq!(found, ids.len());
        lookups.push(started.elapsed() / ids.len() as u32);
    }
    println!(
        "  member_plan lookup: {} ns (median of 5 passes over 100,000 identities)",
        median(lookups).as_nanos()
    );

    let plain = tollgate::Limits::from_toml(&rules(false, "1000000/s")).unwrap();
    let decide = |limits: &tollgate::Limits| {
        let mut samples = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            for key in &keys {
                settle(limits.check(key, 1)).unwrap();
            }
            samples.push(started.elapsed() / keys.len() as u32);
        }
        median(samples)
    };
    // Warm both (first decisions create the buckets), then interleave the measurements.
    decide(&limits);
    decide(&plain);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        with.push(decide(&limits));
        without.push(decide(&plain));
    }
    let (with, without) = (median(with), median(without));
    println!(
        "  decision, 100,000 clients: with plans and membership {} ns, the same rule without plans {} ns ({:+} ns, {:.2}x)",
        with.as_nanos(),
        without.as_nanos(),
        with.as_nanos() as i128 - without.as_nanos() as i128,
        with.as_secs_f64() / without.as_secs_f64(),
    );
}
