//! The `[response]` table: what a denial looks like. The responses themselves are
//! made in [`crate::response`], which re-exports these types.

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use super::super::error::Diagnostic;
use super::super::raw::{HeaderStyle, RawResponse};
use super::super::source::SourceText;

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

impl ResponseSettings {
    /// Applies one file's `[response]` table, reporting every bad value.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawResponse,
        out: &mut Vec<Diagnostic>,
    ) {
        if let Some(status) = &raw.status {
            match u16::try_from(*status.get_ref())
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
            {
                Some(code) if code.is_client_error() || code.is_server_error() => {
                    self.status = code
                }
                _ => out.push(source.at(
                    status.span(),
                    format!(
                        "status must be a 4xx or 5xx code, found {}",
                        status.get_ref()
                    ),
                )),
            }
        }
        if let Some(style) = raw.headers {
            self.headers = style;
        }
        if let Some(body) = &raw.body {
            self.body = BodyTemplate::new(body);
        }
        if let Some(content_type) = &raw.content_type {
            match HeaderValue::from_str(content_type.get_ref()) {
                Ok(value) => self.content_type = value,
                Err(_) => out.push(source.at(
                    content_type.span(),
                    format!(
                        "content_type \"{}\" is not a valid header value",
                        content_type.get_ref()
                    ),
                )),
            }
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
