//! What a reload changed: the rules it added, removed, and changed, each with what it
//! limited before and after (in [`Rule::summary`](super::Rule::summary)'s words).

use serde::Serialize;

use super::RuleSet;

/// One rule a reload added, removed or changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleChange {
    /// The rule's key (`login`, `api/search`; `/` for the root).
    pub rule: String,
    /// What it limited before; `None`: the reload added it.
    pub before: Option<String>,
    /// What it limits now; `None`: the reload removed it.
    pub after: Option<String>,
}

impl RuleSet {
    /// The rules added, removed or changed from `before` to this set, in this set's order
    /// (removed ones last, in `before`'s order).
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    ///
    /// let before = RuleSet::from_toml("[limits]\nlogin = \"5/min\"\nold = \"1/s\"\n")?;
    /// let after = RuleSet::from_toml("[limits]\nlogin = \"10/min\"\nnew = \"2/s\"\n")?;
    /// let changes = after.changes_since(&before);
    /// let said: Vec<String> = changes
    ///     .iter()
    ///     .map(|c| format!("{}: {:?} -> {:?}", c.rule, c.before.as_deref(), c.after.as_deref()))
    ///     .collect();
    /// assert_eq!(said, [
    ///     "login: Some(\"5/1m burst 5 · gcra · cost 1 · per client\") -> Some(\"10/1m burst 10 · gcra · cost 1 · per client\")",
    ///     "new: None -> Some(\"2/1s burst 2 · gcra · cost 1 · per client\")",
    ///     "old: Some(\"1/1s burst 1 · gcra · cost 1 · per client\") -> None",
    /// ]);
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn changes_since(&self, before: &RuleSet) -> Vec<RuleChange> {
        let mut changes = Vec::new();
        for rule in self.rules() {
            let after = rule.summary();
            match before.get(rule.key()) {
                Some(old) => {
                    let old = old.summary();
                    if old != after {
                        changes.push(RuleChange {
                            rule: rule.key().to_owned(),
                            before: Some(old),
                            after: Some(after),
                        });
                    }
                }
                None => changes.push(RuleChange {
                    rule: rule.key().to_owned(),
                    before: None,
                    after: Some(after),
                }),
            }
        }
        for old in before.rules() {
            if self.get(old.key()).is_none() {
                changes.push(RuleChange {
                    rule: old.key().to_owned(),
                    before: Some(old.summary()),
                    after: None,
                });
            }
        }
        changes
    }
}
