//! `GET /explain` and `POST /explain`: which rule and bucket a request would use, and why.

use std::net::IpAddr;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use tollgate::key::{BodyProblem, Client, MAX_REQUEST_JSON, RequestJson, normalize_route};
use tollgate::store::BackendStore;

use super::state::{AdminState, bad_request};

/// `/explain`'s parameters: the request to explain, as a client would send it.
#[derive(Debug, Default)]
pub(super) struct ExplainParams {
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

pub(super) async fn explain(
    State(state): State<AdminState<BackendStore>>,
    RawQuery(query): RawQuery,
) -> Response {
    explain_request(state, query, None).await
}

/// `POST /explain`: the same, for a request with this JSON body — its `json:` key parts,
/// and what each rule reserving an estimate would reserve.
pub(super) async fn explain_body(
    State(state): State<AdminState<BackendStore>>,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    explain_request(state, query, Some(body)).await
}

pub(super) async fn explain_request(
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
pub(super) fn estimates(
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
