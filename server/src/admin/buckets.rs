//! `GET /buckets` (filtered and sorted server-side) and `DELETE /buckets/{key}` (forgive
//! one client).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use tollgate::config::{Per, RuleId};
use tollgate::key::Client;
use tollgate::store::{
    BackendStore, BucketQuery, BucketRef, BucketSort, CALLER_DEFINED_PREFIX, Inspection, StoreError,
};

use crate::server::json_error;

use super::state::{AdminState, bad_request};

/// Most rows one `/buckets` call returns.
pub const MAX_ROWS: usize = 10_000;

#[derive(Debug, Default, Deserialize)]
pub(super) struct BucketParams {
    pub(super) prefix: Option<String>,
    pub(super) max_fraction: Option<f64>,
    pub(super) sort: Option<String>,
    pub(super) limit: Option<usize>,
}

pub(super) async fn buckets(
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
pub(super) enum Refusal {
    BadRequest(String),
    Store(StoreError),
}

/// `/buckets`' answer for `params`: what the page shows, too.
pub(super) async fn buckets_json(
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

pub(super) async fn forgive(
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
pub(super) fn forgiven(key: &str, removed: Result<bool, StoreError>) -> Response {
    match removed {
        Ok(true) => {
            tracing::info!(bucket = key, "bucket forgiven");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => json_error(StatusCode::NOT_FOUND, "no_such_bucket"),
        Err(failure) => (StatusCode::SERVICE_UNAVAILABLE, failure.to_string()).into_response(),
    }
}
