//! What an `https://` collector's certificate must chain to: the CA file
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` names, or the system's roots — for tonic (OTLP over
//! gRPC) and rustls (OTLP over HTTP) alike.

/// A CA file that cannot be used: its path and why.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) path: String,
    pub(crate) reason: String,
}

/// What a collector's certificate must chain to: a CA file's certificates, or the
/// system's roots.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trust {
    /// The CA file's PEM text and its certificates (`None`: the system's roots).
    ca: Option<(Vec<u8>, rustls::RootCertStore)>,
}

impl Trust {
    /// Reads `ca_file` (if given), refusing one that holds no certificate.
    pub(crate) fn read(ca_file: Option<&std::path::Path>) -> Result<Trust, Refused> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;

        let Some(path) = ca_file else {
            return Ok(Trust::default());
        };
        let refused = |reason: String| Refused {
            path: path.display().to_string(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|error| refused(error.to_string()))?;
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(&pem) {
            let certificate = certificate.map_err(|error| refused(error.to_string()))?;
            roots
                .add(certificate)
                .map_err(|error| refused(error.to_string()))?;
        }
        if roots.is_empty() {
            return Err(refused("holds no PEM certificate".into()));
        }
        Ok(Trust {
            ca: Some((pem, roots)),
        })
    }

    /// For tonic (gRPC).
    pub(crate) fn tonic(&self) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new();
        match &self.ca {
            Some((pem, _)) => config.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
            None => config.with_native_roots(),
        }
    }

    /// For rustls (HTTP): `None` for the system's roots.
    pub(crate) fn rustls(&self) -> Option<rustls::RootCertStore> {
        self.ca.as_ref().map(|(_, roots)| roots.clone())
    }
}
