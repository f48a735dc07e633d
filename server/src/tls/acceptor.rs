//! A listener's TLS: its certificate and key, and when asked the CA its clients'
//! certificates must come from (mutual TLS). Read from PEM files at start — a bad pair is
//! fatal then — and re-read when they change, checked once a second as config files are:
//! new connections get the new pair; a bad one keeps the old, says which file and why,
//! and counts `tollgate_tls_reload_failures_total{listener}`. Session resumption is on
//! (tickets and a session cache).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;

use super::ListenerTls;

/// Why a certificate, key or CA could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read, held no usable PEM, or held a key no signer can use.
    #[error("{listener} listener: {what} {}: {reason}", path.display())]
    File {
        /// The listener whose file it is (`proxy`, `admin`, `resp`, `grpc`; `proxy` for
        /// the proxy's `upstream_ca_file` too).
        listener: &'static str,
        /// Which file it is (`cert_file`, …).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The files were read but do not make a configuration (a key that is not the
    /// certificate's, a CA that is no CA); the reason names the files.
    #[error("{listener} listener TLS: {reason}")]
    Config {
        /// The listener.
        listener: &'static str,
        /// Why.
        reason: String,
    },
}

/// What the files looked like when last read: a change in any reloads.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamps(Vec<Option<(SystemTime, u64)>>);

/// A listener's TLS configuration, swapped whole when its files change.
pub struct TlsAcceptor {
    listener: &'static str,
    files: ListenerTls,
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<ServerConfig>,
    stamps: Mutex<Stamps>,
    /// The last failed reload's error and when, until one succeeds.
    last_error: Mutex<Option<(String, SystemTime)>>,
    failures: metrics::Counter,
    handshake_failures: metrics::Counter,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("listener", &self.listener)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// The TLS of the listener named `listener`, from `files`, offering `alpn` protocols.
    ///
    /// ```no_run
    /// use tollgate_server::tls::{ListenerTls, TlsAcceptor};
    ///
    /// let files = ListenerTls::new("/etc/tollgate/cert.pem", "/etc/tollgate/key.pem");
    /// let acceptor = TlsAcceptor::load("admin", files, &[b"http/1.1"])?;
    /// # Ok::<(), tollgate_server::tls::TlsError>(())
    /// ```
    pub fn load(
        listener: &'static str,
        files: ListenerTls,
        alpn: &[&[u8]],
    ) -> Result<Arc<TlsAcceptor>, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let stamps = stamps(&files);
        let config = build(listener, &files, &alpn)?;
        Ok(Arc::new(TlsAcceptor {
            listener,
            files,
            alpn,
            current: ArcSwap::from_pointee(config),
            stamps: Mutex::new(stamps),
            last_error: Mutex::new(None),
            failures: metrics::counter!("tollgate_tls_reload_failures_total", "listener" => listener),
            handshake_failures: metrics::counter!("tollgate_tls_handshake_failures_total", "listener" => listener),
        }))
    }

    /// Re-reads the files if any changed since they were last read. `None`: unchanged.
    /// A failure keeps the configuration in use, and is logged and counted.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        let now = stamps(&self.files);
        {
            let mut seen = self.stamps.lock();
            if *seen == now {
                return None;
            }
            // Recorded now: a bad pair is reported once, not every second, until it changes.
            *seen = now;
        }
        match build(self.listener, &self.files, &self.alpn) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                *self.last_error.lock() = None;
                tracing::info!(listener = self.listener, "TLS certificate reloaded");
                Some(Ok(()))
            }
            Err(error) => {
                self.failures.increment(1);
                *self.last_error.lock() = Some((error.to_string(), SystemTime::now()));
                tracing::warn!(listener = self.listener, %error, "TLS certificate not reloaded; the previous one stays");
                Some(Err(error))
            }
        }
    }

    /// Re-reads the files whenever they change (checked every second) until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = tick.tick() => {
                    let _ = self.reload_if_changed();
                }
            }
        }
    }

    /// The handshake on `stream`, bounded by `timeout`. A client that does not finish it
    /// in time, speaks something else, or presents no acceptable certificate is an error
    /// (logged at debug, counted in `tollgate_tls_handshake_failures_total`).
    pub async fn accept<IO>(&self, stream: IO, timeout: Duration) -> std::io::Result<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current.load_full());
        let result = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the TLS handshake did not finish in time",
            )),
        };
        if let Err(error) = &result {
            self.handshake_failures.increment(1);
            tracing::debug!(listener = self.listener, %error, "TLS handshake failed");
        }
        result
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificates(&self) -> bool {
        self.files.client_ca_file.is_some()
    }

    /// The listener's name (`proxy`, `admin`, `resp`, `grpc`).
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// The files it reads.
    pub fn files(&self) -> &ListenerTls {
        &self.files
    }

    /// The error of the last reload that failed, and when, while the previous
    /// certificate still serves; `None` once a reload succeeds.
    pub fn last_error(&self) -> Option<(String, SystemTime)> {
        self.last_error.lock().clone()
    }
}

fn stamps(files: &ListenerTls) -> Stamps {
    let stamp = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    Stamps(
        [
            Some(files.cert_file.as_path()),
            Some(files.key_file.as_path()),
            files.client_ca_file.as_deref(),
        ]
        .into_iter()
        .flatten()
        .map(stamp)
        .collect(),
    )
}

fn build(
    listener: &'static str,
    files: &ListenerTls,
    alpn: &[Vec<u8>],
) -> Result<ServerConfig, TlsError> {
    let chain = certificates(listener, &files.cert_file, "cert_file")?;
    let key_error = |reason: String| TlsError::File {
        listener,
        what: "key_file",
        path: files.key_file.clone(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|error| key_error(pem_reason(&error)))?;
    // The key read as rustls will use it, and checked against the certificate here, so a
    // failure names the file at fault rather than "the pair".
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|error| key_error(format!("not a usable private key ({error})")))?;
    rustls::sign::CertifiedKey::new(chain.clone(), signing_key)
        .keys_match()
        .map_err(|error| TlsError::Config {
            listener,
            reason: format!(
                "key_file {} is not the key of cert_file {} ({error})",
                files.key_file.display(),
                files.cert_file.display()
            ),
        })?;
    let builder = ServerConfig::builder();
    let builder = match &files.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in certificates(listener, path, "client_ca_file")? {
                roots.add(certificate).map_err(|error| TlsError::File {
                    listener,
                    what: "client_ca_file",
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|error| TlsError::Config {
                    listener,
                    reason: format!("client_ca_file {}: {error}", path.display()),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|error| TlsError::Config {
            listener,
            reason: format!(
                "cert_file {} and key_file {} do not make a pair: {error}",
                files.cert_file.display(),
                files.key_file.display()
            ),
        })?;
    config.alpn_protocols = alpn.to_vec();
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|error| TlsError::Config {
        listener,
        reason: error.to_string(),
    })?;
    Ok(config)
}

/// Every certificate in the PEM file `path`; at least one.
pub(super) fn certificates(
    listener: &'static str,
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |reason: String| TlsError::File {
        listener,
        what,
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|error| fail(pem_reason(&error)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| fail(pem_reason(&error)))?;
    if chain.is_empty() {
        return Err(fail("no certificate in it".into()));
    }
    Ok(chain)
}

fn pem_reason(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(error) => error.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the right kind in it".into(),
        other => format!("not valid PEM: {other:?}"),
    }
}
