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
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use tollgate::config::{Per, RuleId, RuleSet, Validator};
use tollgate::key::{BodyProblem, Client, MAX_REQUEST_JSON, RequestJson, normalize_route};
use tollgate::reload::SourceStatus;
use tollgate::store::{
    BackendStore, BucketQuery, BucketRef, BucketSort, CALLER_DEFINED_PREFIX, Store, StoreError,
};
use tollgate::{Concurrency, Limits, Quota};

use super::admin_page;
use super::credentials::constant_time_eq;
use super::readiness::Readiness;
use super::server::{json_error, serve_http};
use super::settings::DEFAULT_HEADER_READ_TIMEOUT;
use super::tls::TlsAcceptor;

/// Most rows one `/buckets` call returns.
pub const MAX_ROWS: usize = 10_000;

const PAGE: &str = include_str!("admin_page.html");

/// The admin API described in OpenAPI 3.1 (a test checks it names every route here).
const OPENAPI: &str = include_str!("openapi.json");

struct AdminState<St> {
    limits: Limits<St>,
    metrics: PrometheusHandle,
    token: Option<Arc<str>>,
    /// Every listener's TLS, for `/config`.
    listener_tls: Arc<[Arc<TlsAcceptor>]>,
    /// The RLQS front end's buckets, when it serves.
    rlqs: Option<RlqsBoard>,
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
    /// Renders `/metrics` (from [`metrics::install`](super::metrics::install)).
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

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

async fn config(State(state): State<AdminState<BackendStore>>) -> Json<Value> {
    Json(config_json(&state))
}

/// `/config`'s answer: what the page shows, too.
fn config_json(state: &AdminState<BackendStore>) -> Value {
    let status = state.limits.status();
    let rules = state.limits.rules();
    json!({
        "generation": status.generation,
        "loaded_at": unix_seconds(status.loaded_at),
        "files": status.files,
        "last_error": status.last_error,
        "last_error_at": status.last_error_at.map(unix_seconds),
        "failures": status.failures,
        "sources": status.sources.iter().map(source_json).collect::<Vec<_>>(),
        "store": store_json(state.limits.store()),
        "rules": rules_json(&rules),
        "concurrency": concurrency_json(&state.limits, &rules),
        "reloads": status.history.iter().rev().map(reload_json).collect::<Vec<_>>(),
        "tls": state.listener_tls.iter().map(|tls| listener_tls_json(tls)).collect::<Vec<_>>(),
    })
}

/// A listener's TLS in `/config`: its files, and the last reload that failed (while the
/// previous certificate serves).
fn listener_tls_json(tls: &TlsAcceptor) -> Value {
    let files = tls.files();
    let last_error = tls.last_error();
    json!({
        "listener": tls.listener(),
        "cert_file": files.cert_file,
        "key_file": files.key_file,
        "client_ca_file": files.client_ca_file,
        "last_error": last_error.as_ref().map(|(error, _)| error),
        "last_error_at": last_error.map(|(_, at)| unix_seconds(at)),
    })
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

/// One reload of the history: when, why, the generation after it, and what changed (or
/// why it was refused).
fn reload_json(event: &tollgate::reload::ReloadEvent) -> Value {
    json!({
        "at": unix_seconds(event.at),
        "trigger": event.trigger,
        "sources": event.sources,
        "generation": event.generation,
        "applied": event.error.is_none(),
        "error": event.error,
        "changes": event.changes,
    })
}

/// Each concurrency cap now: requests in flight (over all its buckets), the limit (per
/// bucket; an adaptive limit's current value) and an adaptive limit's measured no-load
/// latency.
fn concurrency_json(limits: &Limits<BackendStore>, rules: &RuleSet) -> Vec<Value> {
    rules
        .rules()
        .iter()
        .filter_map(|rule| {
            let cap = rule.concurrency()?;
            let in_flight = limits.in_flight().in_flight(rule.id().get());
            let (limit, baseline) = match cap {
                Concurrency::Fixed(n) => (n, None),
                Concurrency::Adaptive(settings) => limits
                    .adaptive_state(rule.id())
                    .unwrap_or((settings.min, None)),
            };
            Some(json!({
                "rule": rule.name(),
                "kind": rule.kind(),
                "in_flight": in_flight,
                "limit": limit,
                "adaptive": matches!(cap, Concurrency::Adaptive(_)),
                "baseline_ms": baseline.map(|b| b.as_secs_f64() * 1e3),
            }))
        })
        .collect()
}

/// One config source: what was read from it last, and how the last read went.
fn source_json(source: &SourceStatus) -> Value {
    let validator = match &source.validator {
        Some(Validator::ETag(tag)) => json!({ "etag": tag }),
        Some(Validator::LastModified(date)) => json!({ "last_modified": date }),
        Some(Validator::Modified(time)) => json!({ "modified": unix_seconds(*time) }),
        _ => Value::Null,
    };
    json!({
        "source": source.name,
        "kind": if source.remote { "url" } else { "file" },
        "last_read_at": source.last_read_at.map(unix_seconds),
        "validator": validator,
        "last_error": source.last_error,
        "last_error_at": source.last_error_at.map(unix_seconds),
        "reads": source.reads,
        "from_cache": source.from_cache,
    })
}

/// Where buckets live, and whether Redis is being skipped right now.
fn store_json(store: &BackendStore) -> Value {
    match store.redis() {
        Some(redis) => json!({ "backend": "redis", "breaker_open": redis.breaker_open() }),
        // The backend the config names could not be made (a certificate file that does not
        // load, say): why, so `/config` says which file.
        None => json!({
            "backend": "memory",
            "buckets": store.memory().len(),
            "unusable": store.unusable(),
        }),
    }
}

/// The rule table as JSON: what `/config` shows.
pub fn rules_json(rules: &RuleSet) -> Vec<Value> {
    rules
        .rules()
        .iter()
        .map(|rule| {
            let limit = match rule.per() {
                None => json!("unlimited"),
                Some(per) => json!({
                    "rates": rule.quotas().iter().map(|q| q.rate().to_string()).collect::<Vec<_>>(),
                    "bursts": rule.quotas().iter().map(Quota::burst).collect::<Vec<_>>(),
                    "cost": rule.cost(),
                    "per": match per { Per::Client => "client", Per::Global => "global" },
                    "algorithm": rule.algorithm().map(|a| a.to_string()),
                    "kind": rule.kind(),
                    "strict": rule.is_strict(),
                    "on_limit": if rule.shaping().and_then(|s| s.delay()).is_some() { "delay" } else { "reject" },
                    "max_delay_seconds": rule.shaping().and_then(|s| s.delay()).map(|d| d.max().as_secs_f64()),
                    "delay_after": rule.shaping().and_then(|s| s.delay()).and_then(|d| d.after()),
                    "warmup_seconds": rule.shaping().and_then(|s| s.warmup()).map(|w| w.as_secs_f64()),
                    "shadow": rule.is_shadow(),
                    "count_status": rule.count_status().map(ToString::to_string),
                }),
            };
            // The rule's own `also` limits (an ancestor's are listed under it).
            let also: Vec<Value> = rules
                .also_limits()
                .filter(|limit| limit.key() == rule.key())
                .filter_map(|limit| {
                    let entry = limit.also()?;
                    Some(json!({
                        "limit": limit.name(),
                        "per": entry.by().to_string(),
                        "rates": limit.quotas().iter().map(|q| q.rate().to_string()).collect::<Vec<_>>(),
                        "bursts": limit.quotas().iter().map(Quota::burst).collect::<Vec<_>>(),
                        "cost": limit.cost(),
                        "kind": limit.kind(),
                        "shown": entry.in_headers(),
                    }))
                })
                .collect();
            json!({ "rule": rule.name(), "limit": limit, "origin": rule.origin().to_string(), "also": also })
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
struct BucketParams {
    prefix: Option<String>,
    max_fraction: Option<f64>,
    sort: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct TrafficParams {
    rules: Option<usize>,
    top: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateParams {
    top: Option<usize>,
}

async fn candidates(
    State(state): State<AdminState<BackendStore>>,
    params: Result<Query<CandidateParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return bad_request(&rejection.body_text()),
    };
    let top = params.top.unwrap_or(10).min(MAX_TOP_CLIENTS);
    Json(json!({ "candidates": candidates_json(&state.limits, top) })).into_response()
}

/// `/candidates`' list: each candidate's report, with its rule's rates beside it.
fn candidates_json(limits: &Limits<BackendStore>, top: usize) -> Value {
    let rules = limits.rules();
    let reports: Vec<Value> = limits
        .candidates(top)
        .into_iter()
        .map(|report| {
            let rule = rules.rules().iter().find(|rule| rule.name() == report.rule);
            let enforced: Vec<String> = rule
                .map(|rule| rule.quotas().iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            // The candidate's first rate in the rule's window (what the page draws it at).
            let window = rule
                .and_then(|rule| rule.quotas().first())
                .map(|q| q.rate().period());
            let per_window = rule
                .and_then(|rule| {
                    rules
                        .candidates(rule)
                        .find(|(label, _)| *label == report.candidate)
                })
                .and_then(|(_, candidate)| candidate.quotas().first())
                .zip(window)
                .map(|(quota, window)| {
                    f64::from(quota.rate().count()) * window.as_secs_f64()
                        / quota.rate().period().as_secs_f64()
                });
            let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
            value["enforced"] = json!(enforced);
            value["per_window"] = json!(per_window);
            value
        })
        .collect();
    Value::Array(reports)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuggestParams {
    rule: Option<String>,
    refuse: Option<f64>,
}

async fn suggest(
    State(state): State<AdminState<BackendStore>>,
    params: Result<Query<SuggestParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return bad_request(&rejection.body_text()),
    };
    let refuse = params.refuse.unwrap_or(1.0);
    if !(0.0..=100.0).contains(&refuse) {
        return bad_request("refuse is a percentage of clients, from 0 to 100");
    }
    let limits = state.limits.clone();
    // A pass over each rule's table of clients: off the async workers.
    let answer =
        tokio::task::spawn_blocking(move || suggestions(&limits, params.rule, refuse)).await;
    match answer {
        Ok(Ok(value)) => Json(value).into_response(),
        Ok(Err(message)) => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "not_found", "message": message })),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "suggestion failed").into_response(),
    }
}

/// `/suggest`'s answer: `rule`'s suggestion, or every measuring rule's.
fn suggestions(
    limits: &Limits<BackendStore>,
    rule: Option<String>,
    refuse: f64,
) -> Result<Value, String> {
    let names = match rule {
        Some(rule) => vec![rule],
        None => limits.suggesting(),
    };
    let mut answers = Vec::new();
    for name in &names {
        match limits.suggest(name, refuse) {
            Some(suggestion) => {
                answers.push(serde_json::to_value(&suggestion).unwrap_or(Value::Null))
            }
            None => {
                return Err(format!(
                    "no rule \"{name}\" measures its clients' peaks (give it suggest = true or candidates)"
                ));
            }
        }
    }
    Ok(json!({ "refuse_percent": refuse, "rules": answers }))
}

/// Most rules and most clients per rule one `/traffic` call returns.
const MAX_TRAFFIC_RULES: usize = tollgate::traffic::Traffic::MAX_RULES;
const MAX_TOP_CLIENTS: usize = 32;

async fn traffic(
    State(state): State<AdminState<BackendStore>>,
    params: Result<Query<TrafficParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return bad_request(&rejection.body_text()),
    };
    let top = params.top.unwrap_or(10).min(MAX_TOP_CLIENTS);
    let rules = params.rules.unwrap_or(50).clamp(1, MAX_TRAFFIC_RULES);
    Json(traffic_json(&state, rules, top)).into_response()
}

/// `/traffic`'s answer: what the page charts, too.
fn traffic_json(state: &AdminState<BackendStore>, rules: usize, top: usize) -> Value {
    let mut report = state.limits.traffic().report(state.limits.now(), top);
    report.rules.truncate(rules);
    let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
    // What the page links to: each active rule's path (for explain) and each refused
    // client's bucket key (for the bucket view and forgive).
    let active = state.limits.rules();
    if let Some(reports) = value.get_mut("rules").and_then(Value::as_array_mut) {
        for report in reports {
            let Some(rule) = report
                .get("rule")
                .and_then(Value::as_str)
                .and_then(|name| active.rules().iter().find(|rule| rule.name() == name))
            else {
                continue;
            };
            report["path"] = json!(format!("/{}", rule.key()));
            if let Some(top) = report.get_mut("top_refused").and_then(Value::as_array_mut) {
                for heavy in top {
                    if let Some(client) = heavy.get("client").and_then(Value::as_str) {
                        let bucket = rule.bucket_key(&Client::from_segment(client));
                        heavy["bucket"] = json!(bucket);
                    }
                }
            }
        }
    }
    value
}

async fn buckets(
    State(state): State<AdminState<BackendStore>>,
    params: Result<Query<BucketParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return bad_request(&rejection.body_text()),
    };
    match buckets_json(&state, params).await {
        Ok(rows) => Json(rows).into_response(),
        Err(Refusal::BadRequest(message)) => bad_request(&message),
        Err(Refusal::Store(failure)) => {
            (StatusCode::SERVICE_UNAVAILABLE, failure.to_string()).into_response()
        }
    }
}

/// Why a bucket listing was not made.
enum Refusal {
    BadRequest(String),
    Store(StoreError),
}

/// `/buckets`' answer for `params`: what the page shows, too.
async fn buckets_json(
    state: &AdminState<BackendStore>,
    params: BucketParams,
) -> Result<Value, Refusal> {
    let mut query = BucketQuery::new(state.limits.rules().clone(), state.limits.now());
    query.prefix = params.prefix.unwrap_or_default();
    if let Some(max) = params.max_fraction {
        if !(0.0..=1.0).contains(&max) {
            return Err(Refusal::BadRequest(format!(
                "max_fraction must be between 0 and 1, found {max}"
            )));
        }
        query.max_fraction = Some(max);
    }
    if let Some(sort) = params.sort.filter(|s| !s.is_empty()) {
        match sort.parse::<BucketSort>() {
            Ok(sort) => query.sort = sort,
            Err(message) => return Err(Refusal::BadRequest(message)),
        }
    }
    query.limit = params.limit.unwrap_or(100).clamp(1, MAX_ROWS);
    let limit = query.limit;
    let rows = state
        .limits
        .store()
        .buckets(query)
        .await
        .map_err(Refusal::Store)?;
    Ok(json!({
        "limit": limit,
        "rows": rows.iter().map(|row| json!({
            "key": row.key,
            "rule": row.rule,
            "kind": row.kind,
            "remaining": row.remaining,
            "capacity": row.capacity,
            "fraction": row.fraction,
            "last_seen": row.last_seen.as_unix_nanos() as f64 / 1e9,
        })).collect::<Vec<_>>(),
    }))
}

async fn forgive(
    State(state): State<AdminState<BackendStore>>,
    Path(key): Path<String>,
) -> Response {
    let rules = state.limits.rules().clone();
    // A global rule's one bucket is listed under the rule's name; others as `rule/client`.
    let global = rules
        .rules()
        .iter()
        .find(|r| r.name() == key && r.per() == Some(Per::Global));
    if let Some(client) = key.strip_prefix(CALLER_DEFINED_PREFIX) {
        let client = Client::Key(client.into());
        let bucket = BucketRef {
            rule: RuleId::CALLER_DEFINED,
            client: Some(&client),
        };
        let removed = state.limits.store().remove(bucket).await;
        return forgiven(&key, removed);
    }
    let (rule, client) = match global {
        Some(rule) => (rule, None),
        None => {
            let (rule_key, client) = key.rsplit_once('/').unwrap_or(("", key.as_str()));
            let Some(rule) = rules.get(rule_key).filter(|r| r.per() == Some(Per::Client)) else {
                return json_error(StatusCode::NOT_FOUND, "no_such_rule");
            };
            (rule, Some(Client::from_segment(client)))
        }
    };
    let bucket = BucketRef {
        rule: rule.id(),
        client: client.as_ref(),
    };
    let removed = state.limits.store().remove(bucket).await;
    forgiven(&key, removed)
}

/// The answer to a forgive: 204, 404 if there was no such bucket, 503 if the store failed.
fn forgiven(key: &str, removed: Result<bool, StoreError>) -> Response {
    match removed {
        Ok(true) => {
            tracing::info!(bucket = key, "bucket forgiven");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => json_error(StatusCode::NOT_FOUND, "no_such_bucket"),
        Err(failure) => (StatusCode::SERVICE_UNAVAILABLE, failure.to_string()).into_response(),
    }
}

/// `/explain`'s parameters: the request to explain, as a client would send it.
#[derive(Debug, Default)]
struct ExplainParams {
    /// The path, with its query (for `query:NAME` key parts).
    path: Option<String>,
    client: Option<String>,
    method: Option<String>,
    host: Option<String>,
    /// The plan the request's client is on, as the app or a trusted header would say.
    plan: Option<String>,
    /// `header.NAME=value`, for `header:NAME` and `cookie:NAME` key parts.
    headers: Vec<(String, String)>,
}

impl ExplainParams {
    fn parse(query: &str) -> ExplainParams {
        let mut params = ExplainParams::default();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "path" => params.path = Some(value),
                "client" => params.client = Some(value),
                "method" => params.method = Some(value),
                "host" => params.host = Some(value),
                "plan" => params.plan = Some(value).filter(|p| !p.is_empty()),
                other => {
                    if let Some(header) = other.strip_prefix("header.") {
                        params.headers.push((header.to_owned(), value));
                    }
                }
            }
        }
        params
    }

