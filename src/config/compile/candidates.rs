//! A rule's `candidates` → a limit for each: the rule with its rate replaced.
//!
//! A candidate is what the rule would be with another rate: the same algorithm, `per`,
//! cost, strictness, calendar and shaping, its rate or rates in place of the rule's, each
//! burst its rate's count. It never refuses, holds no concurrency slot and counts no
//! `requests` quota: what it would have refused is the rate's doing alone.

use std::sync::Arc;

use toml::Spanned;

use super::super::error::Diagnostic;
use super::super::raw::{OneOrMany, RawRule};
use super::super::rule::Limit;
use super::super::source::SourceText;
use super::limit;

/// The most candidates one rule may carry: each costs every request one more bucket update.
pub(crate) const MAX_CANDIDATES: usize = 8;

/// The limits of `rule`'s candidates, each with its label (the rates as written, joined by
/// ", "); problems go to `diagnostics`.
pub(super) fn compile_candidates(
    source: &SourceText,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    base: &Limit,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(Arc<str>, Limit)> {
    let Some(list) = &rule.get_ref().candidates else {
        return Vec::new();
    };
    let has_rate = matches!(base, Limit::Limited { quotas, .. } if !quotas.is_empty());
    if !has_rate {
        diagnostics.push(source.at(
            list.span(),
            format!(
                "rule \"{}\" has no rate for candidates to stand beside (it is unlimited, or a concurrency cap alone)",
                key.get_ref()
            ),
        ));
        return Vec::new();
    }
    if list.get_ref().len() > MAX_CANDIDATES {
        diagnostics.push(source.at(
            list.span(),
            format!(
                "rule \"{}\" has {} candidates; at most {MAX_CANDIDATES} (each costs every request one more bucket update)",
                key.get_ref(),
                list.get_ref().len()
            ),
        ));
        return Vec::new();
    }
    let mut compiled: Vec<(Arc<str>, Limit)> = Vec::new();
    for candidate in list.get_ref() {
        let label = label(candidate.get_ref());
        if compiled.iter().any(|(seen, _)| **seen == *label) {
            diagnostics.push(source.at(
                candidate.span(),
                format!(
                    "candidate \"{label}\" of rule \"{}\" is listed twice",
                    key.get_ref()
                ),
            ));
            continue;
        }
        let raw = RawRule {
            rate: Some(candidate.clone()),
            burst: None,
            plans: None,
            candidates: None,
            suggest: None,
            concurrency: None,
            shadow: None,
            requests: None,
            also: None,
            ..rule.get_ref().clone()
        };
        let name = Spanned::new(
            key.span(),
            format!("{}\" candidate \"{label}", key.get_ref()),
        );
        let raw = Spanned::new(candidate.span(), raw);
        if let Some(limit) = limit::compile_limit(source, &name, &raw, diagnostics) {
            compiled.push((Arc::from(label.as_str()), limit));
        }
    }
    compiled
}

/// A candidate's name: its rates as written, trimmed, joined by ", ".
fn label(rates: &OneOrMany<String>) -> String {
    rates
        .0
        .iter()
        .map(|(rate, _)| rate.trim())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::compile_for_test as compile;

    #[test]
    fn candidates_take_the_rule_s_fields_and_their_own_rates() {
        let set = compile(
            "[limits.api]\nrate = \"100/min\"\nburst = 150\nstrict = true\ncost = 2\ncandidates = [\"20/min\", [\"50/min\", \"5/s\"]]\n",
        )
        .unwrap();
        let api = set.get("api").unwrap();
        let candidates: Vec<_> = set.candidates(api).collect();
        assert_eq!(candidates.len(), 2);
        let (label, first) = &candidates[0];
        assert_eq!(*label, "20/min");
        assert_eq!(
            first.quotas()[0].burst(),
            20,
            "a candidate's burst is its count"
        );
        assert_eq!(first.algorithm(), api.algorithm());
        assert!(first.is_strict(), "strict, as its rule");
        assert_eq!(first.cost(), 2);
        assert_ne!(first.id(), api.id(), "a candidate has buckets of its own");
        assert_eq!(candidates[1].0, "50/min, 5/s");
        assert_eq!(candidates[1].1.quotas().len(), 2);
        assert!(api.tracks_peaks(), "a rule with candidates measures peaks");
    }

    #[test]
    fn candidate_problems_are_reported_where_they_are_written() {
        let cases = [
            (
                "[limits.api]\nunlimited = true\ncandidates = [\"1/s\"]\n",
                "rule \"api\" is unlimited and cannot also set a rate",
            ),
            (
                "[limits.api]\nconcurrency = 5\ncandidates = [\"1/s\"]\n",
                "limits.toml:3:14: rule \"api\" has no rate for candidates to stand beside",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncandidates = [\"1/s\", \"1/s\"]\n",
                "limits.toml:3:22: candidate \"1/s\" of rule \"api\" is listed twice",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncandidates = [\"ten/s\"]\n",
                "limits.toml:3:15:",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncandidates = [\"1/s\",\"2/s\",\"3/s\",\"4/s\",\"5/s\",\"6/s\",\"7/s\",\"8/s\",\"9/s\"]\n",
                "has 9 candidates; at most 8",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\nper = \"global\"\nsuggest = true\n",
                "limits.toml:4:11: suggest measures each client's peak; rule \"api\" keeps one global bucket",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\nplans.pro = { rate = \"1/s\", candidates = [\"2/s\"] }\n",
                "plan \"pro\" of rule \"api\" sets candidates",
            ),
        ];
        for (text, expected) in cases {
            let error = compile(text).expect_err(text);
            assert!(
                error.contains(expected),
                "config {text:?}\n  gave {error}\n  expected {expected}"
            );
        }
    }
}
