//! Reading what a response says it cost (`cost = { from = … }`): a header, a trailer, a
//! JSON body's field, the last server-sent event carrying it, or token usage — bounded,
//! and only looking at the frames on their way out. What is read is never changed.

use http::{HeaderMap, HeaderValue};

use super::usage::UsageSoFar;
use crate::config::{CostSource, Usage};
use crate::traffic::Fault;

/// The most of a JSON body kept to read its figure from.
pub(crate) const MAX_JSON_BODY: usize = 1 << 20;

/// The most of one server-sent event kept (its `data:` lines).
pub(crate) const MAX_EVENT: usize = 64 << 10;

/// What a response said it cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Figure {
    /// A count within the bound.
    Found(u64),
    /// Token usage (`from = "usage"`), to be weighed (or priced) by the rule, and the
    /// model the response named.
    Usage(Usage, Option<Box<str>>),
    /// Nothing said: the reservation stands, and that is no fault.
    Missing,
    /// Something said that cannot be believed: the reservation stands, counted as a fault.
    Bad(Fault),
}

/// A figure as text (a header's or trailer's value, or a JSON number's).
fn figure_of_text(text: &str, max: u64) -> Figure {
    let text = text.trim();
    if text.starts_with('-') {
        return Figure::Bad(Fault::Negative);
    }
    match text.parse::<u64>() {
        Ok(n) if n <= max => Figure::Found(n),
        Ok(_) => Figure::Bad(Fault::AboveMax),
        Err(_) if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() => {
            Figure::Bad(Fault::AboveMax)
        }
        Err(_) => Figure::Bad(Fault::NotANumber),
    }
}

/// A header's (or trailer's) figure.
pub(crate) fn figure_of_header(value: Option<&HeaderValue>, max: u64) -> Figure {
    match value.map(HeaderValue::to_str) {
        None => Figure::Missing,
        Some(Ok(text)) => figure_of_text(text, max),
        Some(Err(_)) => Figure::Bad(Fault::NotANumber),
    }
}

/// The figure at `pointer` in a JSON document.
fn figure_of_json(document: &serde_json::Value, pointer: &str, max: u64) -> Figure {
    match document.pointer(pointer) {
        None | Some(serde_json::Value::Null) => Figure::Missing,
        Some(serde_json::Value::Number(number)) => match (number.as_u64(), number.as_f64()) {
            (Some(n), _) if n <= max => Figure::Found(n),
            (Some(_), _) => Figure::Bad(Fault::AboveMax),
            (None, Some(x)) if x < 0.0 => Figure::Bad(Fault::Negative),
            _ => Figure::Bad(Fault::NotAWholeNumber),
        },
        Some(_) => Figure::Bad(Fault::NotANumber),
    }
}

/// Reads a body's figure as its frames go by: a trailer, a JSON body (buffered up to
/// [`MAX_JSON_BODY`]) or server-sent events (each event up to [`MAX_EVENT`]; the last one
/// carrying the field wins).
#[derive(Debug)]
pub(crate) struct BodyReader {
    source: CostSource,
    events: bool,
    max: u64,
    buffer: Vec<u8>,
    /// The body (or an event) outgrew its bound.
    overflowed: bool,
    /// How far `buffer` has been searched for the end of an event.
    scanned: usize,
    /// What the last complete event said (events only), or the trailer's figure.
    last: Figure,
    /// The JSON pointer's last key, unescaped (`usage` for usage): only events mentioning
    /// it are parsed.
    key: String,
    /// The usage read so far (`from = "usage"`), and the first fault reading it.
    usage: UsageSoFar,
    usage_fault: Option<Fault>,
}

impl BodyReader {
    /// A reader for `source` of a body of `content_type`; `None` for a header source
    /// (read at once from the response's head).
    pub(crate) fn new(
        source: &CostSource,
        content_type: Option<&HeaderValue>,
        max: u64,
    ) -> Option<BodyReader> {
        if matches!(source, CostSource::Header(_)) {
            return None;
        }
        let events = content_type.and_then(|v| v.to_str().ok()).is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        let key = match source {
            // The last name in the pointer: an array index is never written as text.
            CostSource::Json(pointer) => pointer
                .rsplit('/')
                .find(|segment| !is_array_index(segment))
                .unwrap_or_default()
                .replace("~1", "/")
                .replace("~0", "~"),
            CostSource::Usage => "usage".to_owned(),
            _ => String::new(),
        };
        Some(BodyReader {
            usage: UsageSoFar::default(),
            usage_fault: None,
            key,
            source: source.clone(),
            events,
            max,
            buffer: Vec::new(),
            overflowed: false,
            scanned: 0,
            last: Figure::Missing,
        })
    }

