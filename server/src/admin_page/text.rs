//! Text for the operator's page: HTML escaping, query-string encoding, and reading the
//! JSON answers' values as the page's script does.

use serde_json::Value;

/// Text for HTML, in an element or a quoted attribute.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A query-string value.
pub(super) fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A JSON value as the page shows it: a string as is, null as nothing.
pub(super) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A JSON number (0 when it is none).
pub(super) fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(0.0)
}

/// "12 s ago", as the script writes it.
pub(super) fn ago(seconds: f64, now: f64) -> String {
    let delta = (now - seconds).max(0.0);
    if delta < 60.0 {
        format!("{} s ago", delta.round())
    } else if delta < 3600.0 {
        format!("{} min ago", (delta / 60.0).round())
    } else {
        format!("{} h ago", (delta / 3600.0).round())
    }
}

/// The elements of `value` if it is an array, else none.
pub(super) fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[][..], Vec::as_slice)
}

/// UNIX seconds as the page shows a time of day: `04:31:05 UTC`.
pub(super) fn time_of_day(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02} UTC",
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60
    )
}
