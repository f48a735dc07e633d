//! What clients see: the 429 and the rate-limit headers.
//!
//! On a denial: the configured status (429), `Retry-After` in whole seconds (rounded up,
//! never 0), a small JSON body, and the headers of the configured style. Admitted responses
//! get the same rate-limit headers without `Retry-After`. Every figure comes from the one
//! decision, made at one reading of the clock.
//!
//! - `ietf` (default), draft-ietf-httpapi-ratelimit-headers-10:
//!   `RateLimit-Policy: "<rule>";q=<burst>;w=<seconds to refill the burst>` and
//!   `RateLimit: "<rule>";r=<remaining>;t=<seconds to the next token>` (`t` equals
//!   `Retry-After` on a denial).
//! - `legacy`: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds
//!   until the bucket is full).
//! - `both`, or `none` (only `Retry-After`, on denials).
//!
//! ```
//! use tollgate::response::{BodyTemplate, ResponseSettings};
//!
//! let settings = ResponseSettings::default();
//! assert_eq!(settings.status, 429);
//! assert_eq!(settings.body.render_for(3, "api"), r#"{"error":"rate_limited","retry_after":3,"limit":"api"}"#);
//! assert_eq!(BodyTemplate::new("slow down").render(3), "slow down");
//! ```

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response};

pub use crate::config::{BodyTemplate, HeaderStyle, ResponseSettings};
use crate::config::{Rule, RuleSet};
use crate::decision::Decision;
use crate::key::Invalid;

/// `Retry-After` values for the first seconds, made once per process and shared.
fn retry_after_value(seconds: u64) -> HeaderValue {
    static SMALL: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    let small = SMALL.get_or_init(|| {
        (0..BodyTemplate::PRERENDERED)
            .map(HeaderValue::from)
            .collect()
    });
    usize::try_from(seconds)
        .ok()
        .and_then(|index| small.get(index))
        .cloned()
        .unwrap_or_else(|| HeaderValue::from(seconds))
}

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The rate-limit headers for one decision, computed when it was made and added to the
/// response when it is ready: what the layer adds to every response, for front ends that
/// answer in their own protocol (Envoy's `response_headers_to_add`, say). Kept small (it
/// rides in every response future): the legacy trio, which most deployments never send,
/// is boxed.
///
/// ```
/// use http::HeaderMap;
/// use tollgate::Limits;
/// use tollgate::response::{HeaderStyle, RateLimitHeaders};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::from_toml("[limits]\napi = \"100/min\"\n")?;
/// let decision = limits.check("api/alice", 1).await?;
/// let rules = limits.rules();
/// let rule = rules.resolve("api", "alice").expect("api limits alice");
///
/// let mut headers = HeaderMap::new();
/// RateLimitHeaders::new(rule, &decision, HeaderStyle::Both).apply(&mut headers);
/// assert_eq!(headers["ratelimit-policy"], "\"api\";q=100;w=60");
/// assert_eq!(headers["ratelimit"], "\"api\";r=99;t=1");
/// assert_eq!(headers["x-ratelimit-remaining"], "99");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct RateLimitHeaders {
    policy: Option<HeaderValue>,
    state: Option<HeaderValue>,
    legacy: Option<Box<[HeaderValue; 3]>>,
}

impl RateLimitHeaders {
    /// The headers of `style` for `decision`, made under `rule`.
    pub fn new(rule: &Rule, decision: &Decision, style: HeaderStyle) -> RateLimitHeaders {
        let mut headers = RateLimitHeaders::default();
        if style.ietf() {
            headers.policy = rule.policy(decision.quota()).cloned();
            headers.state = state_value(
                rule.policy_name(),
                rule.shown(decision.remaining()),
                decision.next_token_secs(),
            );
        }
        if style.legacy() {
            headers.legacy = Some(Box::new([
                HeaderValue::from(rule.shown(decision.limit())),
                HeaderValue::from(rule.shown(decision.remaining())),
                HeaderValue::from(decision.reset_secs()),
            ]));
        }
        headers
    }

