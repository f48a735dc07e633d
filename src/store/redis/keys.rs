//! Bucket names in Redis.
//!
//! A bucket of a per-client rule is `PREFIX{RULE/CLIENT}c`; a rule's global bucket is
//! `PREFIX{RULE}g`. The braces are Redis Cluster's hash tag: a decision touches one key,
//! and the tag spreads buckets across slots by client rather than piling a hot rule onto
//! one node. The last byte says which kind of bucket it is, so `{api/search}g` (the global
//! bucket of rule `api/search`) and `{api/search}c` (client `search` of rule `api`) never
//! meet. Client segments never contain `/`, so the last `/` splits rule from client.
//!
//! Rules are named by their keys, not by this process's rule ids, so every instance with
//! the same configuration finds the same buckets. A rule's candidate limit is named by the
//! rule's key and its label after `#` (`{api#20:min/CLIENT}c`): no request path holds a `#`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::store::{BucketRef, RuleId, StoreRules};

/// The rule keys of the current rule set and the one before it, by id: a request resolved
/// against the previous set can still be in flight when the next one is configured.
#[derive(Debug, Default)]
pub(super) struct RuleKeys(HashMap<RuleId, Arc<str>>);

impl RuleKeys {
    /// The keys of `rules`, keeping those of `previous` that `rules` does not reuse.
    pub(super) fn next(rules: &StoreRules, previous: &RuleKeys, current: &[RuleId]) -> RuleKeys {
        let mut keys: HashMap<RuleId, Arc<str>> = rules
            .rules()
            .iter()
            .map(|rule| (rule.id, Arc::clone(&rule.key)))
            .collect();
        for id in current {
            if let Some(key) = previous.0.get(id) {
                keys.entry(*id).or_insert_with(|| Arc::clone(key));
            }
        }
        RuleKeys(keys)
    }

    /// Every rule id of `rules`: what the next generation keeps the keys of, one reload longer.
    pub(super) fn ids(rules: &StoreRules) -> Vec<RuleId> {
        rules.rules().iter().map(|rule| rule.id).collect()
    }

    /// The Redis key of `bucket`, or `None` for a rule this store has not been told of.
    pub(super) fn bucket_key(&self, prefix: &str, bucket: BucketRef<'_>) -> Option<String> {
        let rule = self.0.get(&bucket.rule)?;
        let mut key = String::with_capacity(prefix.len() + rule.len() + 24);
        key.push_str(prefix);
        key.push('{');
        key.push_str(rule);
        match bucket.client {
            Some(client) => {
                let _ = write!(key, "/{client}}}c");
            }
            None => key.push_str("}g"),
        }
        Some(key)
    }
}

/// A bucket named by [`RuleKeys::bucket_key`], read back: its rule key and client segment
/// (`None` for a global bucket).
pub(super) fn parse_bucket_key<'k>(
    prefix: &str,
    key: &'k str,
) -> Option<(&'k str, Option<&'k str>)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    if let Some(rule) = rest.strip_suffix("}g") {
        return Some((rule, None));
    }
    let inside = rest.strip_suffix("}c")?;
    let (rule, client) = inside.rsplit_once('/')?;
    Some((rule, Some(client)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Client;

    #[test]
    fn global_and_client_buckets_never_share_a_name_and_read_back() {
        let rules = crate::Limits::from_toml(
            "[limits]\n\"/\" = \"1/s\"\napi = \"1/s\"\n\"api/search\" = { rate = \"1/s\", per = \"global\" }\n",
        )
        .unwrap()
        .rules()
        .clone();
        let keys = RuleKeys::next(&StoreRules::new(&rules), &RuleKeys::default(), &[]);
        let id = |key: &str| rules.get(key).unwrap().id();
        let name = |rule, client| keys.bucket_key("t:", BucketRef { rule, client }).unwrap();
        let client = Client::from_segment("search");
        let as_client = name(id("api"), Some(&client));
        let global = name(id("api/search"), None);
        assert_eq!(as_client, "t:{api/search}c");
        assert_eq!(global, "t:{api/search}g");
        assert_eq!(
            parse_bucket_key("t:", &as_client),
            Some(("api", Some("search")))
        );
        assert_eq!(parse_bucket_key("t:", &global), Some(("api/search", None)));

        let ip = Client::from_segment("2001:db8::");
        let root_key = name(id(""), Some(&ip));
        assert_eq!(
            parse_bucket_key("t:", &root_key),
            Some(("", Some("2001:db8::")))
        );
        assert_eq!(parse_bucket_key("t:", "other:{x}c"), None);
        assert_eq!(parse_bucket_key("t:", "t:{nonsense"), None);
    }

    #[test]
    fn a_candidate_s_buckets_are_named_apart_from_its_rule_s() {
        let rules = crate::config::RuleSet::from_toml(
            "[limits.api]\nrate = \"100/min\"\ncandidates = [\"3/min\", [\"5/min\", \"1/s\"]]\n",
        )
        .unwrap();
        let keys = RuleKeys::next(&StoreRules::new(&rules), &RuleKeys::default(), &[]);
        let api = rules.get("api").unwrap();
        let client = Client::from_segment("me");
        let name = |rule| {
            keys.bucket_key(
                "t:",
                BucketRef {
                    rule,
                    client: Some(&client),
                },
            )
            .unwrap()
        };
        let names: Vec<String> = rules.candidates(api).map(|(_, c)| name(c.id())).collect();
        assert_eq!(name(api.id()), "t:{api/me}c");
        assert_eq!(names, ["t:{api#3:min/me}c", "t:{api#5:min, 1:s/me}c"]);
        assert_eq!(RuleKeys::ids(&StoreRules::new(&rules)).len(), 3);
    }
}
