//! Choosing limits from traffic: `GET /traffic`, `GET /candidates`, `GET /suggest`.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use tollgate::Limits;
use tollgate::key::Client;
use tollgate::store::BackendStore;

use super::state::{AdminState, bad_request};

#[derive(Deserialize)]
pub(super) struct TrafficParams {
    rules: Option<usize>,
    top: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CandidateParams {
    top: Option<usize>,
}

pub(super) async fn candidates(
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
pub(super) fn candidates_json(limits: &Limits<BackendStore>, top: usize) -> Value {
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
pub(super) struct SuggestParams {
    rule: Option<String>,
    refuse: Option<f64>,
}

pub(super) async fn suggest(
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
pub(super) fn suggestions(
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
pub(super) const MAX_TRAFFIC_RULES: usize = tollgate::traffic::Traffic::MAX_RULES;

pub(super) const MAX_TOP_CLIENTS: usize = 32;

pub(super) async fn traffic(
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
pub(super) fn traffic_json(state: &AdminState<BackendStore>, rules: usize, top: usize) -> Value {
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
