//! The tollgate service: the [`tollgate`] library's rules and buckets served to
//! other programs. A rate-limiting reverse proxy, an admin listener (health, config, a
//! bucket introspection page, Prometheus metrics), smyte/ratelimit's Redis protocol and
//! Envoy's rate limit service, all over one live, hot-reloaded [`Limits`].
//!
//! Operators run the `tollgate` binary (`cargo install tollgate-server`); its manual is
//! this crate's README. This library is what that binary is made of, for tests and for
//! programs that embed the whole service.
//!
//! The service is an assembly of **front ends**, each a module with one entry point,
//! `serve(limits, listener, options, shutdown)`, over the library's public decision API:
//! [`proxy`] (the rate-limited reverse proxy), [`admin`] (health, config, buckets,
//! explain, metrics) and, when asked for, [`resp`] (the Redis protocol: smyte's `RL.*` and
//! tollgate's `TG.*` commands) and [`grpc`] (Envoy's rate limit service).
//! [`Gateway::start`] loads and watches the config, binds a listener for each front end,
//! starts them on one shared `Limits`, and [`Gateway::shutdown`] stops them all together.
//! [`cli`] is the binary: flags, logging, signals; tests drive the same [`Gateway`]
//! in-process. [`Settings`] is every setting, from flags, environment, the config's
//! `[gateway]` table and defaults.
//!
//! ```no_run
//! use tollgate_server::{Gateway, Settings, shutdown_signal};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let gateway = Gateway::start(Settings::new(["config/gateway.toml"])).await?;
//! println!("proxy on {}, admin on {}", gateway.listen_addr(), gateway.admin_addr());
//! gateway.run_until(shutdown_signal()).await;
//! # Ok(()) }
//! ```

pub mod admin;
mod admin_page;
pub mod cli;
mod credentials;
pub mod demo;
pub mod grpc;
mod identity;
pub mod logging;
pub mod metrics;
pub mod proxy;
pub mod readiness;
pub mod resp;
pub mod rlqs_table;
mod rule_table;
mod schema;
mod server;
mod settings;
mod signals;
mod startup;
pub mod suggest;
pub mod telemetry;
pub mod tls;
mod upstream;
mod websocket;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use tokio::task::JoinHandle;

pub use credentials::constant_time_eq;
pub use rule_table::describe_rules;
pub use schema::json_schema;
pub use settings::{
    DEFAULT_ADMIN, DEFAULT_CONFIG, DEFAULT_GRPC, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_LISTEN,
    DEFAULT_RESP, DEFAULT_SHUTDOWN_GRACE, DEFAULT_UPSTREAM_TIMEOUT, FileSettings, GatewayTable,
    Settings, UpstreamProtocol, parse_upstream,
};
pub use signals::shutdown_signal;
pub use startup::GatewayError;

use tollgate::Limits;
use tollgate::store::BackendStore;

/// A running gateway: its front ends (proxy and admin listeners), the config watcher and
/// the SIGHUP handler, on one shared [`Limits`].
#[derive(Debug)]
pub struct Gateway {
    listen: SocketAddr,
    admin: SocketAddr,
    resp: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    rlqs: Option<SocketAddr>,
    upstream: Uri,
    demo: bool,
    limits: Limits<BackendStore>,
    readiness: std::sync::Arc<readiness::Readiness>,
    /// Stops the front ends that take requests (proxy, RESP, gRPC) and the background tasks.
    stop: tokio::sync::watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
    /// Stops the admin listener: last, so the probes say "draining" throughout the drain.
    stop_admin: tokio::sync::watch::Sender<bool>,
    admin_server: JoinHandle<()>,
    grace: Duration,
}

impl Gateway {
    /// The proxy's bound address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The admin listener's bound address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The Redis-protocol front end's bound address, if it was asked for.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp
    }

    /// The bound address of Envoy's rate limit service (gRPC), if it was asked for.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc
    }

    /// The bound address of Envoy's rate limit quota service (RLQS), if it was asked for.
    pub fn rlqs_addr(&self) -> Option<SocketAddr> {
        self.rlqs
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

    /// What its probes report.
    pub fn readiness(&self) -> &readiness::Readiness {
        &self.readiness
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }

    /// Stops accepting connections and waits (at most the shutdown grace) for requests in
    /// flight to finish; whatever is still running then is cut off. From the first moment
    /// `/readyz` answers 503 `draining`; the admin listener stops last.
    pub async fn shutdown(self) {
        tracing::info!(grace = ?self.grace, "gateway shutting down");
        self.readiness.draining();
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
        let _ = self.stop_admin.send(true);
        let admin = self.admin_server.abort_handle();
        if tokio::time::timeout(self.grace, self.admin_server)
            .await
            .is_err()
        {
            admin.abort();
        }
        // Last, so the snapshot holds what the drained requests spent.
        match self.limits.save_snapshot() {
            Ok(0) => {}
            Ok(saved) => tracing::info!(saved, "buckets saved"),
            Err(error) => tracing::warn!(%error, "cannot write the snapshot"),
        }
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
