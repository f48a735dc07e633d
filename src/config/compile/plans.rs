//! A rule's `plans` table → the rule's limit for each plan.
//!
//! A plan entry is the rule with some numbers changed: it may set `rate`, `burst`, `cost`
//! or `unlimited`, and everything else (the algorithm, `per`, strictness, shaping) is the
//! rule's. So every plan of a rule counts in one kind of bucket, the same bucket: a client
//! that changes plan keeps what it has spent (re-expressed in the new plan's numbers, as a
//! reload that changes a rule does).

use std::sync::Arc;

use toml::Spanned;

use super::super::error::Diagnostic;
use super::super::members::{MAX_PLAN_NAME, is_plan_name};
use super::super::raw::RawRule;
use super::super::rule::Limit;
use super::super::source::SourceText;
use super::limit;

/// The limits of `rule`'s plans, by plan name; problems go to `diagnostics`.
pub(super) fn compile_plans(
    source: &SourceText,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(Arc<str>, Limit)> {
    let Some(plans) = &rule.get_ref().plans else {
        return Vec::new();
    };
    let mut compiled = Vec::new();
    for (name, entry) in plans.get_ref() {
        if !is_plan_name(name.get_ref()) {
            diagnostics.push(source.at(
                name.span(),
                format!(
                    "plan name \"{}\" must be 1 to {MAX_PLAN_NAME} letters, digits, '-', '_' or '.'",
                    name.get_ref().escape_debug()
                ),
            ));
            continue;
        }
        let Some(merged) = merge(source, key, name, rule.get_ref(), entry, diagnostics) else {
            continue;
        };
        let label = Spanned::new(
            key.span(),
            format!("{}\" plan \"{}", key.get_ref(), name.get_ref()),
        );
        // A bare rate string has no span of its own: the plan's name stands in.
        let span = if entry.span().is_empty() {
            name.span()
        } else {
            entry.span()
        };
        let merged = Spanned::new(span, merged);
        if let Some(limit) = limit::compile_limit(source, &label, &merged, diagnostics) {
            compiled.push((Arc::from(name.get_ref().as_str()), limit));
        }
    }
    compiled
}

/// The rule as plan `name` has it: the plan's rate, burst, cost and `unlimited` over the
/// rule's other fields. `None` (with a diagnostic) when the plan sets a field of the rule's.
fn merge(
    source: &SourceText,
    key: &Spanned<String>,
    name: &Spanned<String>,
    base: &RawRule,
    entry: &Spanned<RawRule>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<RawRule> {
    let plan = entry.get_ref();
    let rule_fields = [
        ("per", plan.per.is_some()),
        ("strict", plan.strict.is_some()),
        ("shadow", plan.shadow.is_some()),
        ("algorithm", plan.algorithm.is_some()),
        ("count_status", plan.count_status.is_some()),
        ("on_limit", plan.on_limit.is_some()),
        ("max_delay", plan.max_delay.is_some()),
        ("delay_after", plan.delay_after.is_some()),
        ("warmup", plan.warmup.is_some()),
        ("concurrency", plan.concurrency.is_some()),
        ("plans", plan.plans.is_some()),
        ("calendar", plan.calendar.is_some()),
        ("resolution", plan.resolution.is_some()),
        ("requests", plan.requests.is_some()),
        ("candidates", plan.candidates.is_some()),
        ("suggest", plan.suggest.is_some()),
        ("also", plan.also.is_some()),
    ];
    let set: Vec<&str> = rule_fields
        .iter()
        .filter(|(_, set)| *set)
        .map(|(field, _)| *field)
        .collect();
    if !set.is_empty() {
        diagnostics.push(source.at(
            entry.span(),
            format!(
                "plan \"{}\" of rule \"{}\" sets {}: a plan sets only rate, burst, cost or unlimited, and takes the rest from its rule",
                name.get_ref(),
                key.get_ref(),
                set.join(", ")
            ),
        ));
        return None;
    }
    let mut merged = RawRule {
        plans: None,
        candidates: None,
        suggest: None,
        also: None,
        ..base.clone()
    };
    if plan.unlimited.as_ref().is_some_and(|u| *u.get_ref()) {
        if plan.rate.is_some() || plan.burst.is_some() || plan.cost.is_some() {
            diagnostics.push(source.at(
                entry.span(),
                format!(
                    "plan \"{}\" of rule \"{}\" is unlimited and cannot also set a rate",
                    name.get_ref(),
                    key.get_ref()
                ),
            ));
            return None;
        }
        return Some(RawRule {
            unlimited: plan.unlimited.clone(),
            ..RawRule::default()
        });
    }
    if plan.rate.is_some() {
        // A new rate brings its own burst (its count, unless the plan says).
        merged.rate = plan.rate.clone();
        merged.burst = plan.burst.clone();
        merged.unlimited = None;
    } else if plan.burst.is_some() {
        merged.burst = plan.burst.clone();
    }
    if plan.cost.is_some() {
        merged.cost = plan.cost.clone();
    }
    if plan.settle.is_some() {
        merged.settle = plan.settle.clone();
    }
    if merged.unlimited.as_ref().is_some_and(|u| *u.get_ref()) {
        // An unlimited rule whose plan gives no rate: unlimited for that plan too.
        return Some(RawRule {
            unlimited: merged.unlimited,
            ..RawRule::default()
        });
    }
    Some(merged)
}
