//! The `redis` crate's clients as `[store]` describes them: the user and password from
//! [`RedisConnection`], TLS for `rediss://` (a CA file or the system's roots, a client
//! certificate: feature `tls`, rustls), and for Sentinel, the sentinels and the master's
//! name; and the multiplexed connections to one server, with the store's timeouts.
//! Certificate files are read here, when the store is made. With `[store.tls]
//! server_name`, TLS connections are made by `named` instead (the `redis` crate takes the
//! name from the address).

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, Value};

#[cfg(feature = "tls")]
use super::named::{NamedLink, NamedSentinels, Naming};
use crate::config::{RedisConnection, RedisSettings, RedisTls};

/// Why a client could not be made.
pub(super) type Made<T> = Result<T, String>;

/// How TLS connections are verified when `[store.tls] server_name` says to: `None` when
/// it does not (or certificates are not verified at all), and the `redis` crate connects.
#[cfg(feature = "tls")]
pub(super) type Named = Option<Arc<Naming>>;
/// Without the `tls` feature there is no TLS to name.
#[cfg(not(feature = "tls"))]
pub(super) type Named = Option<std::convert::Infallible>;

/// The naming `connection`'s `[store.tls]` asks for, its files read and checked now.
#[cfg(feature = "tls")]
pub(super) fn naming(connection: &RedisConnection) -> Made<Named> {
    let tls = &connection.tls;
    match &tls.server_name {
        Some(name) if !tls.danger_accept_invalid_certificates => {
            Ok(Some(Arc::new(Naming::new(name, &certificates(tls)?)?)))
        }
        _ => Ok(None),
    }
}

/// Without the `tls` feature there is no TLS to name.
#[cfg(not(feature = "tls"))]
pub(super) fn naming(_: &RedisConnection) -> Made<Named> {
    Ok(None)
}

/// One server the store talks to: through the `redis` crate's client, or over TLS
/// verified against `server_name`.
#[derive(Clone)]
pub(super) enum Server {
    Client(redis::Client),
    #[cfg(feature = "tls")]
    Named {
        naming: Arc<Naming>,
        host: String,
        port: u16,
        login: redis::RedisConnectionInfo,
    },
}

impl Server {
    /// Where it is, for the log.
    pub(super) fn address(&self) -> String {
        match self {
            Server::Client(client) => format!("{:?}", client.get_connection_info().addr()),
            #[cfg(feature = "tls")]
            Server::Named { host, port, .. } => format!("{host}:{port}"),
        }
    }
}

/// A connection to use: the `redis` crate's connection manager, or a named TLS link.
#[derive(Clone)]
pub(super) enum Link {
    Managed(ConnectionManager),
    #[cfg(feature = "tls")]
    Named(NamedLink),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Managed(connection) => connection.req_packed_command(cmd),
            #[cfg(feature = "tls")]
            Link::Named(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Managed(connection) => connection.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "tls")]
            Link::Named(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Managed(connection) => connection.get_db(),
            #[cfg(feature = "tls")]
            Link::Named(connection) => connection.get_db(),
        }
    }
}

/// The one server `url` names, its TLS verified against `named`'s name when given.
pub(super) fn single(url: &str, connection: &RedisConnection, named: &Named) -> Made<Server> {
    #[cfg(feature = "tls")]
    if let Some(naming) = named
        && url.starts_with("rediss://")
    {
        let (host, port, login) = super::named::address_of(url)?;
        return Ok(Server::Named {
            naming: Arc::clone(naming),
            host,
            port,
            login: with_credentials(login, connection),
        });
    }
    let _ = named;
    client(url, connection).map(Server::Client)
}

/// `login` with `[store]`'s user and password.
pub(super) fn with_credentials(
    mut login: redis::RedisConnectionInfo,
    connection: &RedisConnection,
) -> redis::RedisConnectionInfo {
    if let Some(user) = &connection.username {
        login = login.set_username(user);
    }
    if let Some(password) = &connection.password {
        login = login.set_password(password.expose());
    }
    login
}

/// The `redis` crate's client for the one server `url` names.
fn client(url: &str, connection: &RedisConnection) -> Made<redis::Client> {
    let tls = url.starts_with("rediss://");
    let url = fragment(
        url,
        tls && connection.tls.danger_accept_invalid_certificates,
    );
    let mut info = url
        .as_str()
        .into_connection_info()
        .map_err(|error| format!("Redis URL \"{url}\": {error}"))?;
    let redis = with_credentials(info.redis_settings().clone(), connection);
    info = info.set_redis_settings(redis);
    if tls {
        return with_tls(info, &connection.tls);
    }
    redis::Client::open(info).map_err(|error| format!("Redis URL \"{url}\": {error}"))
}

