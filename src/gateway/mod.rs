//! The example gateway's parts (feature `gateway`): a rate-limiting reverse proxy built on
//! [`RateLimitLayer`](crate::RateLimitLayer), with an admin listener.
//!
//! `examples/gateway.rs` is a thin `main` over [`Gateway`]: flags, logging, signals.
//! Tests drive the same [`Gateway`] in-process.
//!
//! ```no_run
//! use tollgate::gateway::{Gateway, GatewayOptions};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = GatewayOptions::new(["config/gateway.toml"]);
//! let gateway = Gateway::start(options).await?;
//! println!("proxy on {}, admin on {}", gateway.listen_addr(), gateway.admin_addr());
//! gateway.run_until(tollgate::gateway::shutdown_signal()).await;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod demo;
pub mod metrics;
pub mod proxy;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use http::Uri;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::RuleSet;
use crate::reload::WatchError;
use crate::store::BackendStore;
use crate::{Limits, RateLimitLayer};

/// Where the proxy listens unless told otherwise.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Where the admin listener listens unless told otherwise.
pub const DEFAULT_ADMIN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9090);
/// How long to wait for the upstream's response headers unless told otherwise.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits for requests in flight.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers (slowloris defence).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the gateway is asked to do. `None` fields fall back to the config's `[gateway]`
/// table, then to the defaults: flags win.
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
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

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
    /// The demo upstream could not start.
    #[error("cannot start the demo upstream: {0}")]
    Demo(#[source] std::io::Error),
}

/// A running gateway: proxy and admin listeners, config watcher, SIGHUP handler.
#[derive(Debug)]
pub struct Gateway {
    listen: SocketAddr,
    admin: SocketAddr,
    upstream: Uri,
    demo: bool,
    limits: Limits<BackendStore>,
    stop: tokio::sync::watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
    grace: Duration,
}

impl Gateway {
    /// Loads and watches the config, binds both listeners and starts serving.
    ///
    /// Returns once the listeners are bound, so clients can connect at once. Must run
    /// inside a multi-threaded tokio runtime.
    pub async fn start(options: GatewayOptions) -> Result<Gateway, GatewayError> {
        // Before any rule is compiled: rules keep handles to their counters.
        let metrics = metrics::install();
        let limits = Limits::builder()
            .store(BackendStore::new())
            .watch(&options.config)?;
        let settings = limits.rules().gateway().clone();

        let listen_address = options.listen.or(settings.listen).unwrap_or(DEFAULT_LISTEN);
        let admin_address = options.admin.or(settings.admin).unwrap_or(DEFAULT_ADMIN);
        let timeout = options
            .upstream_timeout
            .or(settings.upstream_timeout)
            .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT);
        let token = options.admin_token.or(settings.admin_token);
        let (upstream, demo) = match options.upstream.or(settings.upstream) {
            Some(upstream) => (upstream, false),
            None => {
                let address = demo::start().await.map_err(GatewayError::Demo)?;
                let uri = format!("http://{address}")
                    .parse()
                    .map_err(|_| GatewayError::Demo(std::io::Error::other("bad demo address")))?;
                (uri, true)
            }
        };

        let bind = |address: SocketAddr| async move {
            TcpListener::bind(address)
                .await
                .map_err(|source| GatewayError::Bind { address, source })
        };
        let proxy_listener = bind(listen_address).await?;
        let admin_listener = bind(admin_address).await?;
        let listen = proxy_listener
            .local_addr()
            .map_err(|source| GatewayError::Bind {
                address: listen_address,
                source,
            })?;
        let admin = admin_listener
            .local_addr()
            .map_err(|source| GatewayError::Bind {
                address: admin_address,
                source,
            })?;

        let app = Router::new()
            .fallback(proxy::handler)
            .with_state(std::sync::Arc::new(proxy::Proxy::new(
                upstream.clone(),
                timeout,
            )))
            .layer(RateLimitLayer::new(limits.clone()));
        let admin_app = admin::router(limits.clone(), metrics, token);