    /// The headers of `style` for a decision over several limits (`decision`'s note says
    /// which): `RateLimit-Policy` lists every limit shown, `RateLimit` and the legacy trio
    /// report the one that spoke — unless it is not shown (`headers = false`), and then
    /// nothing does.
    pub(crate) fn stacked(
        rules: &RuleSet,
        decision: &Decision,
        style: HeaderStyle,
    ) -> RateLimitHeaders {
        let Some(note) = decision.stack() else {
            return RateLimitHeaders::default();
        };
        let mut headers = RateLimitHeaders::default();
        let speaker = note
            .speaker_shown
            .then(|| rules.rule(note.speaker))
            .flatten();
        if style.ietf() {
            let mut joined: Vec<u8> = Vec::new();
            for (index, quota) in &note.shown {
                if let Some(policy) = rules.rule(*index).and_then(|rule| rule.policy(*quota)) {
                    if !joined.is_empty() {
                        joined.extend_from_slice(b", ");
                    }
                    joined.extend_from_slice(policy.as_bytes());
                }
            }
            if !joined.is_empty() {
                headers.policy = HeaderValue::from_maybe_shared(Bytes::from(joined)).ok();
            }
            headers.state = speaker.and_then(|rule| {
                state_value(
                    rule.policy_name(),
                    rule.shown(decision.remaining()),
                    decision.next_token_secs(),
                )
            });
        }
        if let Some(rule) = speaker.filter(|_| style.legacy()) {
            headers.legacy = Some(Box::new([
                HeaderValue::from(rule.shown(decision.limit())),
                HeaderValue::from(rule.shown(decision.remaining())),
                HeaderValue::from(decision.reset_secs()),
            ]));
        }
        headers
    }

    /// The headers for `decision`, or `None` when `style` sends none (nothing to carry).
    pub(crate) fn sent(
        rule: &Rule,
        decision: &Decision,
        style: HeaderStyle,
    ) -> Option<RateLimitHeaders> {
        (style != HeaderStyle::None).then(|| RateLimitHeaders::new(rule, decision, style))
    }

    /// Adds the headers to `map`. The IETF fields are appended (they are lists, and an
    /// upstream's own policies stay visible); the legacy ones replace any upstream value.
    pub fn apply(self, map: &mut HeaderMap) {
        if let Some(policy) = self.policy {
            map.append(RATELIMIT_POLICY, policy);
        }
        if let Some(state) = self.state {
            map.append(RATELIMIT, state);
        }
        if let Some(legacy) = self.legacy {
            let [limit, remaining, reset] = *legacy;
            map.insert(X_RATELIMIT_LIMIT, limit);
            map.insert(X_RATELIMIT_REMAINING, remaining);
            map.insert(X_RATELIMIT_RESET, reset);
        }
    }
}

/// `"<rule>";r=<remaining>;t=<seconds>` in one allocation of exactly its length (so the
/// `Bytes` inside the value takes it over without a second allocation).
fn state_value(policy_name: &str, remaining: u64, next_token_secs: u64) -> Option<HeaderValue> {
    let mut remaining_text = itoa::Buffer::new();
    let remaining = remaining_text.format(remaining).as_bytes();
    let mut next_text = itoa::Buffer::new();
    let next = next_text.format(next_token_secs).as_bytes();
    let mut text = Vec::with_capacity(policy_name.len() + 6 + remaining.len() + next.len());
    text.extend_from_slice(policy_name.as_bytes());
    text.extend_from_slice(b";r=");
    text.extend_from_slice(remaining);
    text.extend_from_slice(b";t=");
    text.extend_from_slice(next);
    HeaderValue::from_maybe_shared(Bytes::from(text)).ok()
}

/// The denial response for `decision` under `rule`, its body not yet wrapped.
pub(crate) fn rejection(
    rule: &Rule,
    decision: &Decision,
    settings: &ResponseSettings,
) -> Response<Bytes> {
    let mut response = denial(rule, decision, settings);
    RateLimitHeaders::new(rule, decision, settings.headers).apply(response.headers_mut());
    response
}

