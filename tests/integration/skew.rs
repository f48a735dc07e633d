//! SPEC §7's claim put to the test: with Redis, instances decide on the server's clock, so
//! a gateway whose own clock runs seconds ahead neither over- nor under-admits. Two
//! limiters share one real Redis under paced load from threads, one with its clock 5 s
//! ahead (the library's clock is injectable); what they admit together is measured against
//! the budget, in remote and hybrid mode. RELIABILITY.md quotes the figures.

use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::clock::{Clock, SystemClock, Timestamp};
use tollgate::store::BackendStore;

use crate::support::redis::RedisServer;

/// The system clock, `ahead` in front.
#[derive(Debug)]
struct Ahead {
    clock: SystemClock,
    ahead: Duration,
}

impl Clock for Ahead {
    fn now(&self) -> Timestamp {
        self.clock.now() + self.ahead
    }
}

const RATE: u64 = 100;
const OFFERED_PER_SECOND: u64 = 80;
const RUN: Duration = Duration::from_secs(4);

async fn admitted_together(server: &RedisServer, store: &str, prefix: &str) -> u64 {
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}:\"\ntimeout = \"2s\"\n{store}\n\
         [limits]\n\"/\" = \"{RATE}/s\"\n",
        server.url()
    );
    let on_time = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    let ahead = Limits::builder()
        .store(BackendStore::new())
        .clock(Ahead {
            clock: SystemClock::new(),
            ahead: Duration::from_secs(5),
        })
        .from_toml(&config)
        .unwrap();
    let began = Instant::now();
    let mut tasks = Vec::new();
    for limits in [on_time, ahead] {
        tasks.push(tokio::spawn(async move {
            let step = Duration::from_nanos(1_000_000_000 / OFFERED_PER_SECOND);
            let mut next = began;
            let mut admitted = 0;
            while began.elapsed() < RUN {
                tokio::time::sleep_until(next.into()).await;
                next += step;
                if limits.check("shared", 1).await.unwrap().allowed() {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_clock_seconds_ahead_changes_nothing_with_redis() {
    let Some(server) = RedisServer::start("skew") else {
        return;
    };
    let allowed = RATE + RATE * RUN.as_secs();
    for (mode, store) in [("remote", ""), ("hybrid", "sync = \"local\"")] {
        let admitted = admitted_together(&server, store, mode).await;
        eprintln!(
            "| one gateway's clock 5 s ahead | {mode} | {:.2} ({admitted} of {allowed}) |",
            admitted as f64 / allowed as f64
        );
        // Within the budget, and not starved: a skewed clock would show as a burst
        // refilled early (over) or as refusals for time that has not passed (under).
        assert!(admitted <= allowed + 2, "{mode}: {admitted} of {allowed}");
        assert!(
            admitted * 100 >= allowed * 90,
            "{mode}: {admitted} of {allowed}"
        );
    }
}
