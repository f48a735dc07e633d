//! TLS for the service, with rustls (no OpenSSL, no system library): each listener's
//! certificate, re-read when it changes, with client certificates required from a CA when
//! asked (`acceptor`), and the client side for HTTPS upstreams (`upstream`).
//!
//! A listener's TLS is a table of the config: `[gateway.tls]` (the proxy and the admin
//! listener), `[gateway.resp_tls]`, `[gateway.grpc_tls]`:
//!
//! ```toml
//! [gateway.tls]
//! cert_file = "/etc/tollgate/tls/cert.pem"    # the certificate chain, PEM
//! key_file = "/etc/tollgate/tls/key.pem"      # its private key, PEM
//! client_ca_file = "/etc/tollgate/tls/ca.pem" # optional: require client certificates
//! ```

mod acceptor;
mod upstream;

use std::path::PathBuf;

use serde::Deserialize;

pub use acceptor::{TlsAcceptor, TlsError};
pub(crate) use upstream::client_config;

/// One listener's TLS files.
///
/// ```
/// let tls = tollgate_server::tls::ListenerTls::new("cert.pem", "key.pem");
/// assert!(tls.client_ca_file.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ListenerTls {
    /// The certificate chain (PEM), leaf first.
    #[schemars(with = "String")]
    pub cert_file: PathBuf,
    /// The certificate's private key (PEM).
    #[schemars(with = "String")]
    pub key_file: PathBuf,
    /// CA certificates (PEM) that clients' certificates must chain to; set, a client
    /// without one is refused (mutual TLS).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub client_ca_file: Option<PathBuf>,
}

impl ListenerTls {
    /// A certificate and its key, no client certificates asked for.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> ListenerTls {
        ListenerTls {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
        }
    }

    /// The same, requiring client certificates that chain to `ca_file`.
    pub fn with_client_ca(mut self, ca_file: impl Into<PathBuf>) -> ListenerTls {
        self.client_ca_file = Some(ca_file.into());
        self
    }
}
