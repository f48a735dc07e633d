//! What a decision means for the response: call the inner service (with these rate-limit
//! headers) or answer with this denial. Shared by [`RateLimit`](crate::RateLimit), which
//! settles decisions that are ready at once, and its [`ResponseFuture`](crate::ResponseFuture),
//! which settles the ones that arrive later. Counts each outcome in the rule's metrics.

use bytes::Bytes;
use http::Response;

use super::response::{RateLimitHeaders, rejection, stacked_rejection};
use super::trace::DecisionSpan;
use crate::clock::Timestamp;
use crate::config::{HeaderStyle, ResponseSettings, Rule};
use crate::decision::Decision;
use crate::key::Client;
use crate::limits::Active;
use crate::store::StoreError;
use crate::traffic::RuleCounters;

/// The verdict, in the form the response needs.
pub(crate) enum Outcome {
    /// Call the inner service, then add these headers (none for a failed store).
    Admit(Option<RateLimitHeaders>),
    /// `on_limit = "delay"`: wait this long, then call the inner service and add these
    /// headers. Its place in the schedule is already taken.
    Hold(std::time::Duration, RateLimitHeaders),
    /// Answer with this denial.
    Reject(Response<Bytes>),
}

impl Outcome {
    /// The verdict on `result`, decided at `now` for `client` under the rule at `index` of
    /// `rules` (and, for a decision over several limits, those its note names), answering
    /// as the rules' `[response]` says; recorded in `span`.
    pub(crate) fn decided(
        result: Result<Decision, StoreError>,
        rules: &Active,
        index: usize,
        now: Timestamp,
        client: &Client<'_>,
        span: &DecisionSpan,
    ) -> Outcome {
        let Some(rule) = rules.rule(index) else {
            return Outcome::Admit(None);
        };
        match result {
            Ok(decision) if decision.stack().is_some() => {
                Outcome::stacked(decision, rules, index, now, span)
            }
            result => Outcome::new(
                result,
                rule,
                rules.counters(index),
                rules.response(),
                now,
                client,
                span,
            ),
        }
    }

    /// The verdict on a decision over several limits (counted, limit by limit, as it was
    /// made): a refusal by the limit that spoke, or an admission — held first if the rule
    /// delays it — with the headers of every limit shown.
    fn stacked(
        decision: Decision,
        rules: &Active,
        index: usize,
        now: Timestamp,
        span: &DecisionSpan,
    ) -> Outcome {
        let response = rules.response();
        let speaker = decision
            .stack()
            .and_then(|note| rules.rule(note.speaker))
            .or_else(|| rules.rule(index));
        let Some(speaker) = speaker else {
            return Outcome::Admit(None);
        };
        if !decision.allowed() {
            span.record(speaker, "refused", || 0);
            return Outcome::Reject(stacked_rejection(rules, speaker, &decision, response));
        }
        let delay = decision.delay();
        if !delay.is_zero() {
            if tokio::runtime::Handle::try_current().is_err() {
                span.record(speaker, "refused", || 0);
                let refused = decision.refused_instead_of_held();
                return Outcome::Reject(stacked_rejection(rules, speaker, &refused, response));
            }
            if let Some(counters) = rules.counters(index) {
                counters.delayed(now, delay);
            }
            span.record(speaker, "delayed", || decision.remaining());
            return Outcome::Hold(
                delay,
                RateLimitHeaders::stacked(rules, &decision, response.headers),
            );
        }
        span.record(speaker, "admitted", || decision.remaining());
        (response.headers != HeaderStyle::None)
            .then(|| RateLimitHeaders::stacked(rules, &decision, response.headers))
            .map_or(Outcome::Admit(None), |headers| {
                Outcome::Admit(Some(headers))
            })
    }

    /// The verdict on `result`, decided at `now` for `client` under `rule` (counted in
    /// `counters`), answering as `response` says.
    fn new(
        result: Result<Decision, StoreError>,
        rule: &Rule,
        counters: Option<&RuleCounters>,
        response: &ResponseSettings,
        now: Timestamp,
        client: &Client<'_>,
        span: &DecisionSpan,
    ) -> Outcome {
        match result {
            // Shadow: measure and report, never refuse, and show the client nothing.
            Ok(decision) if rule.is_shadow() => {
                let outcome = if decision.allowed() {
                    "admitted"
                } else {
                    "shadow"
                };
                span.record(rule, outcome, || decision.remaining());
                if let Some(counters) = counters {
                    if decision.allowed() {
                        counters.admitted(now);
                    } else {
                        counters.shadow_refused(now);
                        tracing::debug!(
                            rule = rule.name(),
                            retry_after = ?decision.retry_after(),
                            "shadow rule would have limited this request"
                        );
                    }
                }
                Outcome::Admit(None)
            }
            Ok(decision) if decision.allowed() && !decision.delay().is_zero() => {
                // Holding needs a timer: without a tokio runtime the request is refused for
                // as long as it would have waited.
                if tokio::runtime::Handle::try_current().is_err() {
                    span.record(rule, "refused", || 0);
                    if let Some(counters) = counters {
                        counters.refused(now, Some(client));
                    }
                    return Outcome::Reject(rejection(
                        rule,
                        &decision.refused_instead_of_held(),
                        response,
                    ));
                }
                let delay = decision.delay();
                span.record(rule, "delayed", || decision.remaining());
                if let Some(counters) = counters {
                    counters.held(now, delay);
                }
                Outcome::Hold(
                    delay,
                    RateLimitHeaders::new(rule, &decision, response.headers),
                )
            }
            Ok(decision) if decision.allowed() => {
                span.record(rule, "admitted", || decision.remaining());
                if let Some(counters) = counters {
                    counters.admitted(now);
                }
                Outcome::Admit(RateLimitHeaders::sent(rule, &decision, response.headers))
            }
            Ok(decision) => {
                span.record(rule, "refused", || 0);
                if let Some(counters) = counters {
                    counters.refused(now, Some(client));
                }
                Outcome::Reject(rejection(rule, &decision, response))
            }
            Err(error) => {
                // Failing open: a broken store must not take the service down with it.
                span.record(rule, "admitted", || 0);
                tracing::warn!(rule = rule.name(), %error, "rate-limit store failed; request admitted");
                Outcome::Admit(None)
            }
        }
    }
}
