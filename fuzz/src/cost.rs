//! The response readers a reservation is settled with (`cost = { from = … }`): a JSON
//! body's field by pointer, server-sent events, and token usage in OpenAI's, Anthropic's
//! and Gemini's dialects. Upstreams write these bytes; so does anyone an upstream relays.

use http::HeaderValue;
use tollgate::config::CostSource;
use tollgate::fuzzing::{CostRead, MAX_USAGE_COUNT, read_cost};

/// The pointers the `settle` target reads: nested, escaped, an array index, the root.
const POINTERS: [&str; 4] = ["/usage/total_tokens", "/a~1b/0", "/count", ""];

/// The bounds a reader is given: none believed, one, a plausible one, anything.
const MAXES: [u64; 4] = [0, 1, 1_000, u64::MAX];

/// A body cut into pieces of `size` bytes, as frames arrive.
fn pieces(body: &[u8], size: usize) -> Vec<&[u8]> {
    body.chunks(size.max(1)).collect()
}

/// Reads `body` whole and in pieces of every size `sizes` gives; they must agree.
fn read_both_ways(
    source: &CostSource,
    events: bool,
    max: u64,
    body: &[u8],
    size: usize,
) -> CostRead {
    let content_type = HeaderValue::from_static(if events {
        "text/event-stream"
    } else {
        "application/json"
    });
    let whole = read_cost(source, Some(&content_type), max, &[body]).expect("a body source");
    let split = read_cost(source, Some(&content_type), max, &pieces(body, size));
    assert_eq!(
        Some(&whole),
        split.as_ref(),
        "{source} read whole and in {size}-byte pieces disagree (events: {events})"
    );
    whole
}

/// A body read as JSON and the same body sent as one server-sent event must say the same,
/// when the body is one line (an event's data cannot hold a line break).
fn json_agrees_with_one_event(source: &CostSource, max: u64, body: &[u8], json: &CostRead) {
    let one_line = !body.contains(&b'\n') && !body.contains(&b'\r');
    let trimmed = body.trim_ascii();
    if !one_line || trimmed.is_empty() || trimmed == b"[DONE]" {
        return;
    }
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(body);
    event.extend_from_slice(b"\n\n");
    let as_event = read_both_ways(source, true, max, &event, 7);
    // A body that does not parse is a fault; the same event is that fault too, or skipped
    // unread (events are parsed only when they mention the field).
    if json == &CostRead::Bad("malformed JSON") {
        assert!(
            matches!(
                as_event,
                CostRead::Missing | CostRead::Bad("malformed JSON")
            ),
            "{source}: a malformed body read as one event gave {as_event:?}"
        );
        return;
    }
    assert_eq!(
        &as_event, json,
        "{source}: the body as JSON and as one event disagree"
    );
}

/// `settle`: a JSON body's field by pointer, or the last server-sent event carrying it.
/// Never panics; read whole or frame by frame the figure is the same; a found figure is
/// never above the reader's bound; a one-line body says the same as JSON and as an event.
///
/// The first byte picks the pointer, the bound and the body's type; the second the frame
/// size; the rest is the body.
pub fn settle(data: &[u8]) {
    let [pick, size, body @ ..] = data else {
        return;
    };
    let pointer = POINTERS[usize::from(pick & 3)];
    let max = MAXES[usize::from((pick >> 2) & 3)];
    let events = pick & 0x10 != 0;
    let source = CostSource::Json(pointer.to_owned());
    let read = read_both_ways(&source, events, max, body, usize::from(*size));
    if let CostRead::Found(figure) = read {
        assert!(figure <= max, "{source}: {figure} is above the bound {max}");
    }
    assert!(
        !matches!(read, CostRead::Usage(..)),
        "{source} read token usage"
    );
    if !events {
        json_agrees_with_one_event(&source, max, body, &read);
    }
}

/// `usage`: token usage as OpenAI (Chat Completions, Responses), Anthropic and Gemini
/// report it, in a body or a stream. Never panics; read whole or frame by frame it is the
/// same; no count is above what two believed counts add up to (2^41); a one-line body
/// says the same as JSON and as an event.
///
/// The first byte picks the body's type; the second the frame size; the rest is the body.
pub fn usage(data: &[u8]) {
    let [pick, size, body @ ..] = data else {
        return;
    };
    let events = pick & 1 != 0;
    let read = read_both_ways(
        &CostSource::Usage,
        events,
        u64::MAX,
        body,
        usize::from(*size),
    );
    match &read {
        CostRead::Usage(usage, model) => {
            for (name, count) in [
                ("input", usage.input),
                ("cached", usage.cached),
                ("output", usage.output),
            ] {
                assert!(
                    count <= 2 * MAX_USAGE_COUNT,
                    "{name} {count} is above two believed counts"
                );
            }
            if let Some(model) = model {
                assert!(
                    model.len() <= body.len(),
                    "a model name longer than the body"
                );
            }
        }
        CostRead::Found(figure) => panic!("usage read as a bare figure {figure}"),
        CostRead::Missing | CostRead::Bad(_) => {}
    }
    if !events {
        json_agrees_with_one_event(&CostSource::Usage, u64::MAX, body, &read);
    }
}
