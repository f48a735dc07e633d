//! envoyproxy/ratelimit's YAML configuration, read as rules (feature `yaml`): so a user
//! moving from it points tollgate at the files they already have, beside or instead of
//! TOML, live-reloaded like any other source.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address              # value-less: each address its own bucket
//!     rate_limit: { unit: minute, requests_per_unit: 60 }
//!   - key: remote_address
//!     value: 10.0.0.1                  # value-specific: wins over the value-less one
//!     rate_limit: { unit: minute, requests_per_unit: 600 }
//!   - key: tenant
//!     value: acme
//!     descriptors:
//!       - key: path                    # nested: under tenant acme, each path
//!         rate_limit: { unit: second, requests_per_unit: 10 }
//!         shadow_mode: true
//! ```
//!
//! becomes the rules `"edge/remote_address" = { rate = "60/minute", algorithm =
//! "fixed-window" }`, `"edge/remote_address/10.0.0.1"` (600/minute) and
//! `"edge/tenant/acme/path"` (10/second, `shadow = true`): a descriptor's path of keys and
//! values is its rule key, each part one segment as the gRPC front end encodes it (a `/` or
//! `%` in a value is written `%252F`, `%2525` so it survives the key's one decoding).
//! Counting is ratelimit's: a fixed window per unit (`week`, `month` and `year` are 7, 30 and
//! 365 days). `unlimited: true` is an unlimited rule; `name`, `detailed_metric` and
//! `value_to_metric` (metrics naming) are accepted and ignored.
//!
//! Refused, with the line: nested descriptors under a value-less one (they match any value,
//! which a prefix cannot say), wildcard values (`"foo*"`), `replaces`,
//! `requests_per_unit: 0`, unknown fields, and two descriptors with the same path.

mod tree;

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::error::Diagnostic;
use super::raw::{OneOrMany, RawFile, RawRule};
use super::source::SourceText;
use crate::algorithm::Algorithm;
use crate::key::encode_segment;
use tree::{Kind, Node};

/// Descriptors nested deeper than this are refused (routes are shallower still).
const MAX_NESTING: usize = 32;

/// The rules `source` describes, or every problem with it.
pub(super) fn parse(source: &SourceText) -> Result<RawFile, Vec<Diagnostic>> {
    let Some(root) = tree::parse(source).map_err(|diagnostic| vec![diagnostic])? else {
        return Ok(RawFile::default());
    };
    let mut importer = Importer {
        source,
        diagnostics: Vec::new(),
        limits: BTreeMap::new(),
    };
    importer.file(&root);
    if importer.diagnostics.is_empty() {
        Ok(RawFile {
            limits: importer.limits,
            ..RawFile::default()
        })
    } else {
        Err(importer.diagnostics)
    }
}

/// A rule key's segment for `text`: encoded as the gRPC front end encodes it, then with
/// `%` escaped once more, since config keys are percent-decoded once.
fn segment(text: &str) -> String {
    encode_segment(text).replace('%', "%25")
}

struct Importer<'s> {
    source: &'s SourceText,
    diagnostics: Vec<Diagnostic>,
    limits: BTreeMap<Spanned<String>, Spanned<RawRule>>,
}

