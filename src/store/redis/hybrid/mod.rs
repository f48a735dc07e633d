//! Hybrid mode's state in a store: the leases, this instance's id and the count of
//! instances its heartbeat last saw, the background task's clock, and its metrics. The
//! calls to Redis are `sync`'s; the arithmetic of leases is `leases`'.

mod leases;
mod sync;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::clock::{Timestamp, duration_nanos};
use leases::Leases;

/// How often an instance announces itself.
pub(super) const HEARTBEAT_EVERY_NANOS: u64 = 2_000_000_000;
/// An instance not heard from for this long no longer counts.
pub(super) const PEER_TTL_MICROS: u64 = 5_000_000;

/// Announces an instance and counts those heard from lately. KEYS[1] the set; ARGV[1]
/// this instance; ARGV[2] now in µs ("" for the server's TIME); ARGV[3] the TTL in µs.
const HEARTBEAT: &str = r#"
local now = tonumber(ARGV[2])
if now == nil then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local ttl = tonumber(ARGV[3])
redis.call("ZADD", KEYS[1], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - ttl)
redis.call("PEXPIRE", KEYS[1], math.ceil(ttl / 1000) * 2)
return redis.call("ZCARD", KEYS[1])
"#;

/// Instance ids made in this process so far (several stores in one process are
/// several instances).
static MADE: AtomicU64 = AtomicU64::new(0);

/// Hybrid mode's state in a store.
pub(super) struct Hybrid {
    pub(super) leases: Leases,
    pub(super) id: String,
    /// Instances sharing the Redis at the last heartbeat; 0 until one has answered.
    pub(super) peers: AtomicU64,
    /// When (decision clock, ns) the last heartbeat was sent; 0: never.
    pub(super) last_heartbeat: AtomicU64,
    /// Heartbeats Redis answered.
    pub(super) heartbeats: AtomicU64,
    pub(super) running: AtomicBool,
    /// The latest decision time seen, and when: the background task's clock.
    pub(super) seen: Mutex<Option<(Timestamp, Instant)>>,
    pub(super) heartbeat: redis::Script,
    pub(super) decided_locally: metrics::Counter,
    pub(super) decided_by_redis: metrics::Counter,
    pub(super) instances: metrics::Gauge,
}

impl Hybrid {
    pub(super) fn new() -> Hybrid {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Hybrid {
            leases: Leases::default(),
            id: format!(
                "{}-{started:x}-{}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            ),
            peers: AtomicU64::new(0),
            last_heartbeat: AtomicU64::new(0),
            heartbeats: AtomicU64::new(0),
            running: AtomicBool::new(false),
            seen: Mutex::new(None),
            heartbeat: redis::Script::new(HEARTBEAT),
            decided_locally: metrics::counter!("tollgate_hybrid_decisions_total", "where" => "local"),
            decided_by_redis: metrics::counter!("tollgate_hybrid_decisions_total", "where" => "redis"),
            instances: metrics::gauge!("tollgate_hybrid_instances"),
        }
    }

    /// Instances sharing the Redis, as last counted (0: not yet).
    pub(super) fn peers(&self) -> u64 {
        self.peers.load(Ordering::Relaxed)
    }

    /// Whether the other instances count this one by now: it has had two heartbeats, a
    /// heartbeat period apart, so each of them has had one since it first announced
    /// itself. Until then it leases nothing (the others' shares are still of the old
    /// count).
    pub(super) fn known_to_others(&self) -> bool {
        self.heartbeats.load(Ordering::Relaxed) >= 2
    }

    /// The background task's "now": the latest decision time plus the time since.
    pub(super) fn now(&self) -> Option<Timestamp> {
        let seen = *self.seen.lock();
        seen.map(|(at, when)| {
            Timestamp::from_unix_nanos(
                at.as_unix_nanos()
                    .saturating_add(duration_nanos(when.elapsed())),
            )
        })
    }

    pub(super) fn saw(&self, now: Timestamp) {
        let mut seen = self.seen.lock();
        if seen.is_none_or(|(at, _)| at < now) {
            *seen = Some((now, Instant::now()));
        }
    }
}
