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

/// A denial body in which `{retry_after}` is replaced by the seconds to wait and `{limit}`
/// by the name of the limit that refused (`api`, or `api#org` for an `also` limit),
/// escaped for a JSON string.
///
/// A template without `{limit}` has the bodies for the first [`BodyTemplate::PRERENDERED`]
/// seconds rendered once, when the configuration is read: a denial then clones a shared
/// buffer instead of formatting and allocating a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyTemplate {
    /// The text cut at its placeholders, once, when the configuration is read.
    segments: Vec<Segment>,
    prerendered: Vec<Bytes>,
    /// Whether the text names the refusing limit (rendered per denial, then).
    names_limit: bool,
}

/// A piece of a [`BodyTemplate`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Text(Box<str>),
    RetryAfter,
    Limit,
}

impl BodyTemplate {
    /// The default body.
    pub const DEFAULT: &'static str =
        r#"{"error":"rate_limited","retry_after":{retry_after},"limit":"{limit}"}"#;
    const PLACEHOLDER: &'static str = "{retry_after}";
    const LIMIT: &'static str = "{limit}";
    /// Bodies for `retry_after` below this are rendered ahead.
    pub const PRERENDERED: u64 = 64;

    /// A template from text as configured.
    pub fn new(text: &str) -> BodyTemplate {
        let segments = segments_of(text);
        let names_limit = segments.contains(&Segment::Limit);
        let mut template = BodyTemplate {
            segments,
            prerendered: Vec::new(),
            names_limit,
        };
        if !names_limit {
            template.prerendered = if template.segments.contains(&Segment::RetryAfter) {
                (0..Self::PRERENDERED)
                    .map(|seconds| Bytes::from(template.render_for(seconds, "")))
                    .collect()
            } else {
                // No placeholder: one body serves every denial.
                vec![Bytes::from(text.to_owned())]
            };
        }
        template
    }

    /// The body for a denial by the limit named `limit`, with `retry_after` seconds to wait.
    ///
    /// ```
    /// use tollgate::response::BodyTemplate;
    ///
    /// let template = BodyTemplate::new(BodyTemplate::DEFAULT);
    /// assert_eq!(
    ///     template.render_for(3, "api#org"),
    ///     r#"{"error":"rate_limited","retry_after":3,"limit":"api#org"}"#
    /// );
    /// ```
    pub fn render_for(&self, retry_after: u64, limit: &str) -> String {
        let texts: usize = self
            .segments
            .iter()
            .map(|segment| match segment {
                Segment::Text(text) => text.len(),
                Segment::RetryAfter | Segment::Limit => 0,
            })
            .sum();
        let mut body = String::with_capacity(texts + 20 + limit.len());
        let mut number = itoa::Buffer::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => body.push_str(text),
                Segment::RetryAfter => body.push_str(number.format(retry_after)),
                Segment::Limit => push_json_escaped(&mut body, limit),
            }
        }
        body
    }

    /// The body for a denial with `retry_after` seconds to wait, naming no limit.
    pub fn render(&self, retry_after: u64) -> String {
        self.render_for(retry_after, "")
    }

    /// The same body as [`render_for`](Self::render_for), shared rather than built when it
    /// was rendered ahead.
    ///
    /// ```
    /// use tollgate::response::BodyTemplate;
    ///
    /// let template = BodyTemplate::new("wait {retry_after}s");
    /// assert_eq!(template.bytes_for(3, "api"), "wait 3s");
    /// assert_eq!(template.bytes_for(86_400, "api"), "wait 86400s");
    /// ```
    pub fn bytes_for(&self, retry_after: u64, limit: &str) -> Bytes {
        let index = if self.prerendered.len() == 1 {
            Some(0)
        } else {
            usize::try_from(retry_after).ok()
        };
        match index.and_then(|index| self.prerendered.get(index)) {
            Some(body) => body.clone(),
            None => Bytes::from(self.render_for(retry_after, limit)),
        }
    }

    /// [`bytes_for`](Self::bytes_for) naming no limit.
    pub fn bytes(&self, retry_after: u64) -> Bytes {
        self.bytes_for(retry_after, "")
    }
}

/// `text` cut at its placeholders (`{retry_after}`, `{limit}`), in order.
fn segments_of(text: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let next = [
            (BodyTemplate::PLACEHOLDER, Segment::RetryAfter),
            (BodyTemplate::LIMIT, Segment::Limit),
        ]
        .into_iter()
        .filter_map(|(mark, segment)| rest.find(mark).map(|at| (at, mark, segment)))
        .min_by_key(|&(at, _, _)| at);
        let Some((at, mark, segment)) = next else {
            if !rest.is_empty() {
                segments.push(Segment::Text(rest.into()));
            }
            return segments;
        };
        if at > 0 {
            segments.push(Segment::Text(rest[..at].into()));
        }
        segments.push(segment);
        rest = &rest[at + mark.len()..];
    }
}

/// Appends `text` as the inside of a JSON string: as it is unless it holds a quote, a
/// backslash or a control character (a rule's name seldom does).
fn push_json_escaped(out: &mut String, text: &str) {
    if !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(text);
        return;
    }
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    out.push_str(
        quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default(),
    );
}

#[cfg(test)]
mod tests {
    use super::BodyTemplate;

    #[test]
    fn every_placeholder_is_filled_wherever_it_stands_and_the_rest_is_kept() {
        let template = BodyTemplate::new("{limit} refused; wait {retry_after}s ({limit}) {x}");
        assert_eq!(
            template.render_for(7, "api#org"),
            "api#org refused; wait 7s (api#org) {x}"
        );
        let template = BodyTemplate::new("{retry_after}{retry_after}");
        assert_eq!(template.render_for(12, "api"), "1212");
        assert_eq!(template.bytes_for(3, "api"), "33", "rendered ahead");
        assert_eq!(
            BodyTemplate::new("slow down").bytes_for(3, "api"),
            "slow down"
        );
        assert_eq!(BodyTemplate::new("").render_for(3, "api"), "");
        assert_eq!(BodyTemplate::new("{limit").render_for(3, "api"), "{limit");
    }

    #[test]
    fn a_limit_name_is_escaped_for_a_json_string() {
        let template = BodyTemplate::new(BodyTemplate::DEFAULT);
        assert_eq!(
            template.render_for(1, "a\"b\\c\n"),
            r#"{"error":"rate_limited","retry_after":1,"limit":"a\"b\\c\n"}"#
        );
        assert_eq!(
            template.render_for(0, "{retry_after}"),
            r#"{"error":"rate_limited","retry_after":0,"limit":"{retry_after}"}"#,
            "a name is never read as a placeholder"
        );
    }
}
