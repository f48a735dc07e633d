//! [`StoreRules`]: what a store is told of a rule set — its `[store]` table and, by id, each
//! rule that keeps buckets: the key naming its buckets outside this process, and its limit.
//! Stores never see the [`RuleSet`] itself (resolution, plans, identity are not theirs).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Limit, Per, RuleId, RuleSet, StoreSettings};

/// A rule set as stores see it ([`Housekeeping::configure`](super::Housekeeping::configure),
/// [`Snapshots`](super::Snapshots)).
///
/// ```
/// use tollgate::config::RuleSet;
/// use tollgate::store::StoreRules;
///
/// let rules = RuleSet::from_toml("[limits]\n\"api\" = { rate = \"10/s\", also = { org = { rate = \"100/s\", per = \"header:x-org\" } } }\n")?;
/// let seen = StoreRules::new(&rules);
/// let keys: Vec<&str> = seen.rules().iter().map(|rule| &*rule.key).collect();
/// assert_eq!(keys, ["api", "api#org"]);
/// assert!(seen.by_key("api#org").is_some_and(|rule| !rule.global()));
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct StoreRules {
    settings: StoreSettings,
    rules: Vec<StoredRule>,
    by_key: HashMap<Arc<str>, usize>,
}

/// One rule that keeps buckets, as stores see it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoredRule {
    /// The id its buckets are decided under ([`BucketRef::rule`](super::BucketRef::rule)).
    pub id: RuleId,
    /// What names its buckets outside this process, the same on every instance with the
    /// same configuration: the rule's key (`api`), an `also` limit's `api#org`, a
    /// candidate's `api#20:min`.
    pub key: Arc<str>,
    /// Its limit: what its buckets mean.
    pub limit: Limit,
    /// Whether it is a candidate limit (decided beside its rule, never enforced).
    pub candidate: bool,
}

impl StoredRule {
    /// Whether it keeps one bucket for all clients.
    pub fn global(&self) -> bool {
        matches!(
            self.limit,
            Limit::Limited {
                per: Per::Global,
                ..
            }
        )
    }
}

impl StoreRules {
    /// What stores are told of `rules`: the rules, their `also` limits and candidates, each
    /// once (a plan's variant shares its rule's buckets).
    pub fn new(rules: &RuleSet) -> StoreRules {
        let stored: Vec<StoredRule> = rules
            .bucket_rules()
            .map(|rule| StoredRule {
                id: rule.id(),
                key: Arc::from(rule.store_key()),
                limit: rule.limit().clone(),
                candidate: rule.candidate().is_some(),
            })
            .collect();
        let mut by_key = HashMap::with_capacity(stored.len());
        for (index, rule) in stored.iter().enumerate() {
            by_key.entry(Arc::clone(&rule.key)).or_insert(index);
        }
        StoreRules {
            settings: rules.store().clone(),
            rules: stored,
            by_key,
        }
    }

    /// The `[store]` table.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// Every rule that keeps buckets.
    pub fn rules(&self) -> &[StoredRule] {
        &self.rules
    }

    /// The rule whose buckets `key` names, if the set has it.
    pub fn by_key(&self, key: &str) -> Option<&StoredRule> {
        self.by_key
            .get(key)
            .and_then(|&index| self.rules.get(index))
    }
}
