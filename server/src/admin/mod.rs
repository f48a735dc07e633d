//! The admin listener: health, config status, bucket introspection, explain, metrics.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the introspection page (self-contained HTML, no CDN) |
//! | `GET /livez` | 200 while the process serves: `{"status":"alive","generation":N}` |
//! | `GET /readyz` | 200 when decisions are made as configured (`ready`) or by a fallback (`degraded`), else 503 (`not_ready`, `draining`); JSON with `status`, `reason`, `generation` (see [`readiness`](crate::readiness)) |
//! | `GET /healthz` | `ok` |
//! | `GET /schema.json` | the config file's JSON Schema (what `gateway --print-schema` prints) |
//! | `GET /openapi.json` | this API described in OpenAPI 3.1 |
//! | `GET /config` | active rules, sources (files and URLs: last read, validator, last error), generation, loaded-at, last reload error, the last reloads (newest first: time, trigger, generation, rules added/removed/changed with old → new, or the error) |
//! | `GET /buckets?prefix=&max_fraction=&sort=&limit=` | buckets, filtered and sorted server-side |
//! | `DELETE /buckets/{key}` | forgive one client: drop its bucket |
//! | `GET /explain?path=&client=&method=&host=&header.NAME=` | which rule and bucket a request would use, and why |
//! | `POST /explain?…` (a JSON body) | the same for a request with that body: its `json:` parts and estimates |
//! | `GET /traffic?rules=&top=` | per-rule traffic over the last 15 minutes in 5 s slots (admitted, refused, shadow-refused, delayed), rules with the most refusals first (at most `rules`, default 50), each with its `top` most refused clients (default 10) |
//! | `GET /candidates?top=` | what each rule's candidate limits would have done over the last 15 minutes, hour and day: requests, would-refuse, distinct clients refused, the `top` most refused (default 10) |
//! | `GET /suggest?rule=&refuse=` | per rule measuring its clients' peaks (all, or `rule`): p50, p90, p99, p99.9 and max of the peaks at the rule's window, and the rate that would have refused at most `refuse` % of clients (default 1), with the clients it would refuse |
//! | `GET /metrics` | Prometheus text |
//! | `GET /rlqs` | the RLQS front end's buckets: Envoys, demand, shares |
//!
//! With an `admin_token`, every route but the probes (`/livez`, `/readyz`, `/healthz`),
//! `/schema.json`, `/openapi.json` and the page itself needs
//! `Authorization: Bearer <token>` (the page asks for the token and sends it).
//! Times are UNIX seconds.

use crate::rlqs_table::RlqsBoard;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use tollgate::Limits;
use tollgate::store::BackendStore;

use super::admin_page;
use super::credentials::constant_time_eq;
use super::readiness::Readiness;
use super::server::{json_error, serve_http};
use super::settings::DEFAULT_HEADER_READ_TIMEOUT;
use super::tls::TlsAcceptor;

mod buckets;
mod config;
mod explain;
mod state;
mod tuning;

pub use buckets::MAX_ROWS;
use buckets::{BucketParams, buckets, buckets_json, forgive};
pub use config::rules_json;
use config::{config, config_json};
use explain::{explain, explain_body};
use state::AdminState;
use tuning::{candidates, candidates_json, suggest, suggestions, traffic, traffic_json};

const PAGE: &str = include_str!("../admin_page.html");

/// The admin API described in OpenAPI 3.1 (a test checks it names every route here).
const OPENAPI: &str = include_str!("../openapi.json");

/// The probes alone: `/livez`, `/readyz` and `/healthz`, never behind the token.
pub fn probes(readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/livez",
            get(|State(readiness): State<Arc<Readiness>>| async move {
                Json(json!({ "status": "alive", "generation": readiness.generation() }))
            }),
        )
        .route(
            "/readyz",
            get(|State(readiness): State<Arc<Readiness>>| async move {
                let report = readiness.check().await;
                let status = if report.status.serving() {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                (status, Json(report))
            }),
        )
        .with_state(readiness)
}

