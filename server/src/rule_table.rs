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
///
/// // `also` limits, each on a line of its own under the rule that carries it.
/// let stacked = tollgate::config::RuleSet::from_toml(
///     "[limits.\"/\"]\nrate = \"100/min\"\nalso.everyone = { rate = \"2000/s\", per = \"global\" }\n\
///      also.org = { rate = \"10000/h\", per = \"header:x-org\", headers = false }\n",
/// )?;
/// let table = describe_rules(&stacked);
/// assert!(table.contains("  also everyone") && table.contains("2000/1s burst 2000"), "{table}");
/// assert!(table.contains("  also org") && table.contains("per header:x-org · not in headers"), "{table}");
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
        // The rule's own `also` limits (an ancestor's are listed under it).
        for also in rules.also_limits().filter(|also| also.key() == rule.key()) {
            let Some(entry) = also.also() else { continue };
            let mut summary = also.summary();
            if let tollgate::config::AlsoBy::Part(part) = entry.by() {
                summary = summary.replace("per client", &format!("per {part}"));
            }
            if !entry.in_headers() {
                summary.push_str(" · not in headers");
            }
            let _ = writeln!(
                out,
                "{:<32} {:<48}",
                format!("  also {}", entry.name()),
                summary
            );
        }
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
