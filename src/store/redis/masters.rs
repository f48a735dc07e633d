//! Connections straight to each Redis Cluster master, so that a decision goes to the
//! master serving its bucket's slot without waiting on the rest of the cluster.
//!
//! The `redis` crate's cluster client, on a connection error to one node, re-reads the
//! slot map and holds every request — to every node — until it has: a master dying for
//! a second stopped decisions on the healthy masters too (the fault suite measured 2.7 s
//! of fallbacks for buckets whose master never failed). Here the store routes by slot
//! itself, through the table `shards` reads with `CLUSTER SLOTS` (in the background; a
//! request never waits for it): `[store] connections` multiplexed connections per master,
//! made on first use, each reconnecting by itself. A dead master's slots fail fast and
//! fall back through their shard's breaker; the others' requests go straight through.
//!
//! The cluster client stays for what needs the cluster as a whole: following a `MOVED`
//! or `ASK` (the table is stale: it is read again at once), loading the script on every
//! node, the listing, and every call before the table has been read.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::connect::{self, Link, Named, managers};
use super::shards::{Shards, slot_of};
use crate::config::{RedisConnection, RedisSettings};
use parking_lot::Mutex;

/// A master's address, as `CLUSTER SLOTS` gives it.
pub(super) type Node = (String, u16);

/// The connections to each master, and the slot table that says which serves a key.
pub(super) struct Masters {
    shards: Arc<Shards>,
    /// `rediss://` when the seed nodes are.
    tls: bool,
    connection: RedisConnection,
    /// With `server_name`: how TLS is named.
    named: Named,
    table: Mutex<HashMap<Node, Arc<[Link]>>>,
    turn: AtomicUsize,
}

impl Masters {
    /// Connections to be made to the masters `shards` names, as `settings` describes
    /// (credentials, TLS).
    pub(super) fn new(settings: &RedisSettings, shards: Arc<Shards>, named: Named) -> Masters {
        Masters {
            shards,
            tls: settings
                .nodes
                .iter()
                .any(|url| url.starts_with("rediss://")),
            connection: settings.connection.clone(),
            named,
            table: Mutex::new(HashMap::new()),
            turn: AtomicUsize::new(0),
        }
    }

    /// A connection to the master serving `key`'s slot; `None` until the slot table has
    /// been read (the cluster client routes meanwhile).
    pub(super) fn for_key(&self, key: &str, settings: &RedisSettings) -> Option<Link> {
        self.for_slot(slot_of(key), settings)
    }

    /// A connection to the master serving `slot`.
    pub(super) fn for_slot(&self, slot: u16, settings: &RedisSettings) -> Option<Link> {
        let shard = self.shards.for_slot(slot);
        self.to(shard.master.as_ref()?, settings)
    }

    /// A connection to `node`, made (lazily: nothing connects yet) on first use.
    pub(super) fn to(&self, node: &Node, settings: &RedisSettings) -> Option<Link> {
        let all = {
            let mut table = self.table.lock();
            match table.get(node) {
                Some(all) => Arc::clone(all),
                None => {
                    let made: Arc<[Link]> = self.connect(node, settings)?.into_iter().collect();
                    table.insert(node.clone(), Arc::clone(&made));
                    made
                }
            }
        };
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        all.get(turn % all.len().max(1)).cloned()
    }

    /// The masters the table names now, those whose breaker is closed first: whom to ask
    /// for the slot table.
    pub(super) fn known(&self) -> Vec<Node> {
        let shards = self.shards.all();
        let mut nodes: Vec<(bool, Node)> = shards
            .iter()
            .filter_map(|shard| Some((shard.breaker.is_open(), shard.master.clone()?)))
            .collect();
        nodes.sort();
        nodes.dedup_by(|a, b| a.1 == b.1);
        nodes.into_iter().map(|(_, node)| node).collect()
    }

    /// Forgets the connections to nodes that no longer serve slots as masters (after a
    /// failover, the old master's).
    pub(super) fn forget_former(&self) {
        let shards = self.shards.all();
        self.table.lock().retain(|node, _| {
            shards
                .iter()
                .any(|shard| shard.master.as_ref() == Some(node))
        });
    }

    /// The table is stale (a `MOVED` came back): read it again at the next decision.
    pub(super) fn moved(&self) {
        self.shards.expire();
    }

    fn connect(&self, (host, port): &Node, settings: &RedisSettings) -> Option<Vec<Link>> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let url = format!("{scheme}://{host}:{port}");
        let server = match connect::single(&url, &self.connection, &self.named) {
            Ok(server) => server,
            Err(error) => {
                tracing::warn!(%error, "cannot address a Redis Cluster master directly");
                return None;
            }
        };
        managers(&server, settings).ok()
    }
}
