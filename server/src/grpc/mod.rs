//! The gRPC front end: tollgate as Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), for Envoy, Istio,
//! Envoy Gateway and Contour, over the same live rules and buckets as the HTTP layer.
//!
//! - A request with domain `D` and a descriptor with entries `(k1, v1), (k2, v2)` is decided
//!   as the key `D/k1/v1/k2/v2`, each part percent-encoded into one segment
//!   ([`encode_segment`](tollgate::key::encode_segment)), by longest segment prefix. A rule
//!   `"D/k1"` is Envoy's value-less descriptor, `"D/k1/v1"` a value-specific one.
//! - Under a `per = "client"` rule every distinct descriptor has its own bucket (the part of
//!   its key after the rule's); `per = "global"` shares one.
//! - `hits_addend` is the cost (a descriptor's own overrides the request's; 0 in the
//!   request means 1). A request's descriptors are decided atomically: if any is over its
//!   limit, the answer is `OVER_LIMIT` and none is charged.
//! - Shadow rules answer `OK` and are counted as shadow; unmatched keys and unlimited rules
//!   answer `OK` without a limit.
//! - `grpc.health.v1.Health` is served beside it.
//! - Bounded ([`GrpcOptions`]): bad requests get `INVALID_ARGUMENT` naming what is wrong.
//!
//! [`serve`] is its one entry point, on any listener; the gateway starts it with `--grpc`.

mod descriptor;
mod options;
pub mod proto;
mod rlqs;
mod service;
mod status;
mod tls;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::Server;

pub use options::GrpcOptions;
pub use rlqs::{RLQS_SERVICE_NAME, RlqsOptions, register_rlqs_metrics, serve_rlqs};

use proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tollgate::Limits;
use tollgate::store::Store;

/// The name Envoy's rate limit service answers health checks under.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// Serves Envoy's rate limit service and `grpc.health.v1` on `listener` (HTTP/2; over TLS
/// when `options.tls` is set) until `shutdown` completes; requests in flight are finished
/// first.
///
/// ```no_run
/// use tollgate::Limits;
/// use tollgate_server::grpc::{self, GrpcOptions};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::watch(["config/gateway.toml"])?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// grpc::serve(limits, listener, GrpcOptions::default(), tollgate_server::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub async fn serve<St: Store>(
    limits: Limits<St>,
    listener: TcpListener,
    options: GrpcOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    health
        .set_service_status(SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;
    if let Some(readiness) = options.readiness.clone() {
        let health = health.clone();
        tokio::spawn(follow(readiness, health));
    }
    let options = Arc::new(options);
    let service = RateLimitServiceServer::new(service::Decider::new(limits, Arc::clone(&options)))
        .max_decoding_message_size(options.max_message_bytes.max(1));
    let router = Server::builder()
        .timeout(options.timeout)
        .max_concurrent_streams(options.max_concurrent_streams.max(1))
        .add_service(health_service)
        .add_service(service);
    // A handshake has ten request timeouts (20 s by default) to finish.
    tls::serve(
        router,
        listener,
        options.tls.clone(),
        options.timeout * 10,
        shutdown,
    )
    .await
}

/// Keeps the health status of the rate limit service (and the server's) in step with
/// `readiness`, checked every second, until the server is gone.
async fn follow(
    readiness: Arc<crate::readiness::Readiness>,
    health: tonic_health::server::HealthReporter,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut last = None;
    loop {
        tick.tick().await;
        let serving = readiness.check().await.status.serving();
        if last != Some(serving) {
            let status = if serving {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            health.set_service_status(SERVICE_NAME, status).await;
            health.set_service_status("", status).await;
            last = Some(serving);
        }
        if Arc::strong_count(&readiness) == 1 {
            return;
        }
    }
}
