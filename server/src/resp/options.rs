//! What the Redis-protocol front end accepts: bounds on connections and requests, and an
//! optional password.

use std::time::Duration;

use super::protocol::Bounds;

/// Where the Redis-protocol front end listens when `--resp` is given without an address:
/// smyte/ratelimit's port.
pub const DEFAULT_RESP: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9049);

/// How the Redis-protocol front end serves, and what it refuses.
///
/// ```
/// use tollgate_server::resp::RespOptions;
///
/// let mut options = RespOptions::default();
/// options.password = Some("from-the-environment".into());
/// assert_eq!(options.max_connections, 1_024);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RespOptions {
    /// Required by `AUTH` (or `HELLO … AUTH`) before anything but `AUTH`, `HELLO`, `PING`
    /// and `QUIT`; `None`: no password. The gateway reads it from the environment variable
    /// `[gateway] resp_password_env` names.
    pub password: Option<String>,
    /// Connections served at once; the next is told `ERR max number of clients reached`.
    pub max_connections: usize,
    /// A connection that sends nothing, or reads nothing we send, for this long is closed.
    pub idle_timeout: Duration,
    /// Arguments in one command, its name included.
    pub max_args: usize,
    /// Bytes in one argument, or in one inline command line.
    pub max_arg_bytes: usize,
    /// Bytes one command may occupy while it arrives.
    pub max_command_bytes: usize,
    /// Replies buffered for one connection before they are written out (a client that
    /// pipelines without reading waits for its own replies to drain).
    pub max_output_bytes: usize,
    /// TLS on the listener (`[gateway.resp_tls]`; clients connect with `redis-cli --tls`):
    /// the handshake is bounded by `idle_timeout` and holds a connection slot.
    pub tls: Option<std::sync::Arc<crate::tls::TlsAcceptor>>,
}

impl Default for RespOptions {
    fn default() -> Self {
        RespOptions {
            password: None,
            max_connections: 1_024,
            idle_timeout: Duration::from_secs(300),
            max_args: 64,
            max_arg_bytes: 16 * 1024,
            max_command_bytes: 256 * 1024,
            max_output_bytes: 64 * 1024,
            tls: None,
        }
    }
}

impl RespOptions {
    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            max_args: self.max_args.max(1),
            max_arg_bytes: self.max_arg_bytes.max(1),
        }
    }
}