impl Importer<'_> {
    fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        self.diagnostics
            .push(self.source.at(span.clone(), message.into()));
    }

    fn file(&mut self, root: &Node) {
        let Some(fields) = self.fields(
            root,
            "an envoyproxy/ratelimit config",
            &["domain", "descriptors"],
        ) else {
            return;
        };
        let Some(domain) = fields
            .get("domain")
            .and_then(|node| self.text(node, "domain"))
        else {
            if !fields.contains_key("domain") {
                self.error(
                    &root.span,
                    "no `domain`: an envoyproxy/ratelimit config names its domain",
                );
            }
            return;
        };
        if domain.is_empty() {
            if let Some(node) = fields.get("domain") {
                self.error(&node.span, "domain is empty");
            }
            return;
        }
        if let Some(list) = fields.get("descriptors") {
            self.descriptors(list, &segment(&domain), 1);
        }
    }

    fn descriptors(&mut self, list: &Node, parent: &str, depth: usize) {
        match &list.kind {
            Kind::Sequence(items) => {
                for item in items {
                    self.descriptor(item, parent, depth);
                }
            }
            _ if is_null(list) => {}
            _ => self.error(
                &list.span,
                format!("descriptors is a list, found {}", list.describe()),
            ),
        }
    }

    fn descriptor(&mut self, node: &Node, parent: &str, depth: usize) {
        if depth > MAX_NESTING {
            self.error(
                &node.span,
                format!("descriptors nested deeper than {MAX_NESTING}"),
            );
            return;
        }
        let Some(fields) = self.fields(
            node,
            "a descriptor",
            &[
                "key",
                "value",
                "rate_limit",
                "descriptors",
                "shadow_mode",
                "detailed_metric",
                "value_to_metric",
            ],
        ) else {
            return;
        };
        let Some(key_node) = fields.get("key") else {
            self.error(&node.span, "a descriptor needs a `key`");
            return;
        };
        let Some(key) = self.text(key_node, "key") else {
            return;
        };
        if key.is_empty() {
            self.error(&key_node.span, "key is empty");
            return;
        }
        let value = match fields.get("value") {
            Some(node) if !is_null(node) => match self.text(node, "value") {
                Some(value) if value.ends_with('*') => {
                    self.error(
                        &node.span,
                        format!(
                            "value \"{value}\" is a wildcard; tollgate matches whole values (a \
                             value-less descriptor limits each value apart)"
                        ),
                    );
                    return;
                }
                Some(value) => Some(value),
                None => return,
            },
            _ => None,
        };
        let mut path = format!("{parent}/{}", segment(&key));
        if let Some(value) = &value {
            path.push('/');
            path.push_str(&segment(value));
        }
        let shadow = fields.get("shadow_mode").and_then(|node| {
            self.flag(node, "shadow_mode")
                .map(|on| (on, node.span.clone()))
        });
        for ignored in ["detailed_metric", "value_to_metric"] {
            if let Some(node) = fields.get(ignored) {
                self.flag(node, ignored);
            }
        }
        if let Some(limit) = fields.get("rate_limit").filter(|node| !is_null(node))
            && let Some(rule) = self.rule(limit, shadow)
        {
            self.insert(Spanned::new(key_node.span.clone(), path.clone()), rule);
        }
        if let Some(nested) = fields.get("descriptors").filter(|node| !is_null(node)) {
            if value.is_none() && matches!(&nested.kind, Kind::Sequence(items) if !items.is_empty())
            {
                self.error(
                    &nested.span,
                    format!(
                        "descriptors nested under the value-less \"{key}\" would apply under any of \
                         its values, which a prefix rule cannot say; give \"{key}\" a value, or \
                         write a rule per value"
                    ),
                );
                return;
            }
            self.descriptors(nested, &path, depth + 1);
        }
    }

    /// A `rate_limit` block as a rule.
    fn rule(
        &mut self,
        node: &Node,
        shadow: Option<(bool, Range<usize>)>,
    ) -> Option<Spanned<RawRule>> {
        let fields = self.fields(
            node,
            "rate_limit",
            &["unit", "requests_per_unit", "unlimited", "name", "replaces"],
        )?;
        if let Some(replaces) = fields.get("replaces") {
            self.error(
                &replaces.span,
                "replaces is not supported: in tollgate only the most specific rule applies",
            );
            return None;
        }
        if let Some(name) = fields.get("name") {
            self.text(name, "name")?;
        }
        let unlimited = match fields.get("unlimited") {
            Some(node) => self.flag(node, "unlimited")?,
            None => false,
        };
        if unlimited {
            return Some(Spanned::new(
                node.span.clone(),
                RawRule {
                    unlimited: Some(Spanned::new(node.span.clone(), true)),
                    ..RawRule::default()
                },
            ));
        }
        let (Some(unit_node), Some(count_node)) =
            (fields.get("unit"), fields.get("requests_per_unit"))
        else {
            self.error(
                &node.span,
                "rate_limit needs `unit` and `requests_per_unit` (or `unlimited: true`)",
            );
            return None;
        };
        let unit = self.text(unit_node, "unit")?;
        let Some(period) = period(&unit) else {
            self.error(
                &unit_node.span,
                format!(
                    "unit \"{unit}\" is not one of second, minute, hour, day, week, month, year"
                ),
            );
            return None;
        };
        let count = self.count(count_node)?;
        let rate = format!("{count}/{period}");
        let span = count_node.span.clone();
        Some(Spanned::new(
            node.span.clone(),
            RawRule {
                rate: Some(Spanned::new(
                    span.clone(),
                    OneOrMany(vec![(rate, Some(span))]),
                )),
                algorithm: Some(Spanned::new(unit_node.span.clone(), Algorithm::FixedWindow)),
                shadow: shadow
                    .filter(|(on, _)| *on)
                    .map(|(on, span)| Spanned::new(span, on)),
                ..RawRule::default()
            },
        ))
    }

    fn insert(&mut self, key: Spanned<String>, rule: Spanned<RawRule>) {
        if let Some((first, _)) = self.limits.get_key_value(key.get_ref().as_str()) {
            let line = self.source.at(first.span(), "").line;
            self.error(
                &key.span(),
                format!(
                    "this descriptor is \"{}\" again, as on line {line}",
                    key.get_ref()
                ),
            );
            return;
        }
        self.limits.insert(key, rule);
    }

    /// A mapping's fields by name, refusing names not in `known`.
    fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        known: &[&str],
    ) -> Option<BTreeMap<String, &'n Node>> {
        let Kind::Mapping(entries) = &node.kind else {
            self.error(
                &node.span,
                format!("{what} is a mapping, found {}", node.describe()),
            );
            return None;
        };
        let mut fields = BTreeMap::new();
        let mut ok = true;
        for (name, value) in entries {
            let Kind::Scalar(name_text, _) = &name.kind else {
                self.error(&name.span, format!("{what} has a key that is not text"));
                ok = false;
                continue;
            };
            if !known.contains(&name_text.as_str()) {
                self.error(
                    &name.span,
                    format!(
                        "unknown field `{name_text}` in {what}, expected one of {}",
                        known.join(", ")
                    ),
                );
                ok = false;
                continue;
            }
            if fields.insert(name_text.clone(), value).is_some() {
                self.error(
                    &name.span,
                    format!("`{name_text}` is given twice in {what}"),
                );
                ok = false;
            }
        }
        ok.then_some(fields)
    }

    fn text(&mut self, node: &Node, field: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(text, plain) if !(*plain && is_null(node)) => Some(text.clone()),
            Kind::Scalar(..) => Some(String::new()),
            _ => {
                self.error(
                    &node.span,
                    format!("{field} is text, found {}", node.describe()),
                );
                None
            }
        }
    }

    fn flag(&mut self, node: &Node, field: &str) -> Option<bool> {
        match &node.kind {
            Kind::Scalar(text, true) if text.eq_ignore_ascii_case("true") => Some(true),
            Kind::Scalar(text, true) if text.eq_ignore_ascii_case("false") => Some(false),
            _ => {
                self.error(&node.span, format!("{field} is true or false"));
                None
            }
        }
    }

    fn count(&mut self, node: &Node) -> Option<u32> {
        let parsed = match &node.kind {
            Kind::Scalar(text, true) => text.parse::<u32>().ok(),
            _ => None,
        };
        match parsed {
            Some(0) => {
                self.error(
                    &node.span,
                    "requests_per_unit: 0 (refuse everything) has no tollgate rule; refuse such \
                     requests before they reach the rate limiter",
                );
                None
            }
            Some(count) => Some(count),
            None => {
                self.error(
                    &node.span,
                    "requests_per_unit is a whole number from 1 to 4294967295",
                );
                None
            }
        }
    }
}

