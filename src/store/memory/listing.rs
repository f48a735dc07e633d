//! The introspection listing of the in-memory store: every bucket, peeked under today's
//! rules, filtered, sorted and bounded as asked.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::MemoryStore;
use super::tables::SEEN_SHIFT;
use crate::algorithm::Algorithm;
use crate::clock::Timestamp;
use crate::config::{Limit, Rule, RuleId};
use crate::key::Client;
use crate::quota::Quota;
use crate::store::{
    BucketQuery, BucketRow, CALLER_DEFINED_PREFIX, CALLER_DEFINED_RULE, CheckMode, CheckRequest,
    TopRows,
};

impl MemoryStore {
    /// The buckets `query` asks for; what [`Inspection::buckets`](crate::store::Inspection::buckets) returns, synchronously.
    pub fn list(&self, query: &BucketQuery) -> Vec<BucketRow> {
        let now = query.now.as_unix_nanos();
        let rules: HashMap<RuleId, &Rule> = query
            .rules
            .rules()
            .iter()
            .chain(query.rules.also_limits())
            .map(|rule| (rule.id(), rule))
            .collect();
        let mut top = TopRows::new(query.sort, query.limit);
        let mut key = String::new();
        for shard in &self.shards {
            shard.0.lock().for_each(|entry| {
                key.clear();
                let client = entry.client.as_ref().unwrap_or(&Client::Unknown);
                let (name, kind, quotas, algorithm, warmup): (
                    &str,
                    String,
                    &[Quota],
                    Algorithm,
                    u64,
                ) = if entry.rule == RuleId::CALLER_DEFINED {
                    // Its numbers are in its state; the peek reads them from there.
                    let _ = write!(key, "{CALLER_DEFINED_PREFIX}{client}");
                    let kind = Algorithm::DiscreteRefill.to_string();
                    (CALLER_DEFINED_RULE, kind, &[], Algorithm::DiscreteRefill, 0)
                } else {
                    let Some(rule) = rules.get(&entry.rule) else {
                        return; // a rule being removed
                    };
                    let Limit::Limited {
                        quotas,
                        algorithm,
                        shaping,
                        ..
                    } = rule.limit()
                    else {
                        return;
                    };
                    rule.write_bucket_key(&mut key, client);
                    (
                        rule.name(),
                        rule.kind(),
                        quotas,
                        *algorithm,
                        shaping.warmup_nanos(),
                    )
                };
                if !key.starts_with(query.prefix.as_str()) {
                    return;
                }
                // A caller-defined bucket's numbers are in its state: it always fits.
                let fits = entry.rule == RuleId::CALLER_DEFINED
                    || entry.state.fits(algorithm, quotas, warmup);
                let mut state = if fits {
                    entry.state.clone()
                } else {
                    entry.state.carried_over(algorithm, quotas, warmup, now)
                };
                let peek = CheckRequest {
                    bucket: entry.bucket(),
                    quotas,
                    cost: 1,
                    now: query.now,
                    mode: CheckMode::Peek,
                    algorithm,
                    strict: false,
                    shaping: &crate::Shaping::NONE,
                };
                let decision = state.decide(&peek, now);
                let capacity = decision.limit().max(1);
                let fraction = decision.remaining() as f64 / capacity as f64;
                if query.max_fraction.is_some_and(|max| fraction > max) {
                    return;
                }
                top.offer(BucketRow {
                    key: key.clone(),
                    rule: name.to_owned(),
                    kind,
                    remaining: decision.remaining(),
                    capacity,
                    fraction,
                    last_seen: Timestamp::from_unix_nanos(u64::from(entry.last_seen) << SEEN_SHIFT),
                });
            });
        }
        top.finish()
    }
}
