//! Starting the gateway: load and watch the config, weigh the options, bind a listener for
//! each front end, and start them all on one shared [`Limits`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::admin::{self, AdminOptions};
use super::grpc::{self, GrpcOptions};
use super::proxy::{self, Proxy, ProxyOptions};
use super::readiness::Readiness;
use super::resp::{self, RespOptions};
use super::settings::{FileSettings, GatewayTable, Settings};
use super::telemetry::TelemetrySettings;
use super::tls::{ListenerTls, TlsAcceptor, TlsError};
use super::{Gateway, demo, metrics, signals};
use tollgate::Limits;
use tollgate::reload::WatchError;
use tollgate::store::BackendStore;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The config is invalid or unreadable, or cannot be watched.
    #[error(transparent)]
    Config(#[from] WatchError),
    /// A listener could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The environment variable `[gateway] resp_password_env` names is not set.
    #[error("the RESP password's environment variable {0} is not set")]
    MissingSecret(String),
    /// The task loading the config ended without an answer (it panicked).
    #[error("the config loader stopped unexpectedly: {0}")]
    Loader(String),
    /// A listener's certificate, or the upstream's CA, could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The demo upstream could not start.
    #[error("cannot start the demo upstream: {0}")]
    Demo(#[source] std::io::Error),
    /// The disk store the config names cannot be opened (another process holds its
    /// directory, or it is damaged): buckets that should survive a crash must not quietly
    /// live in memory instead.
    #[error("{0}")]
    Disk(String),
}

impl Gateway {
    /// Loads and watches the config, binds a listener for each front end and starts
    /// serving. `settings` are the flags and environment: what they leave open comes from
    /// the config's `[gateway]` table, then the defaults.
    ///
    /// Returns once the listeners are bound, so clients can connect at once. Must run
    /// inside a multi-threaded tokio runtime.
    pub async fn start(settings: Settings) -> Result<Gateway, GatewayError> {
        Gateway::start_with_telemetry(settings, TelemetrySettings::default()).await
    }

    /// [`Gateway::start`], with what flags and `TOLLGATE_*` said of telemetry (they win
    /// over the config's `[telemetry]`): requests get a server span when it is on.
    pub async fn start_with_telemetry(
        settings: Settings,
        telemetry: TelemetrySettings,
    ) -> Result<Gateway, GatewayError> {
        // Before any rule is compiled: rules keep handles to their counters.
        let metrics = metrics::install();
        super::telemetry::register_metrics();
        grpc::register_rlqs_metrics();
        // Loading may fetch remote documents, which blocks: not on a runtime worker.
        let config = settings.config_sources();
        let table = GatewayTable::new(settings.clone());
        let limits = tokio::task::spawn_blocking(move || {
            Limits::builder()
                .store(BackendStore::new())
                .extension(table)
                .extension(super::telemetry::TelemetryTable)
                .extension(super::rlqs_table::RlqsTable)
                .watch(&config)
        })
        .await
        .map_err(|error| GatewayError::Loader(error.to_string()))??;
        if limits.rules().store().backend == tollgate::config::Backend::Disk
            && let Some(reason) = limits.store().unusable()
        {
            return Err(GatewayError::Disk(reason.to_owned()));
        }
        let readiness = Arc::new(Readiness::new());
        readiness.loaded(limits.clone());
        let file = limits
            .rules()
            .extension::<FileSettings>()
            .cloned()
            .unwrap_or_default();
        let resolved = settings.over(&file.0);
        let (upstream, demo) = match resolved.upstream.clone() {
            Some(upstream) => (upstream, false),
            None => {
                let address = demo::start().await.map_err(GatewayError::Demo)?;
                let uri = format!("http://{address}")
                    .parse()
                    .map_err(|_| GatewayError::Demo(std::io::Error::other("bad demo address")))?;
                (uri, true)
            }
        };
        let (proxy_listener, listen) = bind(resolved.listen()).await?;
        let (admin_listener, admin) = bind(resolved.admin()).await?;
        let resp_tls = acceptor("resp", resolved.resp_tls.clone(), &[])?;
        let grpc_tls = acceptor("grpc", resolved.grpc_tls.clone(), &[b"h2"])?;
        let resp = match resolved.resp {
            Some(address) => {
                let mut options = RespOptions {
                    tls: resp_tls.clone(),
                    ..RespOptions::default()
                };
                if let Some(variable) = &resolved.resp_password_env {
                    let password = std::env::var(variable)
                        .map_err(|_| GatewayError::MissingSecret(variable.clone()))?;
                    options.password = Some(password);
                }
                Some((bind(address).await?, options))
            }
            None => None,
        };
        let resp_addr = resp.as_ref().map(|((_, address), _)| *address);
        let grpc = match resolved.grpc {
            Some(address) => {
                let options = GrpcOptions {
                    response_headers: resolved.grpc_response_headers(),
                    tls: grpc_tls.clone(),
                    readiness: Some(Arc::clone(&readiness)),
                    ..GrpcOptions::default()
                };
                Some((bind(address).await?, options))
            }
            None => None,
        };
        let grpc_addr = grpc.as_ref().map(|((_, address), _)| *address);
        let rlqs_board = super::rlqs_table::RlqsBoard::default();
        let rlqs = match resolved.rlqs {
            Some(address) => {
                let options = grpc::RlqsOptions {
                    tls: grpc_tls.clone(),
                    board: rlqs_board.clone(),
                    shared: limits.store().redis().cloned(),
                };
                Some((bind(address).await?, options))
            }
            None => None,
        };
        let rlqs_addr = rlqs.as_ref().map(|((_, address), _)| *address);

        let http_tls = acceptor(
            "proxy and admin",
            resolved.tls.clone(),
            &[b"h2", b"http/1.1"],
        )?;
        let mut proxy_options = ProxyOptions::new(upstream.clone());
        proxy_options.upstream_timeout = resolved.upstream_timeout();
        proxy_options.header_read_timeout = resolved.header_read_timeout();
        proxy_options.upstream_ca_file = resolved.upstream_ca_file.clone();
        proxy_options.upstream_protocol = resolved.upstream_protocol.unwrap_or_default();
        proxy_options.tls = http_tls.clone();
        let file = limits
            .rules()
            .extension::<super::telemetry::TelemetryFile>()
            .map(|file| file.0.clone())
            .unwrap_or_default();
        proxy_options.telemetry = matches!(
            telemetry
                .over(&file)
                .resolve(|name| std::env::var(name).ok()),
            Ok(Some(_))
        );
        let proxy = Proxy::from_options(&proxy_options)?;
        let mut admin_options = AdminOptions::new(metrics);
        admin_options.token = resolved.admin_token.clone();
        admin_options.header_read_timeout = resolved.header_read_timeout();
        admin_options.tls = http_tls.clone();
        admin_options.readiness = Some(Arc::clone(&readiness));
        admin_options.rlqs = rlqs_addr.map(|_| rlqs_board.clone());
        admin_options.listener_tls = [&http_tls, &resp_tls, &grpc_tls]
            .into_iter()
            .flatten()
            .cloned()
            .collect();

        // Every front end gets the same shutdown: one send stops them all. The admin
        // listener has its own, sent once they have drained, so the probes answer
        // "draining" meanwhile.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let shutdown = || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        let (stop_admin, admin_stopped) = tokio::sync::watch::channel(false);
        let admin_server = tokio::spawn(admin::serve(
            limits.clone(),
            admin_listener,
            admin_options,
            async move {
                let mut stopped = admin_stopped;
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        ));
        let mut servers = vec![
            tokio::spawn(proxy::serve_with(
                proxy,
                limits.clone(),
                proxy_listener,
                proxy_options,
                shutdown(),
            )),
            tokio::spawn(signals::reload_on_sighup(limits.clone(), shutdown())),
        ];
        if let Some(((listener, _), options)) = resp {
            servers.push(tokio::spawn(resp::serve(
                limits.clone(),
                listener,
                options,
                shutdown(),
            )));
        }
        if let Some(((listener, _), options)) = grpc {
            let limits = limits.clone();
            let shutdown = shutdown();
            servers.push(tokio::spawn(async move {
                if let Err(error) = grpc::serve(limits, listener, options, shutdown).await {
                    tracing::error!(listener = "grpc", %error, "the gRPC front end stopped");
                }
            }));
        }
        if let Some(((listener, _), options)) = rlqs {
            let limits = limits.clone();
            let shutdown = shutdown();
            servers.push(tokio::spawn(async move {
                if let Err(error) = grpc::serve_rlqs(limits, listener, options, shutdown).await {
                    tracing::error!(listener = "rlqs", %error, "the RLQS front end stopped");
                }
            }));
        }
        for tls in [&http_tls, &resp_tls, &grpc_tls].into_iter().flatten() {
            servers.push(tokio::spawn(Arc::clone(tls).watch(shutdown())));
        }
        tracing::info!(%listen, %admin, resp = ?resp_addr, grpc = ?grpc_addr, rlqs = ?rlqs_addr, %upstream, demo, "gateway started");
        Ok(Gateway {
            listen,
            admin,
            resp: resp_addr,
            grpc: grpc_addr,
            rlqs: rlqs_addr,
            upstream,
            demo,
            limits,
            readiness,
            stop,
            servers,
            stop_admin,
            admin_server,
            grace: resolved.shutdown_grace(),
        })
    }
}

/// A listener's TLS, if its table is given; its files read now (a bad pair is fatal here).
fn acceptor(
    listener: &'static str,
    files: Option<ListenerTls>,
    alpn: &[&[u8]],
) -> Result<Option<Arc<TlsAcceptor>>, GatewayError> {
    files
        .map(|files| TlsAcceptor::load(listener, files, alpn))
        .transpose()
        .map_err(GatewayError::Tls)
}

/// A listener on `address`, and the address it is bound to (a port 0 made real).
async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), GatewayError> {
    let bound = async {
        let listener = TcpListener::bind(address).await?;
        let local = listener.local_addr()?;
        Ok((listener, local))
    };
    bound
        .await
        .map_err(|source| GatewayError::Bind { address, source })
}