/// The admin router over `limits`; `token` guards everything but the probes, the schemas
/// and the page; `/config` shows the files and last reload error of `listener_tls`.
pub fn router(
    limits: Limits<BackendStore>,
    metrics: PrometheusHandle,
    token: Option<String>,
    readiness: Arc<Readiness>,
    listener_tls: Vec<Arc<TlsAcceptor>>,
    rlqs: Option<RlqsBoard>,
) -> Router {
    let state = AdminState {
        limits,
        metrics,
        token: token.map(Arc::from),
        listener_tls: listener_tls.into(),
        rlqs,
    };
    let guarded = Router::new()
        .route("/config", get(config))
        .route("/buckets", get(buckets))
        .route("/buckets/{*key}", axum::routing::delete(forgive))
        .route("/explain", get(explain).post(explain_body))
        .route("/metrics", get(render_metrics))
        .route("/traffic", get(traffic))
        .route("/candidates", get(candidates))
        .route("/suggest", get(suggest))
        .route("/rlqs", get(rlqs_buckets))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/", get(page))
        .route("/schema.json", get(|| async { Json(crate::json_schema()) }))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .merge(guarded)
        .with_state(state)
        .merge(probes(readiness))
}

/// What the admin front end needs besides the limits.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdminOptions {
    /// Renders `/metrics` (from [`metrics::install`](crate::metrics::install)).
    pub metrics: PrometheusHandle,
    /// A bearer token every route but `/healthz` and the page requires.
    pub token: Option<String>,
    /// How long a client has to send a request's headers (slowloris defence); also how
    /// long it has to finish a TLS handshake.
    pub header_read_timeout: Duration,
    /// TLS on the listener (`[gateway.tls]`); `None`: plain HTTP.
    pub tls: Option<Arc<TlsAcceptor>>,
    /// What `/livez` and `/readyz` report; `None`: made here, ready from the start.
    pub readiness: Option<Arc<Readiness>>,
    /// Every listener's TLS, whose files and last failed reload `/config` shows.
    pub listener_tls: Vec<Arc<TlsAcceptor>>,
    /// What `/rlqs` shows: the RLQS front end's buckets (`None`: it does not serve).
    pub rlqs: Option<RlqsBoard>,
}

impl AdminOptions {
    /// Options rendering `metrics`, with no token and the default header read timeout.
    pub fn new(metrics: PrometheusHandle) -> AdminOptions {
        AdminOptions {
            metrics,
            token: None,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            tls: None,
            readiness: None,
            listener_tls: Vec::new(),
            rlqs: None,
        }
    }
}

/// The admin listener on `listener` until `shutdown` completes, then lets requests in
/// flight finish.
///
/// ```no_run
/// use tollgate::Limits;
/// use tollgate_server::admin::{self, AdminOptions};
/// use tollgate::store::BackendStore;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let metrics = tollgate_server::metrics::install();
/// let limits = Limits::builder()
///     .store(BackendStore::new())
///     .from_toml("[limits]\n\"/\" = \"20/s\"\n")?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
/// admin::serve(limits, listener, AdminOptions::new(metrics), tollgate_server::shutdown_signal()).await;
/// # Ok(()) }
/// ```
pub async fn serve(
    limits: Limits<BackendStore>,
    listener: TcpListener,
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    let readiness = options.readiness.unwrap_or_else(|| {
        let readiness = Arc::new(Readiness::new());
        readiness.loaded(limits.clone());
        readiness
    });
    let app = router(
        limits,
        options.metrics,
        options.token,
        readiness,
        options.listener_tls,
        options.rlqs,
    );
    serve_http(
        listener,
        app,
        "admin",
        options.header_read_timeout,
        options.tls,
        shutdown,
    )
    .await;
}

async fn require_token<St>(
    State(state): State<AdminState<St>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &state.token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        next.run(request).await
    } else {
        let mut response = json_error(StatusCode::UNAUTHORIZED, "unauthorized");
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        response
    }
}

