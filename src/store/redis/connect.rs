//! The `redis` crate's clients as `[store]` describes them: the user and password from
//! [`RedisConnection`], TLS for `rediss://` (a CA file or the system's roots, a client
//! certificate: feature `tls`, rustls), and for Sentinel, the sentinels and the master's
//! name; and the multiplexed connections to one server, with the store's timeouts.
//! Certificate files are read here, when the store is made.

use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

use crate::config::{RedisConnection, RedisSettings, RedisTls};

/// Why a client could not be made.
pub(super) type Made<T> = Result<T, String>;

/// A client for the one server `url` names.
pub(super) fn single(url: &str, connection: &RedisConnection) -> Made<redis::Client> {
    let tls = url.starts_with("rediss://");
    let url = fragment(
        url,
        tls && connection.tls.danger_accept_invalid_certificates,
    );
    let mut info = url
        .as_str()
        .into_connection_info()
        .map_err(|error| format!("Redis URL \"{url}\": {error}"))?;
    let mut redis = info.redis_settings().clone();
    if let Some(user) = &connection.username {
        redis = redis.set_username(user);
    }
    if let Some(password) = &connection.password {
        redis = redis.set_password(password.expose());
    }
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

/// A client for the Redis Cluster whose seed nodes `settings.nodes` lists.
pub(super) fn cluster(settings: &RedisSettings) -> Made<redis::cluster::ClusterClientBuilder> {
    let connection = &settings.connection;
    let tls = settings
        .nodes
        .iter()
        .any(|url| url.starts_with("rediss://"));
    let insecure = tls && connection.tls.danger_accept_invalid_certificates;
    let nodes: Vec<String> = settings
        .nodes
        .iter()
        .map(|url| fragment(url, insecure))
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

/// A client asking the sentinels for the master named `master_name`. The sentinels and the
/// master speak TLS when the sentinels' URLs are `rediss://`.
pub(super) fn sentinel(connection: &RedisConnection) -> Made<SentinelClient> {
    let Some(master) = &connection.master_name else {
        return Err("backend = \"redis-sentinel\" needs master_name".into());
    };
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

/// `settings.connections` multiplexed connections to the server `client` names, each
/// reconnecting by itself.
pub(super) fn managers(
    client: &redis::Client,
    settings: &RedisSettings,
) -> redis::RedisResult<Vec<ConnectionManager>> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connection_timeout(settings)))
        .set_response_timeout(Some(response_timeout(settings)))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500));
    (0..settings.connections.max(1))
        .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
        .collect()
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
