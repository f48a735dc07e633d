//! Redis over TLS verified against `[store.tls] server_name`: a Redis whose certificate
//! names a DNS host (`redis.internal`) reached by address (`rediss://10.0.0.5:6380`), a
//! Cluster whose nodes announce addresses, Sentinel naming its master by address.
//!
//! The `redis` crate takes the TLS name from the address it connects to, and offers no
//! way to give another (its connection manager takes no resolver; its cluster and
//! Sentinel clients take the addresses the servers announce). So with `server_name` set,
//! the store makes its TLS connections itself — the TCP connection to the address, the
//! handshake with rustls against `server_name` (sent as SNI), the CA file or the system's
//! roots and the client certificate — and hands the `redis` crate the stream:
//!
//! - one server, a Sentinel's master and a Cluster's masters: [`NamedLink`], a multiplexed
//!   connection made on first use and made again after it fails (the connection
//!   manager's part, without its background retries: the next call reconnects, within
//!   the connection timeout, and the store's breaker spares a dead server the attempts);
//! - the sentinels: asked for the master's address ([`NamedSentinels`]) on such
//!   connections, as the `redis` crate's Sentinel client would;
//! - the cluster client: [`NamedClusterLink`], its connection type. It is given no
//!   settings of its own but the address, so the name it verifies comes from a registry
//!   of the nodes the store has read from `CLUSTER SLOTS` ([`register_nodes`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use parking_lot::{Mutex, RwLock};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisError,
    RedisFuture, RedisResult, Value,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

/// Why a connection could not be set up.
type Made<T> = Result<T, String>;

