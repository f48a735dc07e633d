//! Envoy's rate limit quota service (RLQS, `envoy.service.rate_limit_quota.v3`): Envoys
//! with the `rate_limit_quota` filter report their usage per bucket every few seconds over
//! one stream, and enforce the token bucket each is assigned. Here each bucket id is a key
//! (`bucket_key`: `name`, then the entries `[rlqs] key` names), its rule's rate and burst
//! divided among the Envoys reporting it by their demand (`division`), within a bound:
//! the assignments that may be in force never sum to more than the rule's rate, nor their
//! `max_tokens` to more than its burst (one token each at least).
//!
//! The decisions are the Envoys' own, from their token buckets: the limiter is off the
//! request path. Served on a listener of its own (`--rlqs`), TLS as the gRPC listener's.

mod across;
mod actions;
mod bucket_key;
pub(crate) mod division;
mod service;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::Server;

use super::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use tollgate::Limits;
use tollgate::store::Store;

/// The service's full name.
pub const RLQS_SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// Counts every RLQS series at 0, so they exist (and a rate over them is defined) before
/// the first Envoy, RLQS on or off.
pub fn register_rlqs_metrics() {
    metrics::gauge!("tollgate_rlqs_streams").set(0.0);
    metrics::gauge!("tollgate_rlqs_buckets").set(0.0);
    metrics::counter!("tollgate_rlqs_reports_total").increment(0);
    for outcome in ["claimed", "failed"] {
        metrics::counter!("tollgate_rlqs_claims_total", "outcome" => outcome).increment(0);
    }
    for action in ["token_bucket", "allow_all", "abandon"] {
        metrics::counter!("tollgate_rlqs_assignments_total", "action" => action).increment(0);
    }
}

/// How the RLQS listener serves.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RlqsOptions {
    /// TLS on the listener (the gRPC listener's, `[gateway.grpc_tls]`).
    pub tls: Option<Arc<crate::tls::TlsAcceptor>>,
    /// Where the buckets are shown to operators (the admin listener's `/rlqs`).
    pub board: crate::rlqs_table::RlqsBoard,
    /// With several gateways sharing one Redis: the store through which each claims its
    /// part of every rule before dividing it among its own Envoys (the gateway passes its
    /// Redis backend's). `None`: this gateway divides the whole rule.
    pub shared: Option<tollgate::store::RedisStore>,
}

/// Serves RLQS on `listener` until `shutdown` completes.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate::Limits;
/// use tollgate_server::grpc::{RlqsOptions, serve_rlqs};
///
/// let limits = Limits::from_toml("[limits]\napi = \"100/s\"\n")?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:18081").await?;
/// serve_rlqs(limits, listener, RlqsOptions::default(), tollgate_server::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub async fn serve_rlqs<St: Store>(
    limits: Limits<St>,
    listener: TcpListener,
    options: RlqsOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let quotas = service::Quotas::new(
        limits,
        service::Bounds::default(),
        options.board.clone(),
        options.shared.clone(),
    );
    tokio::spawn(service::tick(Arc::clone(&quotas)));
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(RLQS_SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;
    // No request timeout: a stream lives as long as its Envoy.
    let router = Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .add_service(health_service)
        .add_service(RateLimitQuotaServiceServer::new(service::Service(quotas)));
    super::tls::serve(
        router,
        listener,
        options.tls.clone(),
        std::time::Duration::from_secs(20),
        shutdown,
    )
    .await
}