    pub(crate) fn data(&mut self, bytes: &[u8]) {
        if !matches!(self.source, CostSource::Json(_) | CostSource::Usage) {
            return;
        }
        if !self.events {
            if self.buffer.len() + bytes.len() > MAX_JSON_BODY {
                self.overflowed = true;
                self.buffer = Vec::new();
            } else if !self.overflowed {
                self.buffer.extend_from_slice(bytes);
            }
            return;
        }
        let mut bytes = bytes;
        if self.overflowed {
            // Skipping an event too large to keep: until the blank line that ends it.
            match blank_line(bytes, 0) {
                Some(end) => {
                    self.overflowed = false;
                    bytes = &bytes[end..];
                }
                None => return,
            }
        }
        self.buffer.extend_from_slice(bytes);
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(end) = blank_line(&self.buffer, from) {
            let event = &self.buffer[start..end];
            match &self.source {
                CostSource::Json(pointer) => {
                    if let Some(figure) = read_event(event, pointer, &self.key, self.max) {
                        self.last = figure;
                    }
                }
                _ => {
                    if let Some(Err(fault)) = event_json(event, &self.key)
                        .map(|document| document.and_then(|d| self.usage.read(&d)))
                    {
                        self.usage_fault.get_or_insert(fault);
                    }
                }
            }
            start = end;
            from = end;
        }
        self.buffer.drain(..start);
        // Where to look next time: the last bytes may begin a blank line.
        self.scanned = self.buffer.len().saturating_sub(3);
        if self.buffer.len() > MAX_EVENT {
            self.overflowed = true;
            self.buffer = Vec::new();
            self.scanned = 0;
        }
    }

    pub(crate) fn trailers(&mut self, trailers: &HeaderMap) {
        if let CostSource::Trailer(name) = &self.source {
            self.last = figure_of_header(trailers.get(name), self.max);
        }
    }

    /// The figure, the body having ended.
    pub(crate) fn finish(self) -> Figure {
        match &self.source {
            CostSource::Json(pointer) if !self.events => {
                if self.overflowed {
                    return Figure::Bad(Fault::BodyOverBound);
                }
                if self.buffer.is_empty() {
                    return Figure::Missing;
                }
                match serde_json::from_slice::<serde_json::Value>(&self.buffer) {
                    Ok(document) => figure_of_json(&document, pointer, self.max),
                    Err(_) => Figure::Bad(Fault::MalformedJson),
                }
            }
            CostSource::Usage if !self.events => {
                if self.overflowed {
                    return Figure::Bad(Fault::BodyOverBound);
                }
                if self.buffer.is_empty() {
                    return Figure::Missing;
                }
                let mut usage = self.usage.clone();
                match serde_json::from_slice::<serde_json::Value>(&self.buffer) {
                    Ok(document) => match usage.read(&document) {
                        Ok(()) => figure_of_usage(usage),
                        Err(fault) => Figure::Bad(fault),
                    },
                    Err(_) => Figure::Bad(Fault::MalformedJson),
                }
            }
            CostSource::Usage => match self.usage_fault {
                Some(fault) => Figure::Bad(fault),
                None => figure_of_usage(self.usage),
            },
            _ => self.last.clone(),
        }
    }
}

/// The figure of the usage read from a whole body or stream.
fn figure_of_usage(usage: UsageSoFar) -> Figure {
    let model = usage.model().map(Box::from);
    match usage.finish() {
        None => Figure::Missing,
        Some(Ok(usage)) => Figure::Usage(usage, model),
        Some(Err(fault)) => Figure::Bad(fault),
    }
}

