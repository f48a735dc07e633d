//! The introspection listing of the in-memory store: every bucket, peeked under today's
//! rules, filtered, sorted and bounded as asked.

use std::collections::HashMap;

use super::MemoryStore;
use super::tables::SEEN_SHIFT;
use crate::clock::Timestamp;
use crate::config::{Limit, Rule, RuleId};
use crate::key::Client;
use crate::store::{BucketQuery, BucketRow, CheckMode, CheckRequest, TopRows};

impl MemoryStore {
    /// The buckets `query` asks for; what [`Store::buckets`](crate::store::Store::buckets) returns, synchronously.
    pub fn list(&self, query: &BucketQuery) -> Vec<BucketRow> {
        let now = query.now.as_unix_nanos();
        let rules: HashMap<RuleId, &Rule> = query
            .rules
            .rules()
            .iter()
            .map(|rule| (rule.id(), rule))
            .collect();
        let mut top = TopRows::new(query.sort, query.limit);
        let mut key = String::new();
        for shard in &self.shards {
            shard.0.lock().for_each(|entry| {
                let Some(rule) = rules.get(&entry.rule) else {
                    return; // a rule being removed
                };
                let Limit::Limited {
                    quotas, algorithm, ..
                } = rule.limit()
                else {
                    return;
                };
                key.clear();
                rule.write_bucket_key(&mut key, entry.client.as_ref().unwrap_or(&Client::Unknown));
                if !key.starts_with(query.prefix.as_str()) {
                    return;
                }
                let mut state = if entry.state.fits(*algorithm, quotas) {
                    entry.state.clone()
                } else {
                    entry.state.carried_over(*algorithm, quotas, now)
                };
                let peek = CheckRequest {
                    bucket: entry.bucket(),
                    quotas,
                    cost: 1,
                    now: query.now,
                    mode: CheckMode::Peek,
                    algorithm: *algorithm,
                    strict: false,
                };
                let decision = state.decide(&peek, now);
                let capacity = decision.limit().max(1);
                let fraction = decision.remaining() as f64 / capacity as f64;
                if query.max_fraction.is_some_and(|max| fraction > max) {
                    return;
                }
                top.offer(BucketRow {
                    key: key.clone(),
                    rule: rule.name().to_owned(),
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
