//! The rule table as text, one line a rule: what `gateway --check` prints, like `nginx -t`.

use std::fmt::Write as _;

use tollgate::config::RuleSet;

/// The rule table as text, for `--check`: one line per rule.
///
/// ```
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[limits]\nlogin = { rate = \"5/min\", strict = true }\nhealthz = { unlimited = true }\n",
/// )?;
/// use tollgate_server::describe_rules;
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
///
/// // A rule's limits per plan, each on a line of its own under the rule.
/// let planned = tollgate::config::RuleSet::from_toml(
///     "[limits.api]\nrate = \"10/min\"\nplans = { pro = \"1000/min\", enterprise = { unlimited = true } }\n",
/// )?;
/// let table = describe_rules(&planned);
/// assert!(table.contains("  plan pro") && table.contains("1000/1m burst 1000"), "{table}");
/// assert!(table.contains("  plan enterprise") && table.contains("unlimited"), "{table}");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
pub fn describe_rules(rules: &RuleSet) -> String {
    let mut out = String::new();
    for rule in rules.rules() {
        let _ = writeln!(
            out,
            "{:<32} {:<48} {}",
            rule.name(),
            rule.summary(),
            rule.origin()
        );
        for plan in rule.plans() {
            if let Some(variant) = rules.plan_variant(rule, plan) {
                let _ = writeln!(
                    out,
                    "{:<32} {:<48}",
                    format!("  plan {plan}"),
                    variant.summary()
                );
            }
        }
    }
    out
}
