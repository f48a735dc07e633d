//! Which breaker and error counter a decision uses: the one server's, or, on a Redis
//! Cluster, those of the shard (a master and its replicas) serving the bucket's slot — so
//! a dead master sends only its own slots to `on_backend_error`, and the others keep
//! deciding through Redis.
//!
//! The slot ranges come from `CLUSTER SLOTS`, read after connecting and again (at most
//! once a second) after a failure. A shard is named by its slot range, not its master's
//! address, so its breaker survives a failover: the promoted replica serves the same
//! slots, and the breaker's next probe finds it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use redis::Value;

use super::breaker::Breaker;

/// A shard's breaker and error counter.
pub(super) struct Shard {
    /// First and last slot served (both included).
    first: u16,
    last: u16,
    /// The master's `host:port` when the table was read, for the bucket listing.
    pub(super) master: Option<(String, u16)>,
    pub(super) breaker: Arc<Breaker>,
    pub(super) errors: metrics::Counter,
}

/// The shards, by slot.
pub(super) struct Shards {
    table: ArcSwap<Vec<Arc<Shard>>>,
    cluster: bool,
    /// When the table was last refreshed, in seconds of the caller's monotonic clock, +1
    /// (0: never).
    refreshed: AtomicU64,
}

impl Shards {
    /// The one server: one shard, unlabelled metrics.
    pub(super) fn single() -> Shards {
        let shard = Shard {
            first: 0,
            last: u16::MAX,
            master: None,
            breaker: Arc::new(Breaker::new()),
            errors: metrics::counter!("tollgate_backend_errors_total"),
        };
        Shards {
            table: ArcSwap::from_pointee(vec![Arc::new(shard)]),
            cluster: false,
            refreshed: AtomicU64::new(0),
        }
    }

    /// A cluster whose slots are not known yet: one shard for every slot until
    /// [`update`](Self::update) reads them.
    pub(super) fn cluster() -> Shards {
        Shards {
            table: ArcSwap::from_pointee(vec![Arc::new(cluster_shard(0, LAST_SLOT, None))]),
            cluster: true,
            refreshed: AtomicU64::new(0),
        }
    }

    /// The shard serving `key`'s slot.
    pub(super) fn for_key(&self, key: &str) -> Arc<Shard> {
        let table = self.table.load();
        if (!self.cluster || table.len() == 1)
            && let Some(only) = table.first()
        {
            return Arc::clone(only);
        }
        self.for_slot(slot_of(key))
    }

    /// The shard serving `slot`.
    pub(super) fn for_slot(&self, slot: u16) -> Arc<Shard> {
        let table = self.table.load();
        let at = table.partition_point(|shard| shard.last < slot);
        match table.get(at).or_else(|| table.first()) {
            Some(shard) => Arc::clone(shard),
            None => Arc::new(cluster_shard(0, LAST_SLOT, None)),
        }
    }

    /// Every shard, for listings and for the breaker's overall state.
    pub(super) fn all(&self) -> Arc<Vec<Arc<Shard>>> {
        self.table.load_full()
    }

    /// Whether the caller should refresh the table now: never for one server; on a
    /// cluster, when it was never read or was read at least `every` seconds ago. Claims
    /// the refresh, so concurrent callers do not all refresh.
    pub(super) fn refresh_due(&self, now_secs: u64, every: u64) -> bool {
        if !self.cluster {
            return false;
        }
        let last = self.refreshed.load(Ordering::Relaxed);
        (last == 0 || now_secs + 1 >= last.saturating_add(every))
            && self
                .refreshed
                .compare_exchange(last, now_secs + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Makes the next [`refresh_due`](Self::refresh_due) true: the table is known stale
    /// (a node answered `MOVED`).
    pub(super) fn expire(&self) {
        self.refreshed.store(0, Ordering::Relaxed);
    }

    /// Replaces the table with `CLUSTER SLOTS`' reply, keeping the breaker of every shard
    /// whose range is unchanged. A reply that cannot be read changes nothing.
    pub(super) fn update(&self, reply: &Value) {
        let Some(mut ranges) = parse_cluster_slots(reply) else {
            tracing::debug!("CLUSTER SLOTS reply not understood; shard table unchanged");
            return;
        };
        if ranges.is_empty() {
            return;
        }
        ranges.sort_by_key(|range| range.0);
        let old = self.table.load();
        let table = ranges
            .into_iter()
            .map(|(first, last, master)| {
                match old
                    .iter()
                    .find(|shard| shard.first == first && shard.last == last)
                {
                    Some(kept) if kept.master == master => Arc::clone(kept),
                    // Same slots, new master (a failover): keep the breaker's state.
                    Some(kept) => Arc::new(Shard {
                        first,
                        last,
                        master,
                        breaker: Arc::clone(&kept.breaker),
                        errors: kept.errors.clone(),
                    }),
                    None => Arc::new(cluster_shard(first, last, master)),
                }
            })
            .collect();
        self.table.store(Arc::new(table));
    }
}

const LAST_SLOT: u16 = 16_383;

/// Redis Cluster's slot of `key`: CRC16 (XMODEM) of its hash tag — the text between the
/// first `{` and the next `}`, when not empty — or of the whole key, modulo 16,384.
pub(super) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(bytes)) % (LAST_SLOT + 1)
}

