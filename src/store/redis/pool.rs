//! The connections to Redis and the decision script on them: for one server, a few
//! multiplexed connections used in turn; for a Redis Cluster, a few to each master, routed
//! by slot (`masters`), beside the `redis` crate's async cluster client (`MOVED`/`ASK`
//! redirections, topology refreshes, reconnects) for what the cluster as a whole
//! answers; behind Sentinel, connections to the master the
//! sentinels name, dropped and asked for again when it stops answering as the master (it
//! died, or a failover demoted it: `READONLY`). Made on first use, with the script loaded
//! up front.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

#[cfg(feature = "tls")]
use super::connect::with_credentials;
use super::connect::{
    Link, Named, Sentinels, Server, connection_timeout, managers, response_timeout,
};
use super::masters::Masters;
#[cfg(feature = "tls")]
use super::named::NamedClusterLink;
use super::scripts::SCRIPT;
use super::shards::Shards;
use crate::config::RedisSettings;

/// Retries the cluster client makes within one request (after a `MOVED` it refreshes its
/// slot map and retries at once; the waits below apply to connection failures).
const CLUSTER_RETRIES: u32 = 3;
/// The cluster client's wait between retries: from 10 ms, doubling, at most 100 ms —
/// not its defaults (1.28 s to 655 s), which would hold a request through a whole
/// failover. Every request is bounded by `[store] timeout` anyway.
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 10;
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 100;

/// What the store connects to.
enum Target {
    Single(Box<Server>),
    /// The cluster client, and (with `server_name`) how its TLS is named.
    Cluster(Box<ClusterClient>, Named),
    Sentinel(Box<Sentinel>),
}

/// The sentinels, and the master they last named with connections to it.
struct Sentinel {
    sentinels: tokio::sync::Mutex<Sentinels>,
    master: ArcSwapOption<Master>,
}

/// Connections to one master.
struct Master {
    connections: Vec<Link>,
    /// When the sentinels named it: it is not dropped again within [`RESOLVE_AT_MOST`].
    resolved: Instant,
}

/// How often, at most, the sentinels are asked again while the master they named fails.
const RESOLVE_AT_MOST: Duration = Duration::from_millis(100);

enum Connections {
    Single(Vec<Link>),
    Cluster(ClusterConnection),
    #[cfg(feature = "tls")]
    NamedCluster(ClusterConnection<NamedClusterLink>),
}

/// One connection to use for a command: to the one server, or to the cluster (routed by
/// the command's key).
#[derive(Clone)]
pub(super) enum Connection {
    Single(Link),
    Cluster(ClusterConnection),
    #[cfg(feature = "tls")]
    NamedCluster(ClusterConnection<NamedClusterLink>),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
            #[cfg(feature = "tls")]
            Connection::NamedCluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            #[cfg(feature = "tls")]
            Connection::NamedCluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
            #[cfg(feature = "tls")]
            Connection::NamedCluster(connection) => connection.get_db(),
        }
    }
}

/// A store's connections and its decision script.
pub(super) struct Pool {
    target: Target,
    connections: tokio::sync::OnceCell<Connections>,
    turn: AtomicUsize,
    script: redis::Script,
    /// Shared concurrency slots (`slots.lua`), loaded on first use.
    slots: redis::Script,
    /// Budgets divided among instances (`shares.lua`), loaded on first use.
    shares: redis::Script,
    /// On a cluster: connections straight to the master of each slot.
    masters: Option<Masters>,
}

impl Pool {
    /// A pool for one server; nothing connects until the first call.
    pub(super) fn single(server: Server) -> Pool {
        Pool::new(Target::Single(Box::new(server)))
    }

    /// A pool for the master `sentinels` name; nothing connects until the first call.
    pub(super) fn sentinel(sentinels: Sentinels) -> Pool {
        Pool::new(Target::Sentinel(Box::new(Sentinel {
            sentinels: tokio::sync::Mutex::new(sentinels),
            master: ArcSwapOption::empty(),
        })))
    }

