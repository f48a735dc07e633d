//! A rule described in a few words: what `gateway --check` prints and the reload history
//! compares.

use std::fmt::Write as _;

use super::Rule;
use crate::algorithm::Algorithm;
use crate::config::raw::Per;

/// Describing a rule.
impl Rule {
    /// What the rule limits, in a few words: what `gateway --check` prints and the reload
    /// history compares.
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml("[limits]\nlogin = { rate = \"5/min\", strict = true }\n")?;
    /// let login = rules.get("login").unwrap();
    /// assert_eq!(login.summary(), "5/1m burst 5 · gcra · cost 1 · per client · strict");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn summary(&self) -> String {
        let rule = self;
        let Some(algorithm) = rule.algorithm() else {
            return "unlimited".to_owned();
        };
        let money = rule.settle().and_then(|settle| settle.money);
        let quotas: Vec<String> = match (money, algorithm) {
            (Some(money), _) => rule
                .quotas()
                .iter()
                .map(|q| {
                    let rate = q.rate().to_string();
                    let period = rate.split_once('/').map_or("", |(_, p)| p);
                    format!("{}/{period}", money.amount(u64::from(q.rate().count())))
                })
                .collect(),
            (None, Algorithm::Gcra) => rule.quotas().iter().map(ToString::to_string).collect(),
            (None, _) => rule.quotas().iter().map(|q| q.rate().to_string()).collect(),
        };
        let per = match rule.per() {
            Some(Per::Global) => "global",
            _ => "per client",
        };
        let mut line = if quotas.is_empty() {
            format!("no rate · {per}")
        } else {
            match rule.settle() {
                Some(settle) => {
                    let reserved = match (settle.estimate, money) {
                        (Some(cap), Some(money)) => {
                            format!("estimated (at most {})", money.amount(cap))
                        }
                        (Some(cap), None) => format!("estimated (at most {cap})"),
                        (None, Some(money)) => money.amount(rule.cost()),
                        (None, None) => rule.cost().to_string(),
                    };
                    format!(
                        "{} · {algorithm} · {reserved} reserved, settled from {}{} · {per}",
                        quotas.join(" + "),
                        settle.from,
                        if money.is_some() { ", priced" } else { "" },
                    )
                }
                None => format!(
                    "{} · {algorithm} · cost {} · {per}",
                    quotas.join(" + "),
                    rule.cost()
                ),
            }
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
}