/// How this store's TLS connections are made and verified: the name, and rustls's
/// configuration (roots, client certificate).
pub(super) struct Naming {
    name: ServerName<'static>,
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Naming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Naming")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Naming {
    /// Connections verified against `server_name`, trusting `certificates`' CA (or the
    /// system's roots) and presenting its client certificate, both checked already.
    pub(super) fn new(server_name: &str, certificates: &redis::TlsCertificates) -> Made<Naming> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|error| format!("[store.tls] server_name \"{server_name}\": {error}"))?;
        let mut roots = rustls::RootCertStore::empty();
        match &certificates.root_cert {
            Some(pem) => {
                for certificate in CertificateDer::pem_slice_iter(pem).flatten() {
                    roots
                        .add(certificate)
                        .map_err(|error| format!("[store.tls] ca_file: {error}"))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS to Redis: {error}"))?
            .with_root_certificates(roots);
        let config = match &certificates.client_tls {
            Some(client) => {
                let chain = CertificateDer::pem_slice_iter(&client.client_cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| format!("[store.tls] cert_file: {error}"))?;
                let key = PrivateKeyDer::from_pem_slice(&client.client_key)
                    .map_err(|error| format!("[store.tls] key_file: {error}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|error| format!("[store.tls] cert_file and key_file: {error}"))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Naming {
            name,
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// A TLS stream to `host:port`, its certificate verified against the name.
    async fn dial(
        &self,
        host: &str,
        port: u16,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
        tcp.set_nodelay(true)?;
        self.connector.connect(self.name.clone(), tcp).await
    }

    /// A multiplexed connection to `host:port` logged in as `redis` says, made within
    /// `timeout`; its driver runs on the runtime until the connection closes.
    async fn connect(
        &self,
        host: &str,
        port: u16,
        redis: &RedisConnectionInfo,
        config: AsyncConnectionConfig,
        timeout: Duration,
    ) -> RedisResult<MultiplexedConnection> {
        let made = async {
            let stream = self.dial(host, port).await?;
            let (connection, driver) =
                MultiplexedConnection::new_with_config(redis, stream, config).await?;
            tokio::spawn(driver);
            Ok::<_, RedisError>(connection)
        };
        match tokio::time::timeout(timeout, made).await {
            Ok(made) => made,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connecting to {host}:{port} over TLS took over {timeout:?}"),
            ))),
        }
    }
}

/// The host, port and login of a `rediss://` URL (the credentials of `[store]` applied by
/// the caller).
pub(super) fn address_of(url: &str) -> Made<(String, u16, RedisConnectionInfo)> {
    let info = url
        .into_connection_info()
        .map_err(|error| format!("Redis URL \"{url}\": {error}"))?;
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
        _ => return Err(format!("Redis URL \"{url}\": not a TCP address")),
    };
    Ok((host, port, info.redis_settings().clone()))
}

/// A multiplexed connection to one server over TLS verified against the name: made on
/// first use, made again on the call after one that found it broken. Cheap to clone;
/// clones share the connection.
#[derive(Clone)]
pub(super) struct NamedLink(Arc<LinkState>);

struct LinkState {
    naming: Arc<Naming>,
    host: String,
    port: u16,
    redis: RedisConnectionInfo,
    response_timeout: Duration,
    connection_timeout: Duration,
    current: ArcSwapOption<MultiplexedConnection>,
    /// One connection attempt at a time; the others wait for it.
    connecting: tokio::sync::Mutex<()>,
    /// When the last attempt failed: another is not made within [`RETRY_AFTER`].
    failed_at: Mutex<Option<Instant>>,
}

/// How long after a failed connection attempt calls fail at once rather than try again.
const RETRY_AFTER: Duration = Duration::from_millis(100);

impl NamedLink {
    /// A link to `host:port` (nothing connects yet).
    pub(super) fn new(
        naming: Arc<Naming>,
        host: String,
        port: u16,
        redis: RedisConnectionInfo,
        response_timeout: Duration,
        connection_timeout: Duration,
    ) -> NamedLink {
        NamedLink(Arc::new(LinkState {
            naming,
            host,
            port,
            redis,
            response_timeout,
            connection_timeout,
            current: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            failed_at: Mutex::new(None),
        }))
    }

    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(current) = self.0.current.load_full() {
            return Ok((*current).clone());
        }
        let _turn = self.0.connecting.lock().await;
        if let Some(current) = self.0.current.load_full() {
            return Ok((*current).clone());
        }
        if self
            .0
            .failed_at
            .lock()
            .is_some_and(|at| at.elapsed() < RETRY_AFTER)
        {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!(
                    "{}:{} was unreachable a moment ago",
                    self.0.host, self.0.port
                ),
            )));
        }
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.0.response_timeout))
            .set_connection_timeout(Some(self.0.connection_timeout));
        match self
            .0
            .naming
            .connect(
                &self.0.host,
                self.0.port,
                &self.0.redis,
                config,
                self.0.connection_timeout,
            )
            .await
        {
            Ok(connection) => {
                *self.0.failed_at.lock() = None;
                self.0.current.store(Some(Arc::new(connection.clone())));
                Ok(connection)
            }
            Err(error) => {
                *self.0.failed_at.lock() = Some(Instant::now());
                Err(error)
            }
        }
    }

    /// After `error`: a connection that is gone is not used again.
    fn failed(&self, error: &RedisError) {
        if error.is_connection_dropped() || error.is_io_error() || error.is_unrecoverable_error() {
            self.0.current.store(None);
        }
    }
}

impl NamedLink {
    /// `call` on the connection (made first if need be); a connection the call found
    /// broken is not used again.
    async fn through<T>(
        &self,
        call: impl AsyncFnOnce(&mut MultiplexedConnection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut connection = self.connection().await?;
        let result = call(&mut connection).await;
        if let Err(error) = &result {
            self.failed(error);
        }
        result
    }
}

impl ConnectionLike for NamedLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.through(async |connection| connection.req_packed_command(cmd).await))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.through(async move |connection| {
            connection
                .req_packed_commands(pipeline, offset, count)
                .await
        }))
    }

    fn get_db(&self) -> i64 {
        self.0.redis.db()
    }
}

/// The sentinels, asked over TLS verified against the name for the master's address.
pub(super) struct NamedSentinels {
    pub(super) naming: Arc<Naming>,
    /// Each sentinel's host, port and login.
    pub(super) sentinels: Vec<(String, u16, RedisConnectionInfo)>,
    pub(super) master_name: String,
    /// How the master is logged into (`[store]`'s user and password).
    pub(super) master_login: RedisConnectionInfo,
}