/// The page, filled with the data of the moment (filtered as its address says), unless a
/// token guards the data: then empty, for its script to fill once given the token.
async fn page(
    State(state): State<AdminState<BackendStore>>,
    params: Result<Query<BucketParams>, axum::extract::rejection::QueryRejection>,
) -> Html<String> {
    if state.token.is_some() {
        return Html(admin_page::render(PAGE, None));
    }
    let params = params.map(|Query(params)| params).unwrap_or_default();
    let mut filters = Vec::new();
    if let Some(prefix) = params.prefix.as_deref().filter(|p| !p.is_empty()) {
        filters.push(format!("under {prefix}"));
    }
    if let Some(max) = params.max_fraction {
        filters.push(format!("at most {}% of budget left", (max * 100.0).round()));
    }
    let buckets = match buckets_json(&state, params).await {
        Ok(buckets) => buckets,
        Err(_) => json!({ "limit": 0, "rows": [] }),
    };
    let limits = state.limits.clone();
    let suggest = tokio::task::spawn_blocking(move || suggestions(&limits, None, 1.0))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    let view = admin_page::View {
        buckets,
        traffic: traffic_json(&state, 50, 5),
        config: config_json(&state),
        filters: filters.join(", "),
        suggest,
        candidates: candidates_json(&state.limits, 3),
        rlqs: rlqs_json(&state),
    };
    Html(admin_page::render(PAGE, Some(&view)))
}

async fn render_metrics(
    State(state): State<AdminState<BackendStore>>,
    request_headers: HeaderMap,
) -> Response {
    // With Redis, the buckets this instance holds are its fallback ones.
    metrics::gauge!("tollgate_buckets_active").set(state.limits.store().memory().len() as f64);
    state.metrics.run_upkeep();
    let text = state.metrics.render();
    let openmetrics = request_headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(crate::metrics::openmetrics::wanted);
    let mut headers = HeaderMap::new();
    if openmetrics {
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(crate::metrics::openmetrics::CONTENT_TYPE),
        );
        return (headers, crate::metrics::openmetrics::render(&text)).into_response();
    }
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    (headers, text).into_response()
}

/// `/rlqs`: each RLQS bucket's Envoys, demand and shares (`enabled: false` when RLQS is off).
async fn rlqs_buckets(State(state): State<AdminState<BackendStore>>) -> Json<Value> {
    Json(rlqs_json(&state))
}

fn rlqs_json<St>(state: &AdminState<St>) -> Value {
    match &state.rlqs {
        Some(board) => json!({ "enabled": true, "buckets": board.buckets() }),
        None => json!({ "enabled": false, "buckets": [] }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes this file registers, as OpenAPI writes them (`{*key}` → `{key}`), with
    /// their methods.
    fn registered() -> std::collections::BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        // The code, not this test's own strings.
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        let mut routes = std::collections::BTreeSet::new();
        let mut rest = code;
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let Some(path) = rest.trim_start().strip_prefix('"') else {
                continue;
            };
            let Some(end) = path.find('"') else { break };
            let route = path[..end].replace("{*", "{");
            let call = &path[end..path.find(".route(").unwrap_or(path.len())];
            for (method, verb) in [("get", "get("), ("post", "post("), ("delete", "delete(")] {
                if call.contains(verb) {
                    routes.insert((route.clone(), method.to_owned()));
                }
            }
        }
        routes
    }

    #[test]
    fn the_openapi_document_describes_every_admin_route_and_no_other() {
        let document: Value = serde_json::from_str(OPENAPI).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        let mut described = std::collections::BTreeSet::new();
        for (path, operations) in document["paths"].as_object().unwrap() {
            for method in operations.as_object().unwrap().keys() {
                described.insert((path.clone(), method.clone()));
            }
        }
        let registered = registered();
        assert!(registered.len() >= 10, "{registered:?}");
        assert_eq!(described, registered);
    }
}