fn cluster_shard(first: u16, last: u16, master: Option<(String, u16)>) -> Shard {
    let slots = format!("{first}-{last}");
    Shard {
        first,
        last,
        master,
        breaker: Arc::new(Breaker::for_slots(&slots)),
        errors: metrics::counter!("tollgate_backend_errors_total", "slots" => slots),
    }
}

/// A slot range and its master's `host:port`, if given.
pub(super) type Range = (u16, u16, Option<(String, u16)>);

/// `CLUSTER SLOTS`: an array of `[first, last, [host, port, id, ...], replicas...]`.
pub(super) fn parse_cluster_slots(reply: &Value) -> Option<Vec<Range>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let number = |value: Option<&Value>| match value {
            Some(Value::Int(n)) => u16::try_from(*n).ok(),
            _ => None,
        };
        let first = number(fields.first())?;
        let last = number(fields.get(1))?;
        let master = match fields.get(2) {
            Some(Value::Array(node)) => match (node.first(), number(node.get(1))) {
                (Some(Value::BulkString(host)), Some(port)) => {
                    Some((String::from_utf8_lossy(host).into_owned(), port))
                }
                (Some(Value::SimpleString(host)), Some(port)) => Some((host.clone(), port)),
                _ => None,
            },
            _ => None,
        };
        if first > last || last > LAST_SLOT {
            return None;
        }
        ranges.push((first, last, master));
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(first: i64, last: i64, master: Value) -> Value {
        Value::Array(vec![Value::Int(first), Value::Int(last), master])
    }

    #[test]
    fn a_key_finds_the_shard_of_its_slot_and_breakers_survive_a_failover() {
        let shards = Shards::cluster();
        let reply = Value::Array(vec![
            range(5461, 10922, node("127.0.0.1", 7002)),
            range(0, 5460, node("127.0.0.1", 7001)),
            range(10923, 16383, node("127.0.0.1", 7003)),
        ]);
        shards.update(&reply);
        // "{a}" hashes to slot 15495, "{b}" to 3300 (CRC16 of the tag).
        let a = shards.for_key("t:{a}c");
        assert_eq!(a.master, Some(("127.0.0.1".into(), 7003)));
        let b = shards.for_key("t:{b}c");
        assert_eq!(b.master, Some(("127.0.0.1".into(), 7001)));

        a.breaker
            .failed(a.breaker.now(), 1, std::time::Duration::from_secs(60));
        assert!(a.breaker.is_open());
        assert!(!b.breaker.is_open(), "one shard's outage is its own");

        // The replica of 7003 is promoted: same slots, new master, same breaker state.
        let promoted = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7001)),
            range(5461, 10922, node("127.0.0.1", 7002)),
            range(10923, 16383, node("127.0.0.1", 7006)),
        ]);
        shards.update(&promoted);
        let a = shards.for_key("t:{a}c");
        assert_eq!(a.master, Some(("127.0.0.1".into(), 7006)));
        assert!(a.breaker.is_open());
        assert_eq!(shards.all().len(), 3);
    }

    #[test]
    fn slots_are_redis_clusters() {
        // Values from `CLUSTER KEYSLOT` on a real server.
        assert_eq!(slot_of("foo"), 12_182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(
            slot_of("a{}b"),
            slot_of("a{}b"),
            "an empty tag hashes the whole key"
        );
        assert_ne!(slot_of("x{}"), slot_of(""));
    }

    #[test]
    fn a_reply_that_cannot_be_read_changes_nothing() {
        let shards = Shards::cluster();
        shards.update(&Value::Int(3));
        shards.update(&Value::Array(vec![range(9, 2, node("h", 1))]));
        assert_eq!(shards.all().len(), 1);
        assert!(!Shards::single().refresh_due(5, 1));
        let cluster = Shards::cluster();
        assert!(cluster.refresh_due(5, 30), "never read: due");
        assert!(!cluster.refresh_due(5, 1), "claimed: at most once a second");
        assert!(cluster.refresh_due(6, 1));
        assert!(!cluster.refresh_due(20, 30));
        assert!(cluster.refresh_due(36, 30));
    }
}