        let (stop, stopped) = tokio::sync::watch::channel(false);
        let servers = vec![
            serve(
                proxy_listener,
                app,
                stopped.clone(),
                "proxy",
                options.header_read_timeout,
            ),
            serve(
                admin_listener,
                admin_app,
                stopped.clone(),
                "admin",
                options.header_read_timeout,
            ),
            reload_on_sighup(limits.clone(), stopped),
        ];
        tracing::info!(%listen, %admin, %upstream, demo, "gateway started");
        Ok(Gateway {
            listen,
            admin,
            upstream,
            demo,
            limits,
            stop,
            servers,
            grace: options.shutdown_grace,
        })
    }

    /// The proxy's bound address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The admin listener's bound address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The upstream requests go to.
    pub fn upstream(&self) -> &Uri {
        &self.upstream
    }

    /// Whether the upstream is the built-in demo.
    pub fn is_demo(&self) -> bool {
        self.demo
    }

    /// The limits the gateway enforces.
    pub fn limits(&self) -> &Limits<BackendStore> {
        &self.limits
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }

    /// Stops accepting connections and waits (at most the shutdown grace) for requests in
    /// flight to finish; whatever is still running then is cut off.
    pub async fn shutdown(self) {
        tracing::info!(grace = ?self.grace, "gateway shutting down");
        let _ = self.stop.send(true);
        let servers = self.servers;
        let aborts: Vec<_> = servers.iter().map(JoinHandle::abort_handle).collect();
        let drained = tokio::time::timeout(self.grace, async {
            for server in servers {
                let _ = server.await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!("requests still in flight after the shutdown grace; cutting them off");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        // Last, so the snapshot holds what the drained requests spent.
        match self.limits.save_snapshot() {
            Ok(0) => {}
            Ok(saved) => tracing::info!(saved, "buckets saved"),
            Err(error) => tracing::warn!(%error, "cannot write the snapshot"),
        }
    }
}

/// Serves `app` on `listener` over HTTP/1.1 until `stopped`, then lets connections finish
/// their requests in flight.
///
/// Not `axum::serve`: it sets no timer, so hyper enforces no header read timeout and a
/// client that never finishes its headers holds a connection forever. Here each
/// connection gets hyper's `header_read_timeout`, and the peer address as axum's
/// `ConnectInfo`.
fn serve(
    listener: TcpListener,
    app: Router,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    name: &'static str,
    header_read_timeout: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let stop = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stop);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: say so, breathe, go on.
                        tracing::warn!(listener = name, %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let app = app.clone();
            let service = hyper::service::service_fn(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request
                        .extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    tower::ServiceExt::oneshot(app.clone(), request.map(axum::body::Body::new))
                },
            );
            let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(listener = name, %peer, %error, "connection ended with an error");
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
    })
}

/// SIGHUP forces a re-read of the config (a no-op where there are no signals).
fn reload_on_sighup(
    limits: Limits<BackendStore>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut hangups) = signal(SignalKind::hangup()) else {
                tracing::warn!("cannot listen for SIGHUP; reload by saving the config instead");
                return;
            };
            loop {
                tokio::select! {
                    _ = stopped.wait_for(|stop| *stop) => return,
                    received = hangups.recv() => {
                        if received.is_none() {
                            return;
                        }
                        tracing::info!("SIGHUP: re-reading the config");
                        // `reload` logs what it did or why it refused.
                        let _ = limits.reload();
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (limits, stopped.wait_for(|stop| *stop).await);
        }
    })
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// The rule table as text, for `--check`: one line per rule.
pub fn describe_rules(rules: &RuleSet) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for rule in rules.rules() {
        let what = match rule.limit() {
            crate::config::Limit::Unlimited => "unlimited".to_owned(),
            crate::config::Limit::Limited {
                quotas,
                cost,
                per,
                algorithm,
                strict,
                shadow,
                count_status,
            } => {
                let quotas: Vec<String> = match algorithm {
                    crate::Algorithm::Gcra => quotas.iter().map(ToString::to_string).collect(),
                    _ => quotas.iter().map(|q| q.rate().to_string()).collect(),
                };
                let per = match per {
                    crate::config::Per::Client => "per client",
                    crate::config::Per::Global => "global",
                };
                let mut line =
                    format!("{} · {algorithm} · cost {cost} · {per}", quotas.join(" + "));
                if *strict {
                    line.push_str(" · strict");
                }
                if *shadow {
                    line.push_str(" · shadow");
                }
                if let Some(statuses) = count_status {
                    line.push_str(&format!(" · counts {statuses}"));
                }
                line
            }
        };
        let _ = writeln!(out, "{:<32} {what:<48} {}", rule.name(), rule.origin());
    }
    out
}
