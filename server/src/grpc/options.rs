//! What the gRPC front end accepts: bounds on requests, and whether to suggest headers.

use std::time::Duration;

/// How the gRPC front end serves, and what it refuses.
///
/// A request over any bound is answered `INVALID_ARGUMENT` with a message naming it;
/// a message over `max_message_bytes` is refused by the decoder (`OUT_OF_RANGE`) before
/// it is read whole.
///
/// ```
/// use tollgate_server::grpc::GrpcOptions;
///
/// let mut options = GrpcOptions::default();
/// options.response_headers = true;
/// assert_eq!(options.max_descriptors, 64);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GrpcOptions {
    /// Suggest rate-limit headers for Envoy to add to its response
    /// (`response_headers_to_add`), in the `[response] headers` style, with `Retry-After`
    /// on `OVER_LIMIT` — from the most restrictive descriptor. Off unless asked
    /// (`[gateway] grpc_response_headers = true`): Envoy can make its own.
    pub response_headers: bool,
    /// Descriptors in one request.
    pub max_descriptors: usize,
    /// Entries in one descriptor.
    pub max_entries: usize,
    /// Bytes in the domain, or in one entry's key or value.
    pub max_field_bytes: usize,
    /// Bytes in one encoded request message.
    pub max_message_bytes: usize,
    /// The deadline for a request that brings none (`grpc-timeout`); a shorter one of the
    /// caller's is honoured.
    pub timeout: Duration,
    /// Streams one HTTP/2 connection may have open at once.
    pub max_concurrent_streams: u32,
    /// TLS on the listener (`[gateway.grpc_tls]`, ALPN `h2`): what Envoy connects to with
    /// a `transport_socket`; the handshake is bounded by `timeout`'s tenfold.
    pub tls: Option<std::sync::Arc<crate::tls::TlsAcceptor>>,
    /// What the health status of the rate limit service follows (checked every second):
    /// `SERVING` when `/readyz` would answer 200, `NOT_SERVING` otherwise. `None`: always
    /// serving.
    pub readiness: Option<std::sync::Arc<crate::readiness::Readiness>>,
}

impl Default for GrpcOptions {
    fn default() -> Self {
        GrpcOptions {
            response_headers: false,
            max_descriptors: 64,
            max_entries: 16,
            max_field_bytes: 1024,
            max_message_bytes: 64 * 1024,
            timeout: Duration::from_secs(2),
            max_concurrent_streams: 1024,
            tls: None,
            readiness: None,
        }
    }
}
