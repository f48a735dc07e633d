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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyTemplate {
    pieces: Vec<String>,
}

impl BodyTemplate {
    /// The default body.
    pub const DEFAULT: &'static str = r#"{"error":"rate_limited","retry_after":{retry_after}}"#;
    const PLACEHOLDER: &'static str = "{retry_after}";

    /// A template from text as configured.
    pub fn new(text: &str) -> BodyTemplate {
        BodyTemplate {
            pieces: text.split(Self::PLACEHOLDER).map(str::to_owned).collect(),
        }
    }

    /// The body for a denial with `retry_after` seconds to wait.
    pub fn render(&self, retry_after: u64) -> String {
        let mut number = itoa::Buffer::new();
        let number = number.format(retry_after);
        self.pieces.join(number)
    }
}

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The rate-limit headers for one decision, computed when it was made and added to the
/// response when it is ready.
#[derive(Clone, Debug, Default)]
pub(crate) struct RateLimitHeaders {
    policy: Option<HeaderValue>,
    state: Option<HeaderValue>,
    legacy: Option<[HeaderValue; 3]>,
}

impl RateLimitHeaders {
    pub(crate) fn new(rule: &Rule, decision: &Decision, style: HeaderStyle) -> RateLimitHeaders {
        let mut headers = RateLimitHeaders::default();
        if style.ietf() {
            headers.policy = rule.policy(decision.quota()).cloned();
            let name = rule.policy_name();
            let mut text = String::with_capacity(name.len() + 32);
            text.push_str(name);
            text.push_str(";r=");
            text.push_str(itoa::Buffer::new().format(decision.remaining()));
            text.push_str(";t=");
            text.push_str(itoa::Buffer::new().format(decision.next_token_secs()));
            headers.state = HeaderValue::from_maybe_shared(Bytes::from(text)).ok();
        }
        if style.legacy() {
            headers.legacy = Some([
                HeaderValue::from(decision.limit()),
                HeaderValue::from(decision.remaining()),
                HeaderValue::from(decision.reset_secs()),
            ]);
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
        if let Some([limit, remaining, reset]) = self.legacy {
            map.insert(X_RATELIMIT_LIMIT, limit);
            map.insert(X_RATELIMIT_REMAINING, remaining);
            map.insert(X_RATELIMIT_RESET, reset);
        }
    }
}

/// The denial response for `decision` under `rule`, its body not yet wrapped.
pub(crate) fn rejection(
    rule: &Rule,
    decision: &Decision,
    settings: &ResponseSettings,
) -> Response<Bytes> {
    let retry_after = decision.retry_after_secs();
    let body = settings.body.render(retry_after);
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = settings.status;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
    headers.insert(CONTENT_TYPE, settings.content_type.clone());
    RateLimitHeaders::new(rule, decision, settings.headers).apply(headers);
    response
}