/// Whether `node` is YAML's null (`~`, `null`, or nothing).
fn is_null(node: &Node) -> bool {
    matches!(&node.kind, Kind::Scalar(text, true)
        if text.is_empty() || text == "~" || text.eq_ignore_ascii_case("null"))
}

/// A ratelimit unit as a tollgate period.
fn period(unit: &str) -> Option<&'static str> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "second" => "second",
        "minute" => "minute",
        "hour" => "hour",
        "day" => "day",
        "week" => "7d",
        "month" => "30d",
        "year" => "365d",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuleSet;

    fn compile(yaml: &str) -> Result<RuleSet, String> {
        RuleSet::compile(
            &[SourceText::new("ratelimit.yaml", yaml)],
            None,
            &Default::default(),
        )
        .map_err(|diagnostics| {
            diagnostics
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    const EXAMPLE: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 60
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unit: minute, requests_per_unit: 600 }
  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: /v1/users
        rate_limit: { unit: week, requests_per_unit: 7 }
        shadow_mode: true
      - key: plan
        rate_limit: { unlimited: true }
";

    const EQUIVALENT: &str = r#"
[limits]
"edge/remote_address" = { rate = "60/minute", algorithm = "fixed-window" }
"edge/remote_address/10.0.0.1" = { rate = "600/minute", algorithm = "fixed-window" }
"edge/tenant/acme/path/%252Fv1%252Fusers" = { rate = "7/7d", algorithm = "fixed-window", shadow = true }
"edge/tenant/acme/plan" = { unlimited = true }
"#;

    #[test]
    fn descriptors_become_the_rules_their_toml_equivalent_writes() {
        let yaml = compile(EXAMPLE).unwrap();
        let toml = RuleSet::from_toml(EQUIVALENT).unwrap();
        let summary = |rules: &RuleSet| {
            rules
                .rules()
                .iter()
                .map(|rule| (rule.key().to_owned(), rule.limit().clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(summary(&yaml), summary(&toml));
        assert_eq!(
            yaml.rules()[0].origin().line,
            3,
            "rules point at their descriptor's key"
        );
    }

    #[test]
    fn what_cannot_be_said_is_refused_with_its_line() {
        let table = [
            (
                "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: { unit: second, requests_per_unit: 1 }\n",
                "ratelimit.yaml:5:7: descriptors nested under the value-less \"k\"",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: ab*\n",
                "ratelimit.yaml:4:12: value \"ab*\" is a wildcard",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 0 }\n",
                "requests_per_unit: 0 (refuse everything)",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
                "unit \"fortnight\" is not one of",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {}\n",
                "ratelimit.yaml:4:5: unknown field `rate_limits` in a descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [{name: x}] }\n",
                "replaces is not supported",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 2 }\n",
                "ratelimit.yaml:5:10: this descriptor is \"d/k\" again, as on line 3",
            ),
            ("descriptors: []\n", "no `domain`"),
            (
                "- just a list\n",
                "an envoyproxy/ratelimit config is a mapping",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n",
                "shadow_mode is true or false",
            ),
        ];
        for (yaml, expected) in table {
            let error = compile(yaml).unwrap_err();
            assert!(error.contains(expected), "{yaml}\n→ {error}");
        }
    }

    #[test]
    fn values_with_slashes_match_what_the_grpc_front_end_sends() {
        let rules = compile(EXAMPLE).unwrap();
        let route = format!("edge/tenant/acme/path/{}", encode_segment("/v1/users"));
        let (route, last) = route.rsplit_once('/').unwrap();
        assert_eq!(
            rules.resolve(route, last).unwrap().key(),
            "edge/tenant/acme/path/%2Fv1%2Fusers"
        );
    }

    #[test]
    fn yaml_files_are_told_by_their_extension() {
        use super::super::source::is_yaml;
        use std::path::Path;
        assert!(is_yaml(Path::new("config/ratelimit.yaml")));
        assert!(is_yaml(Path::new("https://example.com/limits.YML")));
        assert!(!is_yaml(Path::new("config/gateway.toml")));
    }
}
