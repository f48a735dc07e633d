//! What the gateway is asked to do, and what that comes to: flags win over the config's
//! `[gateway]` table, which wins over the defaults (SPEC §8).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;

use crate::config::GatewaySettings;

/// Where the proxy listens unless told otherwise.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
/// Where the admin listener listens unless told otherwise.
pub const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9090);
/// How long to wait for the upstream's response headers unless told otherwise.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits for requests in flight.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers (slowloris defence).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the gateway is asked to do. `None` fields fall back to the config's `[gateway]`
/// table, then to the defaults: flags win.
///
/// ```
/// use tollgate::gateway::{DEFAULT_LISTEN, GatewayOptions};
///
/// let mut options = GatewayOptions::new(["config/gateway.toml"]);
/// options.listen = Some("127.0.0.1:0".parse()?);
/// assert_ne!(options.listen, Some(DEFAULT_LISTEN));
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GatewayOptions {
    /// Config files, layered in order.
    pub config: Vec<PathBuf>,
    /// The proxy's address.
    pub listen: Option<SocketAddr>,
    /// The upstream; `None` anywhere means the built-in demo upstream.
    pub upstream: Option<Uri>,
    /// The admin listener's address.
    pub admin: Option<SocketAddr>,
    /// How long to wait for the upstream's response headers.
    pub upstream_timeout: Option<Duration>,
    /// A bearer token for the admin listener.
    pub admin_token: Option<String>,
    /// The Redis-protocol front end's address; `None` here and in `[gateway] resp`: off.
    pub resp: Option<SocketAddr>,
    /// The address of Envoy's rate limit service (gRPC); `None` here and in
    /// `[gateway] grpc`: off.
    pub grpc: Option<SocketAddr>,
    /// How long a shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
    /// How long a client has to send a request's headers, on a new connection or between
    /// requests on a kept-alive one; past it the connection is closed. A client trickling
    /// its headers a byte at a time (slowloris) holds a connection no longer than this.
    pub header_read_timeout: Duration,
}

impl GatewayOptions {
    /// Options reading `config`, everything else from the config or the defaults.
    pub fn new<P: Into<PathBuf>>(config: impl IntoIterator<Item = P>) -> GatewayOptions {
        GatewayOptions {
            config: config.into_iter().map(Into::into).collect(),
            listen: None,
            upstream: None,
            admin: None,
            upstream_timeout: None,
            admin_token: None,
            resp: None,
            grpc: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }

    /// Fills what the options leave open from the config's `[gateway]` table, then from
    /// the defaults.
    pub(super) fn resolve(&self, table: &GatewaySettings) -> Resolved {
        Resolved {
            listen: self.listen.or(table.listen).unwrap_or(DEFAULT_LISTEN),
            admin: self.admin.or(table.admin).unwrap_or(DEFAULT_ADMIN),
            upstream: self.upstream.clone().or_else(|| table.upstream.clone()),
            upstream_timeout: self
                .upstream_timeout
                .or(table.upstream_timeout)
                .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT),
            admin_token: self
                .admin_token
                .clone()
                .or_else(|| table.admin_token.clone()),
            header_read_timeout: self.header_read_timeout,
            resp: self.resp.or(table.resp),
            resp_password_env: table.resp_password_env.clone(),
            grpc: self.grpc.or(table.grpc),
            grpc_response_headers: table.grpc_response_headers.unwrap_or(false),
        }
    }
}

/// The options once flags, `[gateway]` and defaults have been weighed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Resolved {
    pub(super) listen: SocketAddr,
    pub(super) admin: SocketAddr,
    /// `None`: the built-in demo upstream.
    pub(super) upstream: Option<Uri>,
    pub(super) upstream_timeout: Duration,
    pub(super) admin_token: Option<String>,
    pub(super) header_read_timeout: Duration,
    /// `None`: no Redis-protocol front end.
    pub(super) resp: Option<SocketAddr>,
    pub(super) resp_password_env: Option<String>,
    /// `None`: no gRPC front end.
    pub(super) grpc: Option<SocketAddr>,
    pub(super) grpc_response_headers: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_table_which_wins_over_the_defaults() {
        let table = crate::config::RuleSet::from_toml(
            "[gateway]\nlisten = \"127.0.0.1:7000\"\nadmin = \"127.0.0.1:7001\"\n\
             upstream_timeout = \"5s\"\nadmin_token = \"from-config\"\n",
        )
        .unwrap()
        .gateway()
        .clone();
        let mut options = GatewayOptions::new(["gateway.toml"]);
        options.listen = Some("127.0.0.1:6000".parse().unwrap());
        let resolved = options.resolve(&table);
        assert_eq!(resolved.listen.port(), 6000, "the flag wins");
        assert_eq!(resolved.admin.port(), 7001, "the table fills the gap");
        assert_eq!(resolved.upstream_timeout, Duration::from_secs(5));
        assert_eq!(resolved.admin_token.as_deref(), Some("from-config"));
        assert_eq!(
            resolved.upstream, None,
            "nothing anywhere: the demo upstream"
        );
        let defaults = GatewayOptions::new(["gateway.toml"]).resolve(&GatewaySettings::default());
        assert_eq!(
            (defaults.listen, defaults.admin, defaults.upstream_timeout),
            (DEFAULT_LISTEN, DEFAULT_ADMIN, DEFAULT_UPSTREAM_TIMEOUT)
        );
    }
}
