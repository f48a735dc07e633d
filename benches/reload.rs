//! Live reload, measured: `cargo bench --bench reload`.
//!
//! 1. Reload-to-effect latency: 100 saves (write-and-rename, as editors do) through the
//!    real file watcher; the time from the rename to the new rule being the one requests
//!    see. Median, p99 and max.
//! 2. Decision cost during a reload storm: a thread rewrites the file and forces a reload
//!    as fast as it can, while this thread times decisions; interleaved with quiet rounds
//!    (quiet, storm, quiet, storm, …) so the machine's drift hits both alike. On a 2-core
//!    machine the storm also takes CPU; the ratio includes that.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::config::Limit;
use tollgate::key::PeerAddr;
use tollgate_testkit::now_or_never as settle;

fn config(root_count: u64) -> String {
    format!(
        "[limits]\n\"/\" = \"{root_count}/s\"\napi = \"1000000/s\"\n\"api/search\" = \"1000000/s\"\n"
    )
}

fn save(file: &Path, text: &str) {
    let temporary = file.with_extension("tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, file).unwrap();
}

fn root_count(limits: &Limits) -> u32 {
    match limits.rules().get("").map(|r| r.limit().clone()) {
        Some(Limit::Limited { quotas, .. }) => quotas[0].rate().count(),
        _ => 0,
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn reload_latency(dir: &Path) {
    let file = dir.join("latency.toml");
    std::fs::write(&file, config(1)).unwrap();
    let limits = Limits::watch([&file]).unwrap();
    let mut samples = Vec::new();
    for i in 2..102 {
        let started = Instant::now();
        save(&file, &config(i));
        while root_count(&limits) != i as u32 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "save {i} never applied"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        samples.push(started.elapsed());
        // Let the debouncer go quiet so each save is measured on its own.
        std::thread::sleep(Duration::from_millis(60));
    }
    samples.sort();
    println!(
        "reload-to-effect over {} saves: median {:.1} ms, p99 {:.1} ms, max {:.1} ms (debounce {} ms)",
        samples.len(),
        percentile(&samples, 50).as_secs_f64() * 1e3,
        percentile(&samples, 99).as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
        tollgate::reload::DEBOUNCE.as_millis(),
    );
}

fn decisions_per_round(limits: &Limits) -> f64 {
    const N: u32 = 400_000;
    let mut request = http::Request::get("/api/search?q=x").body(()).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([10, 0, 0, 1], 4000))));
    let started = Instant::now();
    for i in 0..N {
        if let Some(peer) = request.extensions_mut().get_mut::<PeerAddr>() {
            peer.0
                .set_ip(std::net::IpAddr::from([10, 0, (i >> 8) as u8, i as u8]));
        }
        black_box(
            settle(limits.check_request(&request).unwrap())
                .unwrap()
                .allowed(),
        );
    }
    started.elapsed().as_nanos() as f64 / f64::from(N)
}

fn storm(dir: &Path) {
    let file = dir.join("storm.toml");
    std::fs::write(&file, config(1)).unwrap();
    let limits = Limits::load([&file]).unwrap();
    let (mut quiet, mut stormy) = (Vec::new(), Vec::new());
    let mut reloads = 0;
    for _ in 0..5 {
        quiet.push(decisions_per_round(&limits));
        let stop = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicU64::new(0));
        let storm = {
            let (limits, stop, applied, file) =
                (limits.clone(), stop.clone(), applied.clone(), file.clone());
            std::thread::spawn(move || {
                let mut i = 2;
                while !stop.load(Ordering::Relaxed) && i < 1_000_000 {
                    std::fs::write(&file, config(i)).unwrap();
                    if limits.reload().is_ok() {
                        applied.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        };
        stormy.push(decisions_per_round(&limits));
        stop.store(true, Ordering::Relaxed);
        storm.join().unwrap();
        reloads += applied.load(Ordering::Relaxed);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (q, s) = (median(&mut quiet), median(&mut stormy));
    println!(
        "decision cost: quiet median {q:.0} ns, during a reload storm median {s:.0} ns (x{:.2}); {reloads} reloads applied during the storm rounds",
        s / q
    );
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let dir = tempfile::tempdir().unwrap();
    reload_latency(dir.path());
    storm(dir.path());
}
