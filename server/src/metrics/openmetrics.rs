//! `/metrics` in OpenMetrics (`Accept: application/openmetrics-text`): the same families and
//! samples as the Prometheus text, named as OpenMetrics names counters (the family without
//! `_total`), ended by `# EOF`, with exemplars — trace ids — on the decision-latency
//! histogram's buckets.

use std::fmt::Write as _;

use super::exemplars::{self, Exemplar};
use super::exposition::{Family, FamilyKind, Sample};

/// The content type of an OpenMetrics page.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics (as Prometheus's scrapes do first).
pub fn wanted(accept: &str) -> bool {
    accept.split(',').any(|choice| {
        let mut parts = choice.split(';');
        let kind = parts.next().unwrap_or("").trim();
        let refused = parts.any(|parameter| {
            parameter
                .trim()
                .strip_prefix("q=")
                .is_some_and(|q| q.trim().parse::<f64>().is_ok_and(|q| q <= 0.0))
        });
        kind.eq_ignore_ascii_case("application/openmetrics-text") && !refused
    })
}

/// The Prometheus rendering `text`, as OpenMetrics with the decision histogram's exemplars.
pub fn render(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for family in super::exposition::families(text) {
        write_family(&mut out, &family);
    }
    out.push_str("# EOF\n");
    out
}

fn write_family(out: &mut String, family: &Family) {
    let (name, kind) = match family.kind {
        FamilyKind::Counter => match family.name.strip_suffix("_total") {
            Some(base) => (base, "counter"),
            None => (family.name.as_str(), "unknown"),
        },
        FamilyKind::Gauge => (family.name.as_str(), "gauge"),
        FamilyKind::Histogram => (family.name.as_str(), "histogram"),
        FamilyKind::Other => (family.name.as_str(), "unknown"),
    };
    let _ = writeln!(out, "# TYPE {name} {kind}");
    if family.kind == FamilyKind::Histogram && name.ends_with("_seconds") {
        let _ = writeln!(out, "# UNIT {name} seconds");
    }
    if !family.help.is_empty() {
        let _ = writeln!(out, "# HELP {name} {}", escape(&family.help));
    }
    let exemplary = family.name == "tollgate_decision_seconds";
    for sample in &family.samples {
        write_sample(out, sample);
        if exemplary
            && sample.name.ends_with("_bucket")
            && let Some(exemplar) = sample
                .label("le")
                .and_then(bound)
                .and_then(exemplars::latest)
        {
            write_exemplar(out, &exemplar);
        }
        out.push('\n');
    }
}

fn write_sample(out: &mut String, sample: &Sample) {
    out.push_str(&sample.name);
    if !sample.labels.is_empty() {
        out.push('{');
        for (index, (key, value)) in sample.labels.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            let _ = write!(out, "{key}=\"{}\"", escape(value));
        }
        out.push('}');
    }
    out.push(' ');
    write_number(out, sample.value);
}

fn write_exemplar(out: &mut String, exemplar: &Exemplar) {
    let _ = write!(
        out,
        " # {{trace_id=\"{}\",span_id=\"{}\"}} ",
        hex(&exemplar.ids.trace_id),
        hex(&exemplar.ids.span_id)
    );
    write_number(out, exemplar.value);
    if let Ok(since) = exemplar.at.duration_since(std::time::UNIX_EPOCH) {
        let _ = write!(out, " {}.{:03}", since.as_secs(), since.subsec_millis());
    }
}

fn write_number(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{value}");
    }
}

/// A bucket's `le`, as a number.
fn bound(le: &str) -> Option<f64> {
    match le {
        "+Inf" => Some(f64::INFINITY),
        other => other.parse().ok(),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// `text` escaped as OpenMetrics escapes help and label values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_asked_for_as_prometheus_asks() {
        assert!(wanted(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wanted("text/plain; version=0.0.4"));
        assert!(!wanted("*/*"));
        assert!(!wanted("application/openmetrics-text; q=0"));
    }

    #[test]
    fn counters_are_named_as_openmetrics_names_them_and_the_page_ends_in_eof() {
        let text = "# HELP tollgate_requests_total Requests \"decided\".\n# TYPE tollgate_requests_total counter\ntollgate_requests_total{rule=\"a\\\"b\",outcome=\"allowed\"} 3\n\n# TYPE tollgate_in_flight gauge\ntollgate_in_flight 1.5\n";
        let page = render(text);
        assert_eq!(
            page,
            "# TYPE tollgate_requests counter\n# HELP tollgate_requests Requests \\\"decided\\\".\ntollgate_requests_total{rule=\"a\\\"b\",outcome=\"allowed\"} 3\n# TYPE tollgate_in_flight gauge\ntollgate_in_flight 1.5\n# EOF\n"
        );
    }
}