/// What one complete event says: its `data:` lines, joined, read as JSON; `None` when it
/// says nothing of the field. Most events of a stream are content chunks: only one whose
/// text mentions the field's last `key` (`total_tokens` for `/usage/total_tokens`) is
/// assembled and parsed.
fn read_event(event: &[u8], pointer: &str, key: &str, max: u64) -> Option<Figure> {
    match event_json(event, key)? {
        Ok(document) => match figure_of_json(&document, pointer, max) {
            Figure::Missing => None,
            figure => Some(figure),
        },
        Err(fault) => Some(Figure::Bad(fault)),
    }
}

/// Whether a JSON pointer's segment is an array index (or `-`, past the end).
fn is_array_index(segment: &str) -> bool {
    segment == "-" || (!segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()))
}

/// One complete event's `data:` lines, joined and read as JSON: `None` when the event
/// has no data, is `[DONE]` or never mentions `key` (an event with a `\u` escape may spell
/// it escaped, so it is read). Data that is not UTF-8 is malformed, as such a body is.
fn event_json(event: &[u8], key: &str) -> Option<Result<serde_json::Value, Fault>> {
    let mentions = |needle: &[u8]| event.windows(needle.len()).any(|w| w == needle);
    if !key.is_empty() && !mentions(key.as_bytes()) && !mentions(b"\\u") {
        return None;
    }
    let mut data: Vec<u8> = Vec::new();
    let mut lines = 0;
    for line in event.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"data:") else {
            continue;
        };
        if lines > 0 {
            data.push(b'\n');
        }
        data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        lines += 1;
    }
    if lines == 0 || data.trim_ascii() == b"[DONE]" {
        return None;
    }
    Some(serde_json::from_slice(&data).map_err(|_| Fault::MalformedJson))
}

