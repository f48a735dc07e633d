//! A deterministic simulation of hybrid mode (`[store] sync = "local"`): N instances, each
//! a `Limits` over its own `RedisStore`, all on one real `redis-server`, driven by a
//! simulated clock (the stores decide at the caller's time, and the simulation runs
//! every instance's settlement rounds itself). Requests arrive at fixed instants spread
//! round-robin over the instances; the same arrivals go through one strict in-memory
//! limiter, whose admissions are the reference. Redis operations are the server's own
//! count (`INFO commandstats`: every `EVALSHA`/`EVAL`, heartbeats included).
//!
//! Used by `redis_hybrid.rs` (small, asserting the bound) and by `benches/hybrid.rs`
//! (the table in BENCHMARKS.md).

use std::fmt;

use tollgate::Limits;
use tollgate::clock::Timestamp;
use tollgate::config::RedisSettings;
use tollgate::store::{MemoryStore, RedisStore};

use super::redis::RedisServer;

/// The simulated limit: 1000/s with a burst of 1000.
pub const RATE: u64 = 1_000;
const RULE: &str = "\"api\" = \"1000/s\"\n";
const KEY: &str = "api/203.0.113.7";
/// The simulation's epoch (any fixed instant: runs are deterministic).
const START: u64 = 1_800_000_000_000_000_000;

/// The traffic of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// (a) 20× the limit, steadily, for the run.
    Steady,
    /// (b) half the limit, steadily.
    Half,
    /// (d) 1.5× the limit, steadily: the bucket is always near empty.
    Edge,
    /// (c) a fresh client's burst: five times the burst within 100 ms.
    Burst,
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Load::Steady => "(a) 20x over",
            Load::Half => "(b) half load",
            Load::Burst => "(c) fresh burst",
            Load::Edge => "(d) 1.5x over",
        })
    }
}

impl Load {
    /// Nanoseconds between arrivals, and how many arrive, over `seconds`.
    fn arrivals(self, seconds: u64) -> (u64, u64) {
        match self {
            Load::Steady => (1_000_000_000 / (20 * RATE), 20 * RATE * seconds),
            Load::Half => (2_000_000_000 / RATE, RATE * seconds / 2),
            Load::Burst => (100_000_000 / (5 * RATE), 5 * RATE),
            Load::Edge => (2_000_000_000 / (3 * RATE), 3 * RATE * seconds / 2),
        }
    }
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub requests: u64,
    pub admitted: u64,
    /// What one strict limiter admitted from the same arrivals.
    pub strict: u64,
    pub redis_ops: u64,
    /// The documented bound on admissions over the strict reference: instances × lease
    /// cap, at most one `sync_interval` of the rate.
    pub bound: u64,
}

impl Measured {
    pub fn ops_per_request(&self) -> f64 {
        self.redis_ops as f64 / self.requests as f64
    }

    pub fn admitted_ratio(&self) -> f64 {
        self.admitted as f64 / self.strict as f64
    }

    pub fn over(&self) -> u64 {
        self.admitted.saturating_sub(self.strict)
    }
}

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_unix_nanos(START + nanos)
}

/// Runs `load` for `seconds` over `instances` instances settling every `interval_ms`,
/// on `server`, with its own key prefix `run`.
pub async fn simulate(
    server: &RedisServer,
    run: &str,
    instances: u64,
    interval_ms: u64,
    load: Load,
    seconds: u64,
) -> Measured {
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{run}:\"\n\
         sync = \"local\"\nsync_interval = \"{interval_ms}ms\"\ntimeout = \"2s\"\n\
         [limits]\n{RULE}",
        url = server.url()
    );
    let mut settings = RedisSettings::default();
    settings.url = server.url();
    settings.nodes = vec![server.url()];
    let fleet: Vec<Limits<RedisStore>> = (0..instances)
        .map(|_| {
            let limits = Limits::builder()
                .store(RedisStore::new(&settings).unwrap())
                .from_toml(&config)
                .unwrap();
            limits.store().use_caller_time(true);
            limits
        })
        .collect();
    let strict = Limits::builder()
        .store(MemoryStore::new())
        .from_toml(&format!("[limits]\n{RULE}"))
        .unwrap();

    // Two heartbeats each before the traffic, so every instance knows the fleet.
    for warm in [3_000_000_000u64, 800_000_000] {
        for limits in &fleet {
            limits
                .store()
                .sync_at(Timestamp::from_unix_nanos(START - warm))
                .await;
        }
    }
    assert_eq!(
        fleet[0].store().instances(),
        instances,
        "the heartbeat counts the fleet"
    );
    assert!(server.command("CONFIG RESETSTAT").is_some());

    // Events in time order: arrivals (round-robin) and each instance's rounds, staggered.
    let (gap, count) = load.arrivals(seconds);
    let span = gap * count;
    let interval = interval_ms * 1_000_000;
    let mut events: Vec<(u64, u64, bool)> =
        (0..count).map(|k| (k * gap, k % instances, true)).collect();
    for instance in 0..instances {
        let mut t = instance * interval / instances;
        while t <= span + interval {
            events.push((t, instance, false));
            t += interval;
        }
    }
    events.sort_by_key(|&(t, instance, request)| (t, !request, instance));

    let mut admitted = 0;
    let mut strict_admitted = 0;
    for (t, instance, request) in events {
        let limits = &fleet[usize::try_from(instance).unwrap()];
        if request {
            if limits.check_at(KEY, 1, at(t)).await.unwrap().allowed() {
                admitted += 1;
            }
            if strict.check_at(KEY, 1, at(t)).await.unwrap().allowed() {
                strict_admitted += 1;
            }
        } else {
            limits.store().sync_at(at(t)).await;
        }
    }
    for limits in &fleet {
        assert!(
            !limits.store().breaker_open() && limits.store().local().is_empty(),
            "every decision was Redis's or a lease's"
        );
    }
    let redis_ops = server.command_calls("evalsha") + server.command_calls("eval");
    let cap = (interval_ms * RATE / 1_000) / instances;
    Measured {
        requests: count,
        admitted,
        strict: strict_admitted,
        redis_ops,
        bound: cap * instances,
    }
}