impl NamedSentinels {
    /// The master's address, from the first sentinel that names one within `timeout`.
    pub(super) async fn master(&self, timeout: Duration) -> RedisResult<(String, u16)> {
        let mut last = None;
        for (host, port, login) in &self.sentinels {
            let asked = async {
                let mut connection = self
                    .naming
                    .connect(host, *port, login, AsyncConnectionConfig::new(), timeout)
                    .await?;
                let mut command = redis::cmd("SENTINEL");
                command
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master_name);
                command
                    .query_async::<Option<(String, u16)>>(&mut connection)
                    .await
            };
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(Some(address))) => return Ok(address),
                Ok(Ok(None)) => {
                    last = Some(RedisError::from((
                        redis::ErrorKind::Client,
                        "no master by that name",
                        format!(
                            "sentinel {host}:{port} knows no master \"{}\"",
                            self.master_name
                        ),
                    )));
                }
                Ok(Err(error)) => last = Some(error),
                Err(_) => {
                    last = Some(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("sentinel {host}:{port} did not answer within {timeout:?}"),
                    )));
                }
            }
        }
        Err(last
            .unwrap_or_else(|| RedisError::from((redis::ErrorKind::Client, "no sentinel to ask"))))
    }
}

/// Every node `CLUSTER SLOTS` names in `reply`: each range's master and replicas.
pub(super) fn nodes_in(reply: &Value) -> Vec<(String, u16)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut nodes = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        for node in fields.iter().skip(2) {
            let Value::Array(node) = node else { continue };
            let host = match node.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => continue,
            };
            if let Some(Value::Int(port)) = node.get(1)
                && let Ok(port) = u16::try_from(*port)
            {
                nodes.push((host, port));
            }
        }
    }
    nodes
}

/// The name each Cluster node's certificate is verified against, by the address the
/// cluster announces it at (the cluster client's connections are made knowing only that).
static CLUSTER_NODES: LazyLock<RwLock<NodeNamings>> = LazyLock::new(|| RwLock::new(HashMap::new()));

/// A node's address → how its TLS is named.
type NodeNamings = HashMap<(String, u16), Arc<Naming>>;

/// Has connections to `nodes` verified as `naming` says.
pub(super) fn register_nodes(naming: &Arc<Naming>, nodes: impl IntoIterator<Item = (String, u16)>) {
    let mut registry = CLUSTER_NODES.write();
    for node in nodes {
        registry.insert(node, Arc::clone(naming));
    }
}

/// The naming of `node`, or — for a node the store has not read yet — the one naming every
/// registered node shares (one store per process, as a service has).
fn naming_of(host: &str, port: u16) -> Option<Arc<Naming>> {
    let registry = CLUSTER_NODES.read();
    if let Some(naming) = registry.get(&(host.to_owned(), port)) {
        return Some(Arc::clone(naming));
    }
    let mut all = registry.values();
    let first = all.next()?;
    all.all(|naming| Arc::ptr_eq(naming, first))
        .then(|| Arc::clone(first))
}

/// The cluster client's connection to a node over TLS verified against the name the
/// registry gives the node's address.
#[derive(Clone)]
pub(super) struct NamedClusterLink(MultiplexedConnection);

impl redis::cluster_async::Connect for NamedClusterLink {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            let (host, port) = match info.addr() {
                redis::ConnectionAddr::Tcp(host, port)
                | redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
                _ => {
                    return Err(RedisError::from((
                        redis::ErrorKind::Client,
                        "a Cluster node at a Unix socket cannot speak TLS",
                    )));
                }
            };
            let Some(naming) = naming_of(&host, port) else {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "no server_name known for this node",
                    format!("{host}:{port}"),
                )));
            };
            let timeout = Duration::from_secs(1);
            naming
                .connect(&host, port, info.redis_settings(), config, timeout)
                .await
                .map(NamedClusterLink)
        })
    }
}

impl ConnectionLike for NamedClusterLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}