/// The denial of a request several limits decided, by the one that refused it (`rule`,
/// named in the body): `Retry-After` its wait, the headers as [`RateLimitHeaders::stacked`]
/// makes them.
pub(crate) fn stacked_rejection(
    rules: &RuleSet,
    rule: &Rule,
    decision: &Decision,
    settings: &ResponseSettings,
) -> Response<Bytes> {
    let mut response = denial(rule, decision, settings);
    RateLimitHeaders::stacked(rules, decision, settings.headers).apply(response.headers_mut());
    response
}

/// The status, body, `Retry-After` and content type of a denial by `rule`.
fn denial(rule: &Rule, decision: &Decision, settings: &ResponseSettings) -> Response<Bytes> {
    let retry_after = decision.retry_after_secs();
    let mut response = Response::new(settings.body.bytes_for(retry_after, rule.name()));
    *response.status_mut() = settings.status;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, retry_after_value(retry_after));
    headers.insert(CONTENT_TYPE, settings.content_type.clone());
    response
}

/// The denial of a request over its rule's concurrency cap: the configured status,
/// `Retry-After: 1`, the configured body. No `RateLimit` fields: they describe rates, and the
/// request took nothing from the rule's rate.
pub(crate) fn busy(settings: &ResponseSettings) -> Response<Bytes> {
    let mut response = Response::new(settings.body.bytes(1));
    *response.status_mut() = settings.status;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, retry_after_value(1));
    headers.insert(CONTENT_TYPE, settings.content_type.clone());
    response
}

/// A refusal as its client can read it: a gRPC call (`content-type: application/grpc…`)
/// cannot read an HTTP 429, so it is answered as gRPC answers — HTTP 200, no body,
/// `grpc-status` 8 (RESOURCE_EXHAUSTED; 16, UNAUTHENTICATED, for a failed credential) and
/// a `grpc-message` saying when to retry, keeping `retry-after` (gRPC metadata) and the
/// rate-limit headers. Any other request's refusal is returned as it is.
pub(crate) fn refusal_for<B>(
    response: Response<Bytes>,
    request: &http::Request<B>,
) -> Response<Bytes> {
    let grpc = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .get(..16)
                .is_some_and(|head| head.eq_ignore_ascii_case("application/grpc"))
        });
    if !grpc {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let retry = parts
        .headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (code, message) = if parts.status == http::StatusCode::UNAUTHORIZED {
        ("16", "credentials not valid".to_owned())
    } else {
        (
            "8",
            match &retry {
                Some(seconds) => format!("rate limited: retry after {seconds} s"),
                None => "rate limited".to_owned(),
            },
        )
    };
    parts.status = http::StatusCode::OK;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    parts
        .headers
        .insert(GRPC_STATUS, HeaderValue::from_static(code));
    // Printable ASCII needs no percent-encoding in grpc-message.
    if let Ok(message) = HeaderValue::from_str(&message) {
        parts.headers.insert(GRPC_MESSAGE, message);
    }
    Response::from_parts(parts, Bytes::new())
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// The answer to a request whose credential failed under `[identity] on_invalid =
/// "reject"`: 401 with `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750), and a
/// JSON body saying why — never echoing the credential.
pub(crate) fn unauthorized(invalid: Invalid) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(format!(
        "{{\"error\":\"invalid_credentials\",\"reason\":\"{}\"}}",
        invalid.reason()
    )));
    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    headers.insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer error=\"invalid_token\""),
    );
    headers.insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_bodies_and_retry_after_values_match_rendered_ones() {
        let templates = [
            BodyTemplate::new(BodyTemplate::DEFAULT),
            BodyTemplate::new("no number here"),
            BodyTemplate::new("{retry_after} and again {retry_after}"),
        ];
        for template in &templates {
            for seconds in [0, 1, 59, 63, 64, 65, 3_600, u64::MAX] {
                assert_eq!(
                    template.bytes(seconds),
                    template.render(seconds),
                    "{seconds}"
                );
            }
        }
        for seconds in [0, 1, 63, 64, 86_400, u64::MAX] {
            assert_eq!(retry_after_value(seconds), HeaderValue::from(seconds));
        }
    }
}
