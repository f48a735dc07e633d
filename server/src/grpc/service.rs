//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over [`Limits`].

use std::sync::Arc;

use http::HeaderMap;
use tonic::{Request, Response, Status};

use super::descriptor::{DescriptorKey, keys};
use super::options::GrpcOptions;
use super::proto::envoy::config::core::v3::HeaderValue;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use super::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use super::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::status::{descriptor_status, overall};
use tollgate::config::RuleSet;
use tollgate::response::RateLimitHeaders;
use tollgate::store::Store;
use tollgate::{BucketBy, KeyCheck};
use tollgate::{Decision, Limits};

/// The rate limit service: every request's descriptors decided together.
pub(super) struct Decider<St> {
    limits: Limits<St>,
    options: Arc<GrpcOptions>,
}

impl<St: Store> Decider<St> {
    pub(super) fn new(limits: Limits<St>, options: Arc<GrpcOptions>) -> Self {
        register_at_zero(&limits.rules());
        Decider { limits, options }
    }
}

/// Every code of `tollgate_grpc_requests_total`.
const CODES: [&str; 4] = ["ok", "over_limit", "invalid", "unavailable"];

/// The request counters of every domain the rules name (and `other`), made at 0 when the
/// front end starts: a dashboard's `increase()` cannot see a series' first sample. A domain
/// a later reload adds starts counting at its first request.
fn register_at_zero(rules: &RuleSet) {
    let mut domains: Vec<&str> = rules
        .rules()
        .iter()
        .filter_map(|rule| rule.key().split('/').next())
        .filter(|first| !first.is_empty())
        .chain(["other"])
        .collect();
    domains.sort_unstable();
    domains.dedup();
    for domain in domains {
        let domain: Arc<str> = Arc::from(domain);
        for code in CODES {
            metrics::counter!("tollgate_grpc_requests_total", "domain" => Arc::clone(&domain), "code" => code)
                .increment(0);
        }
    }
}

#[tonic::async_trait]
impl<St: Store> RateLimitService for Decider<St> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if crate::telemetry::started() {
            let span = crate::telemetry::grpc_span(
                &request.get_ref().domain,
                &request.metadata().clone().into_headers(),
            );
            let answer =
                tracing::Instrument::instrument(self.decide(request.into_inner()), span.clone())
                    .await;
            let outcome = match &answer {
                Ok(response) if response.get_ref().overall_code() == Code::OverLimit => "refused",
                Ok(_) => "admitted",
                Err(_) => "error",
            };
            span.record("ratelimit.outcome", outcome);
            return answer;
        }
        self.decide(request.into_inner()).await
    }
}

impl<St: Store> Decider<St> {
    /// Decides one `ShouldRateLimit` request.
    async fn decide(
        &self,
        request: RateLimitRequest,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let rules = self.limits.rules().clone();
        let fold_case = rules.route_settings().case_insensitive;
        let domain = domain_label(&rules, &request.domain, fold_case);
        let keys = match keys(&request, &self.options, fold_case) {
            Ok(keys) => keys,
            Err(status) => {
                count(domain, "invalid");
                return Err(status);
            }
        };
        let checks: Vec<KeyCheck<'_>> = keys.iter().map(DescriptorKey::check).collect();
        let decisions = match self.limits.check_keys(&checks, BucketBy::Remainder).await {
            Ok(decisions) => decisions,
            Err(error) => {
                // Envoy's `failure_mode_deny` decides what an error means; say what it was.
                tracing::warn!(domain = request.domain, %error, "rate-limit store failed");
                count(domain, "unavailable");
                return Err(Status::unavailable(format!(
                    "the rate-limit store failed: {error}"
                )));
            }
        };
        // Rules with on_limit = "delay" answer OK when the request's turn comes (Envoy's
        // rate-limit timeout must allow for max_delay). A refusal took nothing: no wait.
        if decisions.iter().all(|d| d.allowed()) {
            let hold = decisions
                .iter()
                .map(|d| d.delay())
                .max()
                .unwrap_or_default();
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
        }
        let statuses: Vec<_> = decisions.iter().map(descriptor_status).collect();
        let overall_code = overall(&statuses);
        count(
            domain,
            match overall_code {
                Code::OverLimit => "over_limit",
                _ => "ok",
            },
        );
        let response_headers_to_add = if self.options.response_headers {
            suggested_headers(&rules, &decisions)
        } else {
            Vec::new()
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: overall_code.into(),
            statuses,
            response_headers_to_add,
            request_headers_to_add: Vec::new(),
        }))
    }
}

/// The domain as a metrics label: itself if some rule is written under it, else `other`,
/// so callers cannot grow the label set.
fn domain_label(rules: &RuleSet, domain: &str, fold_case: bool) -> Arc<str> {
    let encoded = tollgate::key::encode_segment(domain);
    let known = if fold_case {
        rules.has_rules_under(&encoded.to_lowercase())
    } else {
        rules.has_rules_under(&encoded)
    };
    if known && !domain.is_empty() {
        Arc::from(encoded.as_ref())
    } else {
        Arc::from("other")
    }
}

fn count(domain: Arc<str>, code: &'static str) {
    metrics::counter!("tollgate_grpc_requests_total", "domain" => domain, "code" => code)
        .increment(1);
}

/// The rate-limit headers of the most restrictive enforced decision — on a refusal the one
/// that keeps the caller waiting longest, with `Retry-After`; otherwise the one with the
/// fewest left — in the `[response] headers` style, as the HTTP layer sends them.
fn suggested_headers(rules: &RuleSet, decisions: &[Decision]) -> Vec<HeaderValue> {
    let enforced = decisions
        .iter()
        .filter(|d| d.rule().is_some() && !d.shadow() && d.limit() != u64::MAX);
    let worst = enforced.min_by_key(|d| {
        (
            d.allowed(),
            std::cmp::Reverse(d.retry_after()),
            d.remaining(),
        )
    });
    let Some(decision) = worst else {
        return Vec::new();
    };
    let Some(rule) = decision
        .rule()
        .and_then(|name| rules.get(if name == "/" { "" } else { name }))
    else {
        return Vec::new();
    };
    let mut map = HeaderMap::new();
    RateLimitHeaders::new(rule, decision, rules.response().headers).apply(&mut map);
    if !decision.allowed() {
        map.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(decision.retry_after_secs()),
        );
    }
    map.iter()
        .filter_map(|(name, value)| {
            Some(HeaderValue {
                key: name.as_str().to_owned(),
                value: value.to_str().ok()?.to_owned(),
                raw_value: Vec::new(),
            })
        })
        .collect()
}