/// Where the first event in `bytes` (searched from `from`) ends: just past the blank line
/// (`\n\n` or `\r\n\r\n`) that ends it.
fn blank_line(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(offset) = bytes.get(at..)?.iter().position(|&b| b == b'\n') {
        let newline = at + offset;
        let next = &bytes[newline + 1..];
        if next.first() == Some(&b'\n') {
            return Some(newline + 2);
        }
        if next.starts_with(b"\r\n") {
            return Some(newline + 3);
        }
        at = newline + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(pointer: &str) -> CostSource {
        CostSource::Json(pointer.to_owned())
    }

    fn read(source: &CostSource, content_type: &str, chunks: &[&str]) -> Figure {
        let content_type = HeaderValue::from_str(content_type).unwrap();
        let mut reader = BodyReader::new(source, Some(&content_type), 1_000_000).unwrap();
        for chunk in chunks {
            reader.data(chunk.as_bytes());
        }
        reader.finish()
    }

    #[test]
    fn a_json_body_split_anywhere_gives_its_field() {
        let body = r#"{"id":"x","usage":{"prompt_tokens":10,"total_tokens":42}}"#;
        for cut in [1, 7, 20, body.len() - 1] {
            let (a, b) = body.split_at(cut);
            assert_eq!(
                read(&json("/usage/total_tokens"), "application/json", &[a, b]),
                Figure::Found(42)
            );
        }
        assert_eq!(
            read(&json("/usage/missing"), "application/json", &[body]),
            Figure::Missing
        );
    }

    /// Found by the `settle` fuzz target: events are only parsed when they mention the
    /// pointer's last name, which for `/counts/0` was the index `0`.
    #[test]
    fn events_are_read_for_pointers_ending_in_an_index_or_keys_written_escaped() {
        let stream = "data: {\"counts\":[7,8]}\n\n";
        assert_eq!(
            read(&json("/counts/0"), "text/event-stream", &[stream]),
            Figure::Found(7)
        );
        let escaped = "data: {\"usage\":{\"total\\u005ftokens\":9}}\n\n";
        assert_eq!(
            read(
                &json("/usage/total_tokens"),
                "text/event-stream",
                &[escaped]
            ),
            Figure::Found(9)
        );
        // Data that is not UTF-8 is malformed, as such a JSON body is, not skipped.
        let content_type = HeaderValue::from_static("text/event-stream");
        let mut reader = BodyReader::new(&json("/n"), Some(&content_type), 10).unwrap();
        reader.data(b"data: {\"n\":\"\xff\"}\n\n");
        assert_eq!(reader.finish(), Figure::Bad(Fault::MalformedJson));
    }

    #[test]
    fn the_last_event_that_carries_usage_wins() {
        let stream = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":{\"total_tokens\":5}}\n",
            "\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":57}}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(
            read(
                &json("/usage/total_tokens"),
                "text/event-stream; charset=utf-8",
                &stream
            ),
            Figure::Found(57)
        );
    }

    #[test]
    fn events_split_anywhere_and_oversized_ones_are_skipped() {
        let stream = "data: {\"usage\":{\"total_tokens\":3}}\r\n\r\ndata: {\"usage\":{\"total_tokens\":9}}\n\n";
        for cut in 1..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(
                read(&json("/usage/total_tokens"), "text/event-stream", &[a, b]),
                Figure::Found(9),
                "cut at {cut}"
            );
        }
        let huge = format!("data: {}\n\n", "x".repeat(MAX_EVENT + 10));
        let (first, second) = huge.split_at(MAX_EVENT / 2);
        assert_eq!(
            read(
                &json("/usage/total_tokens"),
                "text/event-stream",
                &[
                    "data: {\"usage\":{\"total_tokens\":4}}\n\n",
                    first,
                    second,
                    "data: {\"usage\":{\"total_tokens\":6}}\n\n"
                ]
            ),
            Figure::Found(6)
        );
    }

    #[test]
    fn bad_figures_keep_the_reservation_and_say_why() {
        let cases = [
            (
                r#"{"usage":{"total_tokens":-3}}"#,
                Figure::Bad(Fault::Negative),
            ),
            (
                r#"{"usage":{"total_tokens":"12"}}"#,
                Figure::Bad(Fault::NotANumber),
            ),
            (
                r#"{"usage":{"total_tokens":1.5}}"#,
                Figure::Bad(Fault::NotAWholeNumber),
            ),
            (
                r#"{"usage":{"total_tokens":99999999999}}"#,
                Figure::Bad(Fault::AboveMax),
            ),
            (
                r#"{"usage":{"total_tokens":4"#,
                Figure::Bad(Fault::MalformedJson),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(
                read(&json("/usage/total_tokens"), "application/json", &[body]),
                expected,
                "{body}"
            );
        }
        let huge = "x".repeat(MAX_JSON_BODY + 1);
        assert_eq!(
            read(&json("/usage/total_tokens"), "application/json", &[&huge]),
            Figure::Bad(Fault::BodyOverBound)
        );
        assert_eq!(
            figure_of_header(Some(&HeaderValue::from_static("12")), 10),
            Figure::Bad(Fault::AboveMax)
        );
        assert_eq!(
            figure_of_header(Some(&HeaderValue::from_static(" 7 ")), 10),
            Figure::Found(7)
        );
        assert_eq!(figure_of_header(None, 10), Figure::Missing);
    }

    #[test]
    fn usage_streams_split_anywhere_give_input_and_final_output() {
        let anthropic = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let expected = Figure::Usage(
            Usage {
                input: 25,
                cached: 100,
                output: 15,
            },
            None,
        );
        for cut in 1..anthropic.len() {
            let (a, b) = anthropic.split_at(cut);
            assert_eq!(
                read(&CostSource::Usage, "text/event-stream", &[a, b]),
                expected,
                "cut at {cut}"
            );
        }
        let cut_off = &anthropic[..anthropic.find("event: message_delta").unwrap()];
        assert_eq!(
            read(&CostSource::Usage, "text/event-stream", &[cut_off]),
            Figure::Bad(Fault::IncompleteUsage),
            "a stream cut off before its usage"
        );
        let gemini =
            r#"{"candidates":[],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5}}"#;
        assert_eq!(
            read(&CostSource::Usage, "application/json", &[gemini]),
            Figure::Usage(
                Usage {
                    input: 10,
                    cached: 0,
                    output: 5
                },
                None
            )
        );
        assert_eq!(
            read(&CostSource::Usage, "application/json", &["{\"error\":{}}"]),
            Figure::Missing
        );
    }

    #[test]
    fn trailers_are_read_when_they_come() {
        let source = CostSource::Trailer(http::HeaderName::from_static("x-usage"));
        let mut reader = BodyReader::new(&source, None, 100).unwrap();
        reader.data(b"streamed");
        let mut trailers = HeaderMap::new();
        trailers.insert("x-usage", HeaderValue::from_static("33"));
        reader.trailers(&trailers);
        assert_eq!(reader.finish(), Figure::Found(33));
    }
}