    /// A pool for the Redis Cluster `builder` describes (its seed nodes, credentials and
    /// TLS, named when `named` says); nothing connects until the first call. Fails only on
    /// a malformed URL.
    pub(super) fn cluster(
        builder: ClusterClientBuilder,
        settings: &RedisSettings,
        shards: Arc<Shards>,
        named: Named,
    ) -> redis::RedisResult<Pool> {
        let client = builder
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
            .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS)
            .retry_wait_formula(CLUSTER_MIN_RETRY_WAIT_MS, 2)
            .connection_timeout(connection_timeout(settings))
            .response_timeout(response_timeout(settings))
            .overall_response_timeout(Some(response_timeout(settings)))
            .build()?;
        let mut pool = Pool::new(Target::Cluster(Box::new(client), named.clone()));
        pool.masters = Some(Masters::new(settings, shards, named));
        Ok(pool)
    }

    fn new(target: Target) -> Pool {
        Pool {
            target,
            connections: tokio::sync::OnceCell::new(),
            turn: AtomicUsize::new(0),
            script: redis::Script::new(SCRIPT),
            slots: redis::Script::new(include_str!("caps/slots.lua")),
            shares: redis::Script::new(include_str!("shares/shares.lua")),
            masters: None,
        }
    }

    /// Whether this is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(..))
    }

    /// A connection to use: for one server, one of the multiplexed connections in turn.
    /// Made (lazily, with the timeouts and count `settings` give at that moment) on first
    /// use; a failed first connection is tried again by the next call.
    pub(super) async fn connection(
        &self,
        settings: &RedisSettings,
    ) -> redis::RedisResult<Connection> {
        if let Target::Sentinel(sentinel) = &self.target {
            let master = match sentinel.master.load_full() {
                Some(master) => master,
                None => self.resolve(sentinel, settings).await?,
            };
            return self.in_turn(&master.connections);
        }
        let connections = self
            .connections
            .get_or_try_init(|| self.connect(settings))
            .await?;
        match connections {
            Connections::Single(all) => self.in_turn(all),
            Connections::Cluster(connection) => Ok(Connection::Cluster(connection.clone())),
            #[cfg(feature = "tls")]
            Connections::NamedCluster(connection) => {
                Ok(Connection::NamedCluster(connection.clone()))
            }
        }
    }

    /// One of `all`, in turn.
    fn in_turn(&self, all: &[Link]) -> redis::RedisResult<Connection> {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        all.get(turn % all.len().max(1))
            .cloned()
            .map(Connection::Single)
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "no connection")))
    }

    /// Asks the sentinels for the master and connects to it (once for concurrent callers).
    async fn resolve(
        &self,
        sentinel: &Sentinel,
        settings: &RedisSettings,
    ) -> redis::RedisResult<Arc<Master>> {
        let mut sentinels = sentinel.sentinels.lock().await;
        if let Some(master) = sentinel.master.load_full() {
            return Ok(master);
        }
        let server = match &mut *sentinels {
            Sentinels::Client(client) => Server::Client(client.async_get_client().await?),
            #[cfg(feature = "tls")]
            Sentinels::Named(named) => {
                let (host, port) = named.master(connection_timeout(settings)).await?;
                Server::Named {
                    naming: Arc::clone(&named.naming),
                    host,
                    port,
                    login: named.master_login.clone(),
                }
            }
        };
        drop(sentinels);
        let connections = managers(&server, settings)?;
        if let Some(first) = connections.first() {
            self.script.load_async(&mut first.clone()).await?;
        }
        let master = Arc::new(Master {
            connections,
            resolved: Instant::now(),
        });
        tracing::info!(address = %server.address(), "Sentinel named the Redis master");
        sentinel.master.store(Some(Arc::clone(&master)));
        Ok(master)
    }

    /// After `error` from the master: if it says the master is gone or no longer the
    /// master, the sentinels are asked again on the next call.
    pub(super) fn failed(&self, error: &redis::RedisError) {
        let Target::Sentinel(sentinel) = &self.target else {
            return;
        };
        let demoted = matches!(
            error.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
            )
        );
        let gone = error.is_io_error()
            || error.is_connection_refusal()
            || error.is_connection_dropped()
            || error.is_timeout();
        if !(demoted || gone) {
            return;
        }
        if let Some(master) = sentinel.master.load_full()
            && master.resolved.elapsed() >= RESOLVE_AT_MOST
        {
            let _ = sentinel
                .master
                .compare_and_swap(&Some(master), None::<Arc<Master>>);
        }
    }

    async fn connect(&self, settings: &RedisSettings) -> redis::RedisResult<Connections> {
        let connections = match &self.target {
            Target::Single(server) => Connections::Single(managers(server, settings)?),
            #[cfg(feature = "tls")]
            Target::Cluster(client, Some(naming)) => {
                self.register_seed_topology(naming, settings).await;
                Connections::NamedCluster(
                    client
                        .get_async_generic_connection::<NamedClusterLink>()
                        .await?,
                )
            }
            Target::Cluster(client, _) => {
                Connections::Cluster(client.get_async_connection().await?)
            }
            Target::Sentinel(_) => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "a Sentinel's master is resolved, not connected once",
                )));
            }
        };
        // Loaded once up front (on a cluster, `SCRIPT LOAD` goes to every node), so
        // decisions are one EVALSHA each; after a server restart, a failover to a replica
        // that never saw it or a SCRIPT FLUSH, NOSCRIPT makes the decision load it again.
        let mut first = match &connections {
            Connections::Single(all) => all.first().cloned().map(Connection::Single),
            Connections::Cluster(connection) => Some(Connection::Cluster(connection.clone())),
            #[cfg(feature = "tls")]
            Connections::NamedCluster(connection) => {
                Some(Connection::NamedCluster(connection.clone()))
            }
        };
        if let Some(connection) = first.as_mut() {
            self.script.load_async(connection).await?;
        }
        Ok(connections)
    }

    /// One `EVALSHA` of the decision script on `key` (`EVAL` again after `NOSCRIPT`).
    pub(super) async fn decide(
        &self,
        settings: &RedisSettings,
        key: &str,
        args: &[String],
    ) -> redis::RedisResult<Vec<i64>> {
        self.invoke(&self.script, settings, &[key], args).await
    }

    /// One call of the decision script deciding several buckets (`keys`, one server: never
    /// a cluster) together; `args` as [`scripts::many_args`](super::scripts::many_args)
    /// makes them. Each bucket's reply, in order.
    pub(super) async fn decide_many(
        &self,
        settings: &RedisSettings,
        keys: &[String],
        args: &[String],
    ) -> redis::RedisResult<Vec<Vec<i64>>> {
        let mut invocation = self.script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let mut connection = self.connection(settings).await?;
        let result = invocation.invoke_async(&mut connection).await;
        if let Err(error) = &result {
            self.failed(error);
        }
        result
    }

    /// One call of the shared-slots script on `key` (see `slots.lua`).
    pub(super) async fn slots(
        &self,
        settings: &RedisSettings,
        key: &str,
        args: &[String],
    ) -> redis::RedisResult<Vec<i64>> {
        self.invoke(&self.slots, settings, &[key], args).await
    }

    /// One call of the divided-budgets script on `keys`, which share a hash tag (see
    /// `shares.lua`).
    pub(super) async fn shares(
        &self,
        settings: &RedisSettings,
        keys: &[&str],
        args: &[String],
    ) -> redis::RedisResult<Vec<i64>> {
        self.invoke(&self.shares, settings, keys, args).await
    }

    /// One call of `script` on `keys` (on a cluster, all in the first one's slot).
    async fn invoke(
        &self,
        script: &redis::Script,
        settings: &RedisSettings,
        keys: &[&str],
        args: &[String],
    ) -> redis::RedisResult<Vec<i64>> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        if let Some(masters) = &self.masters
            && let Some(first) = keys.first()
            && let Some(mut direct) = masters.for_key(first, settings)
        {
            let result = invocation.invoke_async(&mut direct).await;
            if !result
                .as_ref()
                .is_err_and(|error| error.redirect_node().is_some())
            {
                return result;
            }
            // The slot moved: the cluster client follows, and the table is read again.
            masters.moved();
        }
        let mut connection = self.connection(settings).await?;
        let result = invocation.invoke_async(&mut connection).await;
        if let Err(error) = &result {
            self.failed(error);
        }
        result
    }

    /// One `EVALSHA` per `(key, args)` in one pipeline, each command's reply or error in
    /// its place: to the one server, or on a cluster to the master of `slot` (every key
    /// of the batch is expected there; one that moved answers `MOVED`).
    pub(super) async fn pipeline(
        &self,
        settings: &RedisSettings,
        calls: &[(String, Vec<String>)],
        slot: u16,
    ) -> redis::RedisResult<Vec<Value>> {
        let mut pipeline = redis::pipe();
        pipeline.ignore_errors();
        for (key, args) in calls {
            let command = pipeline
                .cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(1)
                .arg(key);
            for arg in args {
                command.arg(arg.as_str());
            }
        }
        let direct = self
            .masters
            .as_ref()
            .and_then(|masters| masters.for_slot(slot, settings));
        if let Some(mut direct) = direct {
            // A key that moved answers `MOVED` in its place: sent again next round, once
            // the table has been read again.
            return pipeline.query_async(&mut direct).await;
        }
        match self.connection(settings).await? {
            Connection::Single(mut connection) => {
                let result: redis::RedisResult<Vec<Value>> =
                    pipeline.query_async(&mut connection).await;
                match &result {
                    Err(error) => self.failed(error),
                    // Errors were kept in their places: a demoted master answers each one
                    // `READONLY`.
                    Ok(values) => {
                        if let Some(Value::ServerError(error)) = values
                            .iter()
                            .find(|value| matches!(value, Value::ServerError(_)))
                        {
                            self.failed(&redis::RedisError::from(error.clone()));
                        }
                    }
                }
                result
            }
            Connection::Cluster(mut connection) => {
                connection
                    .route_pipeline(pipeline, 0, calls.len(), master_of(slot))
                    .await
            }
            #[cfg(feature = "tls")]
            Connection::NamedCluster(mut connection) => {
                connection
                    .route_pipeline(pipeline, 0, calls.len(), master_of(slot))
                    .await
            }
        }
    }

    /// `CLUSTER SLOTS`, asked of each master the table knows in turn (each within
    /// `wait`), then of the cluster client: a dead master, or the cluster client busy
    /// re-reading the topology, does not hold the answer up.
    pub(super) async fn cluster_slots(
        &self,
        settings: &RedisSettings,
        wait: Duration,
    ) -> Option<Value> {
        let ask = |mut connection: Connection| async move {
            let mut command = redis::cmd("CLUSTER");
            command.arg("SLOTS");
            let asked = command.query_async::<Value>(&mut connection);
            match tokio::time::timeout(wait, asked).await {
                Ok(Ok(reply)) => Some(reply),
                _ => None,
            }
        };
        let mut reply = None;
        if let Some(masters) = &self.masters {
            for node in masters.known() {
                if let Some(direct) = masters.to(&node, settings)
                    && let Some(read) = ask(Connection::Single(direct)).await
                {
                    reply = Some(read);
                    break;
                }
            }
        }
        if reply.is_none() {
            let connection = tokio::time::timeout(wait, self.connection(settings))
                .await
                .ok()?
                .ok()?;
            reply = ask(connection).await;
        }
        // Nodes that joined (a replica promoted, a node added) are verified by name too.
        #[cfg(feature = "tls")]
        if let (Target::Cluster(_, Some(naming)), Some(read)) = (&self.target, &reply) {
            super::named::register_nodes(naming, super::named::nodes_in(read));
        }
        reply
    }

    /// Before the cluster client's first connection with `server_name`: the nodes a seed
    /// names in `CLUSTER SLOTS`, registered for its connections to verify (they know
    /// only the addresses). A seed that does not answer leaves it to the nodes read later.
    #[cfg(feature = "tls")]
    async fn register_seed_topology(
        &self,
        naming: &Arc<super::named::Naming>,
        settings: &RedisSettings,
    ) {
        let mut seeds = Vec::new();
        for url in &settings.nodes {
            if let Ok((host, port, login)) = super::named::address_of(url) {
                seeds.push((host, port, login));
            }
        }
        super::named::register_nodes(naming, seeds.iter().map(|(h, p, _)| (h.clone(), *p)));
        for (host, port, login) in seeds {
            let login = with_credentials(login, &settings.connection);
            let server = Server::Named {
                naming: Arc::clone(naming),
                host,
                port,
                login,
            };
            let Ok(links) = managers(&server, settings) else {
                continue;
            };
            let Some(mut link) = links.into_iter().next() else {
                continue;
            };
            let mut command = redis::cmd("CLUSTER");
            command.arg("SLOTS");
            let asked = command.query_async::<Value>(&mut link);
            if let Ok(Ok(reply)) = tokio::time::timeout(connection_timeout(settings), asked).await {
                super::named::register_nodes(naming, super::named::nodes_in(&reply));
                return;
            }
        }
    }

    /// After the slot table changed: connections to former masters are dropped.
    pub(super) fn slots_changed(&self) {
        if let Some(masters) = &self.masters {
            masters.forget_former();
        }
    }

    /// Loads the decision script (on a cluster, on every node) after `NOSCRIPT`.
    pub(super) async fn load_script(&self, settings: &RedisSettings) -> redis::RedisResult<()> {
        let mut connection = self.connection(settings).await?;
        self.script.load_async(&mut connection).await.map(|_| ())
    }

    /// The script's SHA1, for `EVALSHA` in a pipeline.
    pub(super) fn script_hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// The route of a pipeline to the master of `slot`.
fn master_of(slot: u16) -> redis::cluster_routing::SingleNodeRoutingInfo {
    redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(redis::cluster_routing::Route::new(
        slot,
        redis::cluster_routing::SlotAddr::Master,
    ))
}