#[cfg(feature = "tls")]
fn with_tls(info: redis::ConnectionInfo, tls: &RedisTls) -> Made<redis::Client> {
    redis::Client::build_with_tls(info, certificates(tls)?)
        .map_err(|error| format!("Redis over TLS: {error}"))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: redis::ConnectionInfo, _: &RedisTls) -> Made<redis::Client> {
    Err("rediss:// needs tollgate built with its `tls` feature".into())
}

/// A client for the Redis Cluster whose seed nodes `settings.nodes` lists. With `named`,
/// it is given the nodes as plain addresses: its connections ([`NamedClusterLink`]) make
/// TLS themselves.
///
/// [`NamedClusterLink`]: super::named::NamedClusterLink
pub(super) fn cluster(
    settings: &RedisSettings,
    named: &Named,
) -> Made<redis::cluster::ClusterClientBuilder> {
    let connection = &settings.connection;
    let tls = named.is_none()
        && settings
            .nodes
            .iter()
            .any(|url| url.starts_with("rediss://"));
    let insecure = tls && connection.tls.danger_accept_invalid_certificates;
    let nodes: Vec<String> = settings
        .nodes
        .iter()
        .map(|url| match named {
            Some(_) => url.replacen("rediss://", "redis://", 1),
            None => fragment(url, insecure),
        })
        .collect();
    let mut builder = ClusterClient::builder(nodes);
    if let Some(user) = &connection.username {
        builder = builder.username(user);
    }
    if let Some(password) = &connection.password {
        builder = builder.password(password.expose());
    }
    if tls {
        builder = cluster_tls(builder, &connection.tls)?;
    }
    Ok(builder)
}

#[cfg(feature = "tls")]
fn cluster_tls(
    builder: redis::cluster::ClusterClientBuilder,
    tls: &RedisTls,
) -> Made<redis::cluster::ClusterClientBuilder> {
    Ok(builder.certs(certificates(tls)?))
}

#[cfg(not(feature = "tls"))]
fn cluster_tls(
    _: redis::cluster::ClusterClientBuilder,
    _: &RedisTls,
) -> Made<redis::cluster::ClusterClientBuilder> {
    Err("rediss:// needs tollgate built with its `tls` feature".into())
}

/// Who asks the sentinels for the master: the `redis` crate's Sentinel client, or (with
/// `server_name`) the store itself, over TLS verified against the name.
pub(super) enum Sentinels {
    Client(Box<SentinelClient>),
    #[cfg(feature = "tls")]
    Named(NamedSentinels),
}

/// What asks the sentinels for the master named `master_name`. The sentinels and the
/// master speak TLS when the sentinels' URLs are `rediss://`.
pub(super) fn sentinel(connection: &RedisConnection, named: &Named) -> Made<Sentinels> {
    let Some(master) = &connection.master_name else {
        return Err("backend = \"redis-sentinel\" needs master_name".into());
    };
    #[cfg(feature = "tls")]
    if let Some(naming) = named {
        let mut sentinels = Vec::new();
        for url in &connection.sentinels {
            let (host, port, login) = super::named::address_of(url)?;
            let mut login = login;
            if let Some(user) = &connection.sentinel_username {
                login = login.set_username(user);
            }
            if let Some(password) = &connection.sentinel_password {
                login = login.set_password(password.expose());
            }
            sentinels.push((host, port, login));
        }
        if sentinels.is_empty() {
            return Err("backend = \"redis-sentinel\" needs sentinels".into());
        }
        return Ok(Sentinels::Named(NamedSentinels {
            naming: Arc::clone(naming),
            sentinels,
            master_name: master.clone(),
            master_login: with_credentials(redis::RedisConnectionInfo::default(), connection),
        }));
    }
    let _ = named;
    let tls = connection
        .sentinels
        .iter()
        .any(|url| url.starts_with("rediss://"));
    let insecure = tls && connection.tls.danger_accept_invalid_certificates;
    let mut addresses = Vec::new();
    for url in &connection.sentinels {
        let url = fragment(url, insecure);
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|error| format!("sentinel URL \"{url}\": {error}"))?;
        addresses.push(info.addr().clone());
    }
    if addresses.is_empty() {
        return Err("backend = \"redis-sentinel\" needs sentinels".into());
    }
    let mut builder = SentinelClientBuilder::new(addresses, master, SentinelServerType::Master)
        .map_err(|error| format!("Sentinel: {error}"))?;
    if let Some(user) = &connection.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &connection.password {
        builder = builder.set_client_to_redis_password(password.expose());
    }
    if let Some(user) = &connection.sentinel_username {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = &connection.sentinel_password {
        builder = builder.set_client_to_sentinel_password(password.expose());
    }
    if tls {
        builder = sentinel_tls(builder, &connection.tls, insecure)?;
    }
    builder
        .build()
        .map(|client| Sentinels::Client(Box::new(client)))
        .map_err(|error| format!("Sentinel: {error}"))
}

