//! What a request's own bytes make: its JSON body read for `json:` key parts, the model and
//! estimates; and `[key] parts` taken from its headers, cookies, query string and host.
//! Every client writes these.

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use serde_json::Value;
use tollgate::key::{KeyParts, MAX_PART, RequestJson, RouteSettings, normalize_route};

/// The pointers the `request_body` target asks for: a field, nested, escaped, an index.
const POINTERS: [&str; 5] = ["/team", "/user/id", "/a~1b", "/n/0", "/model"];

/// What a pointer's value must be, read independently: a string as it is, a boolean or a
/// whole number as written; `None` for the rest. `Err` for a fractional number, whose text
/// the two readers may write differently.
fn expected_value(document: &Value, pointer: &str) -> Result<Option<String>, ()> {
    Ok(match document.pointer(pointer) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Bool(flag)) => Some(flag.to_string()),
        Some(Value::Number(number)) => match (number.as_u64(), number.as_i64()) {
            (Some(n), _) => Some(n.to_string()),
            (None, Some(n)) => Some(n.to_string()),
            _ => return Err(()),
        },
        _ => None,
    })
}

/// `request_body`: a request's JSON body, read once without a document. Never panics; read
/// whole or in pieces it says the same; a body serde_json reads is read, and each value
/// asked for is the one at its pointer.
///
/// The first byte is the piece size; the rest is the body.
pub fn request_body(data: &[u8]) {
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let pointers: Vec<String> = POINTERS.iter().map(|p| (*p).to_owned()).collect();
    let whole = RequestJson::read(body, &pointers);
    let pieces: Vec<Bytes> = body
        .chunks(usize::from(size).max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    assert_eq!(
        whole,
        RequestJson::read_chunks(&pieces, &pointers),
        "read whole and in {size}-byte pieces disagree"
    );
    assert_eq!(whole.prompt_tokens(), whole.prompt_bytes().div_ceil(4));
    assert!(
        whole.prompt_bytes() <= body.len() as u64,
        "more prompt than body"
    );

    let Ok(document) = serde_json::from_slice::<Value>(body) else {
        // Not JSON at all (not merely a number a document cannot hold, `1e400`): the
        // walk, on the same parser, must refuse it too.
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
            assert!(whole.problem().is_some(), "accepted what is not JSON");
        }
        return;
    };
    assert_eq!(whole.problem(), None, "refused JSON serde_json reads");
    for pointer in POINTERS {
        if let Ok(expected) = expected_value(&document, pointer) {
            let expected = if pointer == "/model" {
                document
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            } else {
                expected
            };
            assert_eq!(
                whole.value(pointer),
                expected.as_deref(),
                "the value at {pointer} is not the document's"
            );
        }
    }
}

/// The parts the `key_parts` target makes keys of: every kind a request's bytes feed.
const PARTS: &str =
    "host, header:x-tenant, cookie:session, method, route, query:org, json:/team, client";

/// The request for [`key_parts`]: the first line is the target (path and query), each
/// later line a header whose first byte picks its name; a `json` line is the body read.
fn request_of(data: &[u8]) -> Option<Request<()>> {
    const NAMES: [&str; 5] = ["host", "x-tenant", "cookie", "x-other", "json"];
    let mut lines = data.split(|&b| b == b'\n');
    let target = std::str::from_utf8(lines.next()?).ok()?;
    let mut request = Request::builder()
        .method(if target.len() % 2 == 0 { "GET" } else { "POST" })
        .uri(target)
        .body(())
        .ok()?;
    for line in lines {
        let Some((&pick, value)) = line.split_first() else {
            continue;
        };
        match NAMES[usize::from(pick) % NAMES.len()] {
            "json" => {
                let json = RequestJson::read(value, &["/team".to_owned()]);
                request.extensions_mut().insert(json);
            }
            name => {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    request
                        .headers_mut()
                        .append(HeaderName::from_static(name), value);
                }
            }
        }
    }
    Some(request)
}

/// `key_parts`: `[key] parts` from headers, cookies, the query string, the host and a JSON
/// body. Never panics; every part is one segment (not empty, no `/`, not `.` or `..`,
/// bounded); and the key they make, taken apart, gives back each part and the route.
///
/// The first byte of the input picks case folding; the rest is the request.
pub fn key_parts(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(request) = request_of(rest) else {
        return;
    };
    let parts: KeyParts = PARTS.parse().expect("the target's parts parse");
    let mut settings = RouteSettings::default();
    settings.case_insensitive = pick & 1 == 1;
    let route = normalize_route(request.uri().path(), &settings);
    let values = parts.values(&request);
    for (part, value) in &values {
        assert!(
            !matches!(value.as_str(), "" | "." | "..") && !value.contains('/'),
            "{part} gave {value:?}, not one segment"
        );
        assert!(
            value.len() <= 3 * MAX_PART,
            "{part} gave {} bytes, more than {MAX_PART} encoded",
            value.len()
        );
    }
    let key = parts.match_path(&request, Cow::Borrowed(&*route), settings.case_insensitive);
    let (split, route_back) = parts
        .split(&key)
        .unwrap_or_else(|| panic!("key {key:?} does not split into its parts"));
    assert_eq!(split.len(), values.len(), "{key:?}");
    for ((part, value), (part_back, value_back)) in values.iter().zip(&split) {
        assert_eq!(part, part_back);
        let value = if settings.case_insensitive {
            value.to_ascii_lowercase()
        } else {
            value.clone()
        };
        assert_eq!(
            &value, value_back,
            "{part} does not come back out of {key:?}"
        );
    }
    let route = if settings.case_insensitive {
        route.to_ascii_lowercase()
    } else {
        route.to_string()
    };
    assert_eq!(
        route, route_back,
        "the route does not come back out of {key:?}"
    );
}
