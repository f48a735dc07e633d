//! Each decision as a `tracing` span, `tollgate.decision` (target `tollgate::decision`, level
//! DEBUG), so an application's own tracing pipeline — `tracing-opentelemetry` included —
//! shows which rule spoke, what it allows and what it said, as a child of the request's
//! span. The attribute names are the ones the service exports over OTLP (its README's
//! telemetry convention):
//!
//! | field | what |
//! |---|---|
//! | `ratelimit.rule` | the rule's name, as in the config |
//! | `ratelimit.limit` | its first rate as the config reads it back (`100/1m`) |
//! | `ratelimit.outcome` | `admitted`, `refused`, `delayed` or `shadow` (a shadow rule's would-be refusal) |
//! | `ratelimit.remaining` | what the bucket has left after the decision (the `RateLimit` header's `r`) |
//! | `ratelimit.store` | where buckets live: `memory`, `redis`, `disk`, or a store of one's own |
//!
//! The span lasts from the start of the decision to its answer, so a remote store's round
//! trip is its length; with Redis, each call of the decision script is a child span of its
//! own (`redis`, client kind: `db.system.name`, `db.operation.name`, `ratelimit.buckets`,
//! `error.type` when it failed). When no subscriber takes DEBUG spans from `tollgate::decision` the
//! span is never built: a callsite check, a few instructions; with no `tracing` subscriber
//! at all, one atomic load (the spans are not handed to `log`).
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use http::Request;
//! use tollgate::{Limits, RateLimitLayer, key::PeerAddr};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any subscriber that takes DEBUG from `tollgate::decision` sees the spans, e.g.
//! // `tracing_subscriber::fmt().with_env_filter("tollgate::decision=debug").init()`, or a
//! // `tracing-opentelemetry` layer with the same filter.
//! let limits = Limits::from_toml("[limits]\n\"/\" = \"10/min\"\n")?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limits));
//! let mut request = Request::get("/").body(Body::empty())?;
//! request.extensions_mut().insert(PeerAddr("192.0.2.1:1234".parse()?));
//! app.oneshot(request).await?;
//! # Ok(()) }
//! ```

use tracing::Span;
use tracing::field::{Empty, display};

use crate::config::Rule;

/// The span of one decision against a store of kind `store`: disabled (costing nothing)
/// unless a subscriber wants it.
pub(crate) struct DecisionSpan {
    /// `None` while no subscriber exists: nothing to enter, record or drop.
    span: Option<Span>,
    store: &'static str,
}

impl DecisionSpan {
    /// A span for a decision starting now against `store` (its [`Store::kind`]), under the
    /// current span.
    ///
    /// [`Store::kind`]: crate::store::Store::kind
    #[inline]
    pub(crate) fn start(store: &'static str) -> DecisionSpan {
        // No subscriber at all: no span. The macro would otherwise, with tracing's `log`
        // feature on (axum's default features turn it on), hand the disabled span to `log`
        // on every request — about 250 instructions for nothing.
        if !tracing::dispatcher::has_been_set() {
            return DecisionSpan { span: None, store };
        }
        let span = tracing::debug_span!(
            target: "tollgate::decision",
            "tollgate.decision",
            ratelimit.rule = Empty,
            ratelimit.limit = Empty,
            ratelimit.outcome = Empty,
            ratelimit.remaining = Empty,
            ratelimit.store = Empty,
        );
        DecisionSpan {
            span: Some(span),
            store,
        }
    }

    /// Runs `work` inside the span (a store's own spans, such as a Redis call's, become
    /// its children).
    #[inline]
    pub(crate) fn in_scope<R>(&self, work: impl FnOnce() -> R) -> R {
        match &self.span {
            Some(span) => span.in_scope(work),
            None => work(),
        }
    }

    /// Records what `rule` decided: `outcome`, and what `remaining` says is left after it —
    /// asked only when a span records it (a division the decision otherwise never does
    /// when no header shows it).
    #[inline]
    pub(crate) fn record(
        &self,
        rule: &Rule,
        outcome: &'static str,
        remaining: impl FnOnce() -> u64,
    ) {
        let Some(span) = self.span.as_ref().filter(|span| !span.is_disabled()) else {
            return;
        };
        let remaining = remaining();
        span.record("ratelimit.rule", rule.name());
        if let Some(quota) = rule.quotas().first() {
            span.record("ratelimit.limit", display(quota.rate()));
        }
        span.record("ratelimit.outcome", outcome);
        span.record("ratelimit.remaining", remaining);
        span.record("ratelimit.store", self.store);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::subscriber::Subscriber;

    /// A subscriber keeping every field recorded, as `name=value`.
    #[derive(Clone, Default)]
    struct Fields(Arc<Mutex<Vec<String>>>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if let Ok(mut fields) = self.0.lock() {
                fields.push(format!("{}={value:?}", field.name()));
            }
        }
    }

    impl Subscriber for Fields {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, values: &Record<'_>) {
            values.record(&mut self.clone());
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_decision_records_its_rule_limit_outcome_remaining_and_store() {
        let rules = crate::config::RuleSet::from_toml("[limits]\nlogin = \"5/min\"\n").unwrap();
        let rule = rules.get("login").unwrap();
        let fields = Fields::default();
        tracing::subscriber::with_default(fields.clone(), || {
            DecisionSpan::start("memory").record(rule, "admitted", || 3);
        });
        let recorded = fields.0.lock().unwrap().clone();
        assert_eq!(
            recorded,
            [
                "ratelimit.rule=\"login\"",
                "ratelimit.limit=5/1m",
                "ratelimit.outcome=\"admitted\"",
                "ratelimit.remaining=3",
                "ratelimit.store=\"memory\"",
            ]
        );
    }
}