    /// The request the parameters describe (no body), or what is wrong with them.
    fn request(&self) -> Result<http::Request<()>, String> {
        let mut request = http::Request::builder()
            .method(self.method.as_deref().unwrap_or("GET"))
            .uri(self.path.as_deref().unwrap_or("/"));
        if let Some(host) = &self.host {
            request = request.header(header::HOST, host);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
            .body(())
            .map_err(|error| format!("not a request tollgate could receive: {error}"))
    }
}

async fn explain(
    State(state): State<AdminState<BackendStore>>,
    RawQuery(query): RawQuery,
) -> Response {
    explain_request(state, query, None).await
}

/// `POST /explain`: the same, for a request with this JSON body — its `json:` key parts,
/// and what each rule reserving an estimate would reserve.
async fn explain_body(
    State(state): State<AdminState<BackendStore>>,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    explain_request(state, query, Some(body)).await
}

async fn explain_request(
    state: AdminState<BackendStore>,
    query: Option<String>,
    body: Option<axum::body::Bytes>,
) -> Response {
    let params = ExplainParams::parse(query.as_deref().unwrap_or_default());
    let mut request = match params.request() {
        Ok(request) => request,
        Err(message) => return bad_request(&message),
    };
    let pointers: Vec<String> = state
        .limits
        .rules()
        .body_needs()
        .map(|needs| needs.pointers.clone())
        .unwrap_or_default();
    let json = body.map(|body| {
        if body.len() > MAX_REQUEST_JSON {
            RequestJson::unreadable(BodyProblem::TooLarge, &pointers)
        } else {
            RequestJson::read(&body, &pointers)
        }
    });
    if let Some(json) = &json {
        request.extensions_mut().insert(json.clone());
    }
    // A token or API key among the headers is verified as the layer would: the identity
    // it makes, why it failed, and the claims the rules use — never the credential.
    state.limits.verify_identity(&mut request);
    let identity = crate::identity::Identity::of(&state.limits.rules(), &request);
    let Some(client) = params
        .client
        .filter(|c| !c.is_empty())
        .or_else(|| identity.client.clone())
    else {
        return bad_request(
            "client is required (an address or an API key), unless a verified credential names one",
        );
    };
    let path = params.path.unwrap_or_else(|| "/".into());
    let rules = state.limits.rules().clone();
    let settings = rules.route_settings();
    let route = normalize_route(request.uri().path(), settings);
    let route = settings
        .parts
        .match_path(&request, route, settings.case_insensitive);
    // Addresses are grouped as the layer groups them (IPv6 by prefix).
    let client = match client.parse::<IpAddr>() {
        Ok(address) => Client::from_ip(address, rules.client_settings().ipv6_prefix).to_string(),
        Err(_) => client,
    };
    let why = rules.explain_as(&route, &client, params.plan.as_deref());
    let state_now = match &why.bucket {
        Some(_) => state
            .limits
            .peek_plan(&why.key, params.plan.as_deref())
            .await
            .ok()
            .map(|d| {
                json!({
                    "allowed": d.allowed(),
                    "remaining": d.remaining(),
                    "capacity": d.limit(),
                    "reset_seconds": d.reset().as_secs_f64(),
                })
            }),
        None => None,
    };
    Json(json!({
        "path": path,
        "route": why.route,
        "parts": why.parts.iter().map(|p| json!({"part": p.part, "value": p.value})).collect::<Vec<_>>(),
        "client": why.client,
        "key": why.key,
        "tried": why.tried.iter().map(|s| json!({"prefix": s.prefix, "has_rule": s.has_rule})).collect::<Vec<_>>(),
        "rule": why.rule,
        "kind": why.kind,
        "bucket": why.bucket,
        "plan": why.plan,
        "plan_source": why.plan_source.map(|s| s.to_string()),
        "plan_limit": why.plan_limit,
        "limit": why.limit,
        "also": why.also.iter().map(|a| json!({
            "limit": a.limit, "per": a.per, "rates": a.rates, "bucket": a.bucket, "shown": a.shown,
        })).collect::<Vec<_>>(),
        "estimates": estimates(&rules, &why, json.as_ref()),
        "identity": identity.to_json(),
        "state": state_now,
    }))
    .into_response()
}

/// What each limit of an explained request that reserves an estimate would reserve for
/// `json` (the request's body), or why it would reserve its `max`.
fn estimates(
    rules: &tollgate::config::RuleSet,
    why: &tollgate::config::Explanation,
    json: Option<&RequestJson>,
) -> Vec<serde_json::Value> {
    let own = why
        .rule
        .as_deref()
        .and_then(|name| rules.rules().iter().find(|rule| rule.name() == name));
    let also = why
        .also
        .iter()
        .filter_map(|a| rules.also_limits().find(|rule| rule.name() == a.limit));
    own.into_iter()
        .chain(also)
        .filter_map(|rule| {
            let settle = rule.settle()?;
            let estimate = settle.estimate_for(json, rules.prices())?;
            Some(json!({
                "limit": rule.name(),
                "reserve": rule.shown(*estimate.as_ref().unwrap_or(&rule.cost())),
                "unit": if settle.money.is_some() { "cents" } else { "tokens" },
                "amount": settle.money.map(|money| money.amount(*estimate.as_ref().unwrap_or(&rule.cost()))),
                "prompt_tokens": json.map(RequestJson::prompt_tokens),
                "output_ceiling": json.and_then(RequestJson::output_ceiling),
                "model": json.and_then(RequestJson::model),
                "fallback": estimate.err().map(|why| why.to_string()),
            }))
        })
        .collect()
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

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": "bad_request", "message": message })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes this file registers, as OpenAPI writes them (`{*key}` → `{key}`), with
    /// their methods.
    fn registered() -> std::collections::BTreeSet<(String, String)> {
        let source = include_str!("admin.rs");
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
