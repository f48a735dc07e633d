//! The Prometheus text the recorder renders, read back into families and samples: what
//! OpenMetrics (`/metrics` with exemplars) and the OTLP metric export are made from, so
//! both show exactly the catalogue `/metrics` shows.
//!
//! Only this process's own rendering is read (metrics-exporter-prometheus's text format:
//! `# HELP`, `# TYPE`, then `name{label="value",…} number` lines), never input from
//! outside; a line it cannot read is skipped, not fatal.

/// What kind of family `# TYPE` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FamilyKind {
    Counter,
    Gauge,
    Histogram,
    /// Anything else (`summary`, `untyped`): passed on as found, never exported over OTLP.
    Other,
}

/// One metric family: its name, help, kind and samples, in the order rendered.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Family {
    pub(crate) name: String,
    /// The help text, unescaped.
    pub(crate) help: String,
    pub(crate) kind: FamilyKind,
    pub(crate) samples: Vec<Sample>,
}

/// One sample line: the full sample name (`x_bucket`, `x_sum`, `x_total`…), its labels
/// (unescaped) and value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The families of a rendering, in its order.
pub(crate) fn families(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            family(&mut families, name).help = unescape(help, false);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            family(&mut families, name).kind = match kind.trim() {
                "counter" => FamilyKind::Counter,
                "gauge" => FamilyKind::Gauge,
                "histogram" => FamilyKind::Histogram,
                _ => FamilyKind::Other,
            };
        } else if !line.trim().is_empty()
            && !line.starts_with('#')
            && let Some(sample) = sample(line)
        {
            let owner = families
                .iter()
                .rposition(|family| belongs(&sample.name, family))
                .unwrap_or_else(|| {
                    families.push(Family {
                        name: sample.name.clone(),
                        help: String::new(),
                        kind: FamilyKind::Other,
                        samples: Vec::new(),
                    });
                    families.len() - 1
                });
            families[owner].samples.push(sample);
        }
    }
    families
}

/// The family `name`, added if new.
fn family<'a>(families: &'a mut Vec<Family>, name: &str) -> &'a mut Family {
    let index = match families.iter().position(|family| family.name == name) {
        Some(index) => index,
        None => {
            families.push(Family {
                name: name.to_owned(),
                help: String::new(),
                kind: FamilyKind::Other,
                samples: Vec::new(),
            });
            families.len() - 1
        }
    };
    &mut families[index]
}

/// Whether a sample named `name` is one of `family`'s.
fn belongs(name: &str, family: &Family) -> bool {
    match name.strip_prefix(family.name.as_str()) {
        Some("") => true,
        Some(suffix) => {
            family.kind == FamilyKind::Histogram && matches!(suffix, "_bucket" | "_sum" | "_count")
        }
        None => false,
    }
}

/// One sample line, or `None` if it cannot be read.
fn sample(line: &str) -> Option<Sample> {
    let (name_and_labels, value) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            (
                (&line[..open], labels(line.get(open + 1..close)?)?),
                line.get(close + 1..)?,
            )
        }
        None => {
            let (name, value) = line.split_once(' ')?;
            ((name, Vec::new()), value)
        }
    };
    let value = value.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name: name_and_labels.0.trim().to_owned(),
        labels: name_and_labels.1,
        value,
    })
}

/// `key="value",…` (values escaped), or `None` if malformed.
fn labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        // The value runs to the first quote not escaped.
        let mut end = None;
        let mut escaped = false;
        for (index, c) in after.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(index);
                    break;
                }
                _ => {}
            }
        }
        let end = end?;
        labels.push((
            key.trim().trim_start_matches(',').trim().to_owned(),
            unescape(&after[..end], true),
        ));
        rest = after[end + 1..]
            .trim_start()
            .trim_start_matches(',')
            .trim_start();
    }
    Some(labels)
}

/// `text` with `\\`, `\n` (and, in label values, `\"`) unescaped.
fn unescape(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('"') if quotes => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP tollgate_requests_total Requests decided, by \"rule\" and outcome.
# TYPE tollgate_requests_total counter
tollgate_requests_total{rule=\"api\",outcome=\"allowed\"} 3
tollgate_requests_total{rule=\"we\\\"ird\\\\,x\",outcome=\"limited\"} 1

# HELP tollgate_decision_seconds Time to decide.
# TYPE tollgate_decision_seconds histogram
tollgate_decision_seconds_bucket{le=\"0.000001\"} 2
tollgate_decision_seconds_bucket{le=\"+Inf\"} 5
tollgate_decision_seconds_sum 0.0004
tollgate_decision_seconds_count 5

# TYPE tollgate_in_flight gauge
tollgate_in_flight 7
";

    #[test]
    fn a_rendering_reads_back_into_its_families_with_labels_unescaped() {
        let families = families(TEXT);
        let names: Vec<&str> = families.iter().map(|family| family.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "tollgate_requests_total",
                "tollgate_decision_seconds",
                "tollgate_in_flight"
            ]
        );
        let requests = &families[0];
        assert_eq!(requests.kind, FamilyKind::Counter);
        assert_eq!(requests.help, "Requests decided, by \"rule\" and outcome.");
        assert_eq!(requests.samples[1].label("rule"), Some("we\"ird\\,x"));
        assert_eq!(requests.samples[1].label("outcome"), Some("limited"));
        assert_eq!(requests.samples[1].value, 1.0);
        let histogram = &families[1];
        assert_eq!(histogram.kind, FamilyKind::Histogram);
        assert_eq!(histogram.samples.len(), 4);
        assert_eq!(histogram.samples[1].value, 5.0);
        assert_eq!(histogram.samples[1].label("le"), Some("+Inf"));
        assert_eq!(families[2].samples[0].value, 7.0);
    }

    #[test]
    fn lines_that_cannot_be_read_are_skipped() {
        let families = families("# TYPE x counter\nx{a=\"unterminated} 1\nx 2\nx{} nope\n");
        assert_eq!(families[0].samples.len(), 1);
        assert_eq!(families[0].samples[0].value, 2.0);
    }
}