#[cfg(feature = "tls")]
fn sentinel_tls(
    builder: SentinelClientBuilder,
    tls: &RedisTls,
    insecure: bool,
) -> Made<SentinelClientBuilder> {
    let mode = if insecure {
        redis::TlsMode::Insecure
    } else {
        redis::TlsMode::Secure
    };
    Ok(builder
        .set_client_to_sentinel_tls_mode(mode)
        .set_client_to_sentinel_certificates(certificates(tls)?)
        .set_client_to_redis_tls_mode(mode)
        .set_client_to_redis_certificates(certificates(tls)?))
}

#[cfg(not(feature = "tls"))]
fn sentinel_tls(_: SentinelClientBuilder, _: &RedisTls, _: bool) -> Made<SentinelClientBuilder> {
    Err("rediss:// needs tollgate built with its `tls` feature".into())
}

/// `url` with the `redis` crate's `#insecure` fragment when certificates go unverified.
fn fragment(url: &str, insecure: bool) -> String {
    if insecure && !url.contains('#') {
        format!("{url}#insecure")
    } else {
        url.to_owned()
    }
}

/// The CA and client certificate `[store.tls]` names, read and checked now: a file that
/// cannot be read, holds no certificate, or a key no signer can use or that is not the
/// certificate's, is refused here, naming the file, rather than failing every connection
/// later with the `redis` crate's "unexpected error".
#[cfg(feature = "tls")]
fn certificates(tls: &RedisTls) -> Made<redis::TlsCertificates> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path)
            .map_err(|error| format!("[store.tls] {what} {}: {error}", path.display()))
    };
    let chain = |bytes: &[u8], path: &std::path::Path, what: &str| {
        let fail = |reason: String| format!("[store.tls] {what} {}: {reason}", path.display());
        let chain = CertificateDer::pem_slice_iter(bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| fail(format!("not valid PEM ({error})")))?;
        if chain.is_empty() {
            return Err(fail("no certificate in it".into()));
        }
        Ok(chain)
    };
    let root_cert = match &tls.ca_file {
        Some(path) => {
            let bytes = read(path, "ca_file")?;
            chain(&bytes, path, "ca_file")?;
            Some(bytes)
        }
        None => None,
    };
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let client_cert = read(cert, "cert_file")?;
            let client_key = read(key, "key_file")?;
            let certified = chain(&client_cert, cert, "cert_file")?;
            let key_error =
                |reason: String| format!("[store.tls] key_file {}: {reason}", key.display());
            let private = PrivateKeyDer::from_pem_slice(&client_key)
                .map_err(|error| key_error(format!("no private key in it ({error})")))?;
            let signing = rustls::crypto::ring::default_provider()
                .key_provider
                .load_private_key(private)
                .map_err(|error| key_error(format!("not a usable private key ({error})")))?;
            rustls::sign::CertifiedKey::new(certified, signing)
                .keys_match()
                .map_err(|error| {
                    format!(
                        "[store.tls] key_file {} is not the key of cert_file {} ({error})",
                        key.display(),
                        cert.display()
                    )
                })?;
            Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            })
        }
        _ => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// `settings.connections` multiplexed connections to `server`, each reconnecting by
/// itself.
pub(super) fn managers(server: &Server, settings: &RedisSettings) -> redis::RedisResult<Vec<Link>> {
    let count = settings.connections.max(1);
    match server {
        Server::Client(client) => {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connection_timeout(settings)))
                .set_response_timeout(Some(response_timeout(settings)))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(500));
            (0..count)
                .map(|_| {
                    ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                        .map(Link::Managed)
                })
                .collect()
        }
        #[cfg(feature = "tls")]
        Server::Named {
            naming,
            host,
            port,
            login,
        } => Ok((0..count)
            .map(|_| {
                Link::Named(NamedLink::new(
                    Arc::clone(naming),
                    host.clone(),
                    *port,
                    login.clone(),
                    response_timeout(settings),
                    connection_timeout(settings),
                ))
            })
            .collect()),
    }
}

/// How long a connection waits for a reply: the decision timeout (every caller also
/// bounds its own wait by it). In hybrid mode, at least a second: a lease call whose
/// request stopped waiting still charged Redis, and its late reply is kept (see
/// `hybrid::sync`), so the connection must not drop it.
pub(super) fn response_timeout(settings: &RedisSettings) -> Duration {
    if settings.sync == crate::config::SyncMode::Local {
        settings.timeout.max(Duration::from_secs(1))
    } else {
        settings.timeout
    }
}

/// How long making a connection may take: the decision timeout, but at least 250 ms (a
/// connection outlives the decision that made it).
pub(super) fn connection_timeout(settings: &RedisSettings) -> Duration {
    settings.timeout.max(Duration::from_millis(250))
}
