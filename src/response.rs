//! What clients see: the 429 and the rate-limit headers (SPEC §4).
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
//! assert_eq!(settings.body.render(3), r#"{"error":"rate_limited","retry_after":3}"#);
//! assert_eq!(BodyTemplate::new("slow down").render(3), "slow down");
//! ```

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde::Deserialize;

use crate::config::Rule;
use crate::decision::Decision;

/// Which rate-limit headers responses carry (`[response] headers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit` and `RateLimit-Policy` (the default).
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Legacy,
    /// Both of the above.
    Both,
    /// None; denials still carry `Retry-After`.
    None,
}

impl HeaderStyle {
    fn ietf(self) -> bool {
        matches!(self, HeaderStyle::Ietf | HeaderStyle::Both)
    }

    fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::Both)
    }
}

/// What a denial looks like: the `[response]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponseSettings {
    /// Status of a denial (default 429).
    pub status: StatusCode,
    /// Which rate-limit headers to send.
    pub headers: HeaderStyle,
    /// The denial body.
    pub body: BodyTemplate,
    /// The denial body's `Content-Type` (default `application/json`).
    pub content_type: HeaderValue,
}

impl Default for ResponseSettings {
    fn default() -> Self {
        ResponseSettings {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: HeaderStyle::Ietf,
            body: BodyTemplate::new(BodyTemplate::DEFAULT),
            content_type: HeaderValue::from_static("application/json"),
        }
    }
}

/// A denial body in which `{retry_after}` is replaced by the seconds to wait.
///
/// The bodies for the first [`BodyTemplate::PRERENDERED`] seconds are rendered once, when
/// the configuration is read: a denial then clones a shared buffer instead of formatting
/// and allocating a body, which keeps refusing cheap when refusing is all a server does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyTemplate {
    pieces: Vec<String>,
    prerendered: Vec<Bytes>,
}

impl BodyTemplate {
    /// The default body.
    pub const DEFAULT: &'static str = r#"{"error":"rate_limited","retry_after":{retry_after}}"#;
    const PLACEHOLDER: &'static str = "{retry_after}";
    /// Bodies for `retry_after` below this are rendered ahead.
    pub const PRERENDERED: u64 = 64;

    /// A template from text as configured.
    pub fn new(text: &str) -> BodyTemplate {
        let pieces: Vec<String> = text.split(Self::PLACEHOLDER).map(str::to_owned).collect();
        let prerendered = if pieces.len() == 1 {
            // No placeholder: one body serves every denial.
            vec![Bytes::from(text.to_owned())]
        } else {
            (0..Self::PRERENDERED)
                .map(|seconds| Bytes::from(join(&pieces, seconds)))
                .collect()
        };
        BodyTemplate {
            pieces,
            prerendered,
        }
    }

    /// The body for a denial with `retry_after` seconds to wait.
    pub fn render(&self, retry_after: u64) -> String {
        join(&self.pieces, retry_after)
    }

    /// The same body as [`render`](Self::render), shared rather than built when it was
    /// rendered ahead.
    ///
    /// ```
    /// use tollgate::response::BodyTemplate;
    ///
    /// let template = BodyTemplate::new("wait {retry_after}s");
    /// assert_eq!(template.bytes(3), "wait 3s");
    /// assert_eq!(template.bytes(86_400), "wait 86400s");
    /// ```
    pub fn bytes(&self, retry_after: u64) -> Bytes {
        let index = if self.prerendered.len() == 1 {
            Some(0)
        } else {
            usize::try_from(retry_after).ok()
        };
        match index.and_then(|index| self.prerendered.get(index)) {
            Some(body) => body.clone(),
            None => Bytes::from(self.render(retry_after)),
        }
    }
}

fn join(pieces: &[String], retry_after: u64) -> String {
    let mut number = itoa::Buffer::new();
    pieces.join(number.format(retry_after))
}

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
/// response when it is ready. Kept small (it rides in every response future): the legacy
/// trio, which most deployments never send, is boxed.
#[derive(Clone, Debug, Default)]
pub(crate) struct RateLimitHeaders {
    policy: Option<HeaderValue>,
    state: Option<HeaderValue>,
    legacy: Option<Box<[HeaderValue; 3]>>,
}

impl RateLimitHeaders {
    pub(crate) fn new(rule: &Rule, decision: &Decision, style: HeaderStyle) -> RateLimitHeaders {
        let mut headers = RateLimitHeaders::default();
        if style.ietf() {
            headers.policy = rule.policy(decision.quota()).cloned();
            headers.state = state_value(
                rule.policy_name(),
                decision.remaining(),
                decision.next_token_secs(),
            );
        }
        if style.legacy() {
            headers.legacy = Some(Box::new([
                HeaderValue::from(decision.limit()),
                HeaderValue::from(decision.remaining()),
                HeaderValue::from(decision.reset_secs()),
            ]));
        }
        headers
    }

    /// Adds the headers to `map`. The IETF fields are appended (they are lists, and an
    /// upstream's own policies stay visible); the legacy ones replace any upstream value.
    pub(crate) fn apply(self, map: &mut HeaderMap) {
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
    let retry_after = decision.retry_after_secs();
    let mut response = Response::new(settings.body.bytes(retry_after));
    *response.status_mut() = settings.status;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, retry_after_value(retry_after));
    headers.insert(CONTENT_TYPE, settings.content_type.clone());
    RateLimitHeaders::new(rule, decision, settings.headers).apply(headers);
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
