//! What every admin handler shares: the limiter, the metrics, the token, the listeners'
//! TLS and the RLQS board; and the small helpers their answers use.

use crate::rlqs_table::RlqsBoard;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use tollgate::Limits;

use crate::tls::TlsAcceptor;

pub(super) struct AdminState<St> {
    pub(super) limits: Limits<St>,
    pub(super) metrics: PrometheusHandle,
    pub(super) token: Option<Arc<str>>,
    /// Every listener's TLS, for `/config`.
    pub(super) listener_tls: Arc<[Arc<TlsAcceptor>]>,
    /// The RLQS front end's buckets, when it serves.
    pub(super) rlqs: Option<RlqsBoard>,
}

// By hand: a derive would demand `St: Clone`, and `Limits` is shared, not copied.
impl<St> Clone for AdminState<St> {
    fn clone(&self) -> Self {
        AdminState {
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
            token: self.token.clone(),
            listener_tls: Arc::clone(&self.listener_tls),
            rlqs: self.rlqs.clone(),
        }
    }
}

pub(super) fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub(super) fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": "bad_request", "message": message })),
    )
        .into_response()
}
