//! The rule table as text, one line a rule: what `gateway --check` prints, like `nginx -t`.

use std::fmt::Write as _;

use crate::algorithm::Algorithm;
use crate::config::{Per, Rule, RuleSet};

/// The rule table as text, for `--check`: one line per rule.
///
/// ```
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[limits]\nlogin = { rate = \"5/min\", strict = true }\nhealthz = { unlimited = true }\n",
/// )?;
/// use tollgate::gateway::describe_rules;
/// let table = describe_rules(&rules);
/// assert!(table.contains("login") && table.contains("5/1m burst 5 · gcra · cost 1 · per client · strict"));
/// assert!(table.contains("healthz") && table.contains("unlimited"));
///
/// let shaped = tollgate::config::RuleSet::from_toml(
///     "[limits]\nup = { rate = \"5/s\", on_limit = \"delay\", max_delay = \"2s\", delay_after = 2 }\n",
/// )?;
/// assert!(describe_rules(&shaped).contains("5/1s burst 5 · gcra · cost 1 · per client · delay ≤ 2s after 2"));
///
/// let capped = tollgate::config::RuleSet::from_toml("[limits]\nup = { concurrency = 3 }\n")?;
/// assert!(describe_rules(&capped).contains("no rate · per client · at most 3 in flight"));
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
pub fn describe_rules(rules: &RuleSet) -> String {
    let mut out = String::new();
    for rule in rules.rules() {
        let _ = writeln!(
            out,
            "{:<32} {:<48} {}",
            rule.name(),
            describe(rule),
            rule.origin()
        );
    }
    out
}

/// What one rule limits, in a few words.
fn describe(rule: &Rule) -> String {
    let Some(algorithm) = rule.algorithm() else {
        return "unlimited".to_owned();
    };
    let quotas: Vec<String> = match algorithm {
        Algorithm::Gcra => rule.quotas().iter().map(ToString::to_string).collect(),
        _ => rule.quotas().iter().map(|q| q.rate().to_string()).collect(),
    };
    let per = match rule.per() {
        Some(Per::Global) => "global",
        _ => "per client",
    };
    let mut line = if quotas.is_empty() {
        format!("no rate · {per}")
    } else {
        format!(
            "{} · {algorithm} · cost {} · {per}",
            quotas.join(" + "),
            rule.cost()
        )
    };
    match rule.concurrency() {
        Some(crate::Concurrency::Fixed(n)) => {
            let _ = write!(line, " · at most {n} in flight");
        }
        Some(crate::Concurrency::Adaptive(a)) => {
            let _ = write!(line, " · adaptive concurrency {}..{}", a.min, a.max);
        }
        None => {}
    }
    if rule.is_strict() {
        line.push_str(" · strict");
    }
    if let Some(shaping) = rule.shaping() {
        if let Some(delay) = shaping.delay() {
            let _ = write!(line, " · delay ≤ {:?}", delay.max());
            if let Some(after) = delay.after() {
                let _ = write!(line, " after {after}");
            }
        }
        if let Some(warmup) = shaping.warmup() {
            let _ = write!(line, " · warm-up {warmup:?}");
        }
    }
    if rule.is_shadow() {
        line.push_str(" · shadow");
    }
    if let Some(statuses) = rule.count_status() {
        let _ = write!(line, " · counts {statuses}");
    }
    line
}
