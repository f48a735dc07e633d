//! The proxy's side of an HTTPS upstream: the upstream's certificate is verified against
//! the system's roots (read from its certificate files), or against a CA file instead;
//! SNI is the upstream's host.

use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;

use super::TlsError;
use super::acceptor::certificates;

/// A client configuration trusting `ca_file`'s certificates, or the system's roots.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for certificate in certificates("proxy", path, "upstream_ca_file")? {
                roots.add(certificate).map_err(|error| TlsError::File {
                    listener: "proxy",
                    what: "upstream_ca_file",
                    path: path.to_path_buf(),
                    reason: error.to_string(),
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "a system root certificate could not be read");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::Config {
                    listener: "proxy",
                    reason: "no system root certificates found to verify the upstream with; \
                             give [gateway] upstream_ca_file"
                        .into(),
                });
            }
        }
    }
    // ALPN is the connector's to set (HTTP/1.1).
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
