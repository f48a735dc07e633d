//! `GET /config`: the active rules, their sources, the store, the listeners' TLS, the
//! concurrency caps and the last reloads.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use tollgate::config::{Per, RuleSet, Validator};
use tollgate::reload::SourceStatus;
use tollgate::store::BackendStore;
use tollgate::{Concurrency, Limits, Quota};

use crate::tls::TlsAcceptor;

use super::state::{AdminState, unix_seconds};

pub(super) async fn config(State(state): State<AdminState<BackendStore>>) -> Json<Value> {
    Json(config_json(&state))
}

/// `/config`'s answer: what the page shows, too.
pub(super) fn config_json(state: &AdminState<BackendStore>) -> Value {
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
pub(super) fn listener_tls_json(tls: &TlsAcceptor) -> Value {
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

/// One reload of the history: when, why, the generation after it, and what changed (or
/// why it was refused).
pub(super) fn reload_json(event: &tollgate::reload::ReloadEvent) -> Value {
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
pub(super) fn concurrency_json(limits: &Limits<BackendStore>, rules: &RuleSet) -> Vec<Value> {
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
pub(super) fn source_json(source: &SourceStatus) -> Value {
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
pub(super) fn store_json(store: &BackendStore) -> Value {
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
