//! Many threads on one key never get more than the bucket can give.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::Limits;

use crate::support::now_or_never;

#[test]
fn hammering_one_key_never_admits_more_than_burst_plus_refill() {
    let limits =
        Limits::from_toml("[limits]\n\"/\" = { rate = \"1000/s\", burst = 50 }\n").unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let limits = limits.clone();
            let admitted = Arc::clone(&admitted);
            std::thread::spawn(move || {
                // Bounded in count and in time.
                for _ in 0..200_000 {
                    if started.elapsed() > Duration::from_millis(300) {
                        break;
                    }
                    let decision = now_or_never(limits.check("api/203.0.113.7", 1)).unwrap();
                    if decision.allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = started.elapsed();
    let admitted = admitted.load(Ordering::Relaxed);
    let bound = 50 + (elapsed.as_secs_f64() * 1000.0).ceil() as u64;
    assert!(
        admitted <= bound,
        "admitted {admitted} > bound {bound} over {elapsed:?}"
    );
    // The bucket was really drained and refilled, so the bound was tested, not idle.
    assert!(admitted > 50, "admitted only {admitted}");
}

#[test]
fn clones_of_one_limiter_share_the_budget_across_threads() {
    let limits = Limits::from_toml("[limits]\n\"/\" = \"100/h\"\n").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limits = limits.clone();
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| now_or_never(limits.check("me", 1)).unwrap().allowed())
                    .count()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 100);
}
