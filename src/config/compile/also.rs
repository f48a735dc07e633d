//! A rule's `[limits."KEY".also]` → a limit for each entry, and the stacks: which `also`
//! limits a request resolved to each rule meets.
//!
//! An entry takes what a rule's limit takes — `rate` (one or several), `burst`,
//! `algorithm`, `calendar`, `resolution`, `cost` (a number, or a reservation settled from
//! the response) — plus `per` (client, global or a key part) and `headers`. Shaping and
//! concurrency belong to the rule a request resolves to and are refused here, with that
//! reason.

use std::sync::Arc;

use toml::Spanned;

use super::super::also::{AlsoBy, AlsoLimit, MAX_ALSO, valid_name};
use super::super::error::Diagnostic;
use super::super::raw::{Per, RawAlso, RawCost, RawRule};
use super::super::rule::{Limit, Rule};
use super::super::source::SourceText;
use super::limit;

/// The limits of `rule`'s `also` entries, each with what makes it one; problems go to
/// `diagnostics`.
pub(super) fn compile_also(
    source: &SourceText,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    candidates: &[Arc<str>],
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(AlsoLimit, Limit)> {
    let Some(table) = &rule.get_ref().also else {
        return Vec::new();
    };
    if table.get_ref().len() > MAX_ALSO {
        diagnostics.push(source.at(
            table.span(),
            format!(
                "rule \"{}\" has {} also limits; at most {MAX_ALSO} (each costs every request under it one more bucket update)",
                key.get_ref(),
                table.get_ref().len()
            ),
        ));
        return Vec::new();
    }
    let mut compiled = Vec::new();
    for (name, entry) in table.get_ref() {
        let text = name.get_ref().trim();
        if !valid_name(text) {
            diagnostics.push(source.at(
                name.span(),
                format!(
                    "also limit \"{}\" of rule \"{}\" needs a name of letters, digits, `_` and `-` (at most 64)",
                    name.get_ref(),
                    key.get_ref()
                ),
            ));
            continue;
        }
        if candidates.iter().any(|label| **label == *text) {
            diagnostics.push(source.at(
                name.span(),
                format!(
                    "also limit \"{text}\" of rule \"{}\" has the name of one of its candidates",
                    key.get_ref()
                ),
            ));
            continue;
        }
        if let Some(compiled_entry) = compile_entry(source, key, text, entry, diagnostics) {
            compiled.push(compiled_entry);
        }
    }
    compiled
}

/// One entry named `name` of the rule at `key`.
fn compile_entry(
    source: &SourceText,
    key: &Spanned<String>,
    name: &str,
    entry: &Spanned<RawAlso>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(AlsoLimit, Limit)> {
    let raw = entry.get_ref();
    let before = diagnostics.len();
    for (field, value) in [
        ("on_limit", &raw.on_limit),
        ("max_delay", &raw.max_delay),
        ("delay_after", &raw.delay_after),
        ("warmup", &raw.warmup),
        ("concurrency", &raw.concurrency),
    ] {
        if let Some(value) = value {
            diagnostics.push(source.at(
                value.span(),
                format!(
                    "also limit \"{name}\" of rule \"{}\" cannot take {field}: shaping and concurrency belong to the rule a request resolves to",
                    key.get_ref()
                ),
            ));
        }
    }
    let by = match &raw.per {
        None => AlsoBy::Client,
        Some(per) => match per.get_ref().parse::<AlsoBy>() {
            Ok(by) => by,
            Err(reason) => {
                diagnostics.push(source.at(per.span(), reason));
                return None;
            }
        },
    };
    if raw.rate.is_none() {
        diagnostics.push(source.at(
            entry.span(),
            format!(
                "also limit \"{name}\" of rule \"{}\" needs a rate such as \"2000/s\"",
                key.get_ref()
            ),
        ));
        return None;
    }
    if diagnostics.len() > before {
        return None;
    }
    let as_rule = RawRule {
        rate: raw.rate.clone(),
        burst: raw.burst.clone(),
        cost: raw.cost.as_ref().map(RawCost::taken_at_admission),
        settle: raw.cost.as_ref().and_then(|cost| match cost.get_ref() {
            RawCost::Settled(settle) => Some(Spanned::new(cost.span(), settle.clone())),
            RawCost::Fixed(_) => None,
        }),
        per: Some(match by {
            AlsoBy::Global => Per::Global,
            AlsoBy::Client | AlsoBy::Part(_) => Per::Client,
        }),
        algorithm: raw.algorithm.clone(),
        calendar: raw.calendar.clone(),
        resolution: raw.resolution.clone(),
        ..RawRule::default()
    };
    let label = Spanned::new(
        key.span(),
        format!("{}\" also limit \"{name}", key.get_ref()),
    );
    let limit = limit::compile_limit(
        source,
        &label,
        &Spanned::new(entry.span(), as_rule),
        diagnostics,
    )?;
    let headers = raw.headers.as_ref().is_none_or(|shown| *shown.get_ref());
    Some((AlsoLimit::new(Arc::from(name), by, headers), limit))
}

/// Gives each rule a key can resolve to (the first `resolvable` of `rules`, sorted by key)
/// and each of their plan variants the `also` limits a request resolved to it meets: the
/// own entries of every rule whose key is a segment prefix of its key, root first.
pub(super) fn assign_stacks(rules: &mut [Rule], resolvable: usize) {
    let mut stacks: Vec<Arc<[usize]>> = Vec::with_capacity(resolvable);
    for rule in &rules[..resolvable] {
        let mut stack = Vec::new();
        for prefix in segment_prefixes(rule.key()) {
            if let Ok(at) = rules[..resolvable].binary_search_by(|r| r.key().cmp(prefix)) {
                stack.extend_from_slice(rules[at].own_also());
            }
        }
        stacks.push(Arc::from(stack));
    }
    for (index, stack) in stacks.iter().enumerate() {
        if stack.is_empty() {
            continue;
        }
        // An unlimited rule (or plan) meets no limit at all: health checks stay exempt.
        let plan_variants: Vec<usize> = rules[index].plan_variant_indices().collect();
        if !rules[index].is_unlimited() {
            rules[index].set_stack(Arc::clone(stack));
        }
        for variant in plan_variants {
            if let Some(variant) = rules.get_mut(variant).filter(|v| !v.is_unlimited()) {
                variant.set_stack(Arc::clone(stack));
            }
        }
    }
}

/// `key`'s segment prefixes, shortest first: `""`, `api`, `api/search` for `api/search`.
fn segment_prefixes(key: &str) -> impl Iterator<Item = &str> {
    std::iter::once("").chain(
        key.match_indices('/')
            .map(move |(at, _)| &key[..at])
            .chain((!key.is_empty()).then_some(key)),
    )
}

#[cfg(test)]
mod tests {
    use super::super::compile_for_test as compile;
    use super::segment_prefixes;
    use crate::config::AlsoBy;

    #[test]
    fn prefixes_are_segments_root_first() {
        assert_eq!(
            segment_prefixes("api/search/x").collect::<Vec<_>>(),
            ["", "api", "api/search", "api/search/x"]
        );
        assert_eq!(segment_prefixes("").collect::<Vec<_>>(), [""]);
    }

    #[test]
    fn a_request_meets_the_also_limits_of_every_rule_above_its_own() {
        let set = compile(
            "[limits.\"/\"]\nrate = \"100/min\"\n[limits.\"/\".also]\neveryone = { rate = \"2000/s\", per = \"global\" }\n\
             [limits.api]\nrate = \"50/min\"\nalso.org = { rate = \"10000/h\", per = \"header:x-org\", headers = false }\n\
             [limits.\"api/search\"]\nrate = \"10/s\"\n[limits.apiv2]\nrate = \"1/s\"\n",
        )
        .unwrap();
        let names = |key: &str| -> Vec<String> {
            let rule = set.get(key).unwrap();
            set.stack(rule).map(|r| r.name().to_owned()).collect()
        };
        assert_eq!(names("api/search"), ["/#everyone", "api#org"]);
        assert_eq!(names("api"), ["/#everyone", "api#org"]);
        assert_eq!(names("apiv2"), ["/#everyone"], "segments, not characters");
        assert_eq!(names(""), ["/#everyone"]);
        let org = set.stack(set.get("api").unwrap()).nth(1).unwrap();
        assert_eq!(
            org.also().unwrap().by(),
            &AlsoBy::Part("header:x-org".parse().unwrap())
        );
        assert!(!org.also().unwrap().in_headers());
        assert_eq!(org.quotas()[0].burst(), 10_000);
        assert_eq!(
            org.bucket_key(&crate::key::Client::from_segment("acme")),
            "api#org/acme"
        );
    }

    #[test]
    fn a_rule_may_carry_also_limits_without_a_rate_of_its_own() {
        let set = compile("[limits.\"/\".also]\neveryone = { rate = \"5/s\", per = \"global\" }\n")
            .unwrap();
        let root = set.get("").unwrap();
        assert!(root.quotas().is_empty());
        assert_eq!(set.stack(root).count(), 1);
    }

    #[test]
    fn bad_entries_are_refused_where_they_are_written() {
        for (text, expected) in [
            (
                "[limits.api.also]\norg = { rate = \"1/s\", per = \"header\" }\n",
                "must be \"client\", \"global\" or a key part",
            ),
            (
                "[limits.api.also]\norg = { rate = \"ten\" }\n",
                "limits.toml:2:",
            ),
            (
                "[limits.api.also]\n\"\" = { rate = \"1/s\" }\n",
                "needs a name",
            ),
            ("[limits.api.also]\norg = \"1/s\"\n", "invalid type"),
            (
                "[limits.api.also]\norg = { per = \"global\" }\n",
                "needs a rate",
            ),
            (
                "[limits.api.also]\norg = { rate = \"1/s\", on_limit = \"delay\" }\n",
                "cannot take on_limit",
            ),
            (
                "[limits.api.also]\norg = { rate = \"1/s\", concurrency = 3 }\n",
                "cannot take concurrency",
            ),
            (
                "[limits.api.also]\norg = { rate = \"1/s\", per = \"route\" }\n",
                "per = \"route\"",
            ),
            (
                "[limits.api.also]\norg = { rate = \"1/s\", bogus = 1 }\n",
                "unknown field `bogus`",
            ),
        ] {
            let error = compile(text).unwrap_err();
            assert!(error.contains(expected), "{text}\n{error}");
        }
    }
}
