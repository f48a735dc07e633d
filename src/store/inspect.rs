//! Looking at buckets from outside: what the admin page lists and forgives.
//!
//! A store lists its buckets as [`BucketRow`]s, filtered and sorted on its side and bounded
//! by a limit, so a million buckets never become a million rows in one response.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::clock::Timestamp;
use crate::config::RuleSet;

/// How the listing names caller-defined buckets (`RL.*`, [`Limits::take_from`](crate::Limits::take_from)):
/// this prefix, then `max:refill:interval_ms:key`. No rule bucket's key starts with `/`.
pub const CALLER_DEFINED_PREFIX: &str = "/rl/";

/// The rule column of a caller-defined bucket's row.
pub const CALLER_DEFINED_RULE: &str = "RL.*";

/// Which buckets to list, and how.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BucketQuery {
    /// The rules in force: a bucket is shown with its rule's current quotas.
    pub rules: Arc<RuleSet>,
    /// The time to judge budgets at.
    pub now: Timestamp,
    /// Only buckets whose key starts with this (`login/`).
    pub prefix: String,
    /// Only buckets with at most this fraction of their budget left (`0.5`).
    pub max_fraction: Option<f64>,
    /// The order of the rows.
    pub sort: BucketSort,
    /// At most this many rows.
    pub limit: usize,
}

impl BucketQuery {
    /// All buckets under `rules` at `now`, fewest tokens left first, at most 100.
    pub fn new(rules: Arc<RuleSet>, now: Timestamp) -> BucketQuery {
        BucketQuery {
            rules,
            now,
            prefix: String::new(),
            max_fraction: None,
            sort: BucketSort::Fraction,
            limit: 100,
        }
    }
}

/// The order of listed buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BucketSort {
    /// Least budget left first (the default: who is closest to being limited).
    #[default]
    Fraction,
    /// Fewest tokens left first.
    Remaining,
    /// By key.
    Key,
    /// Most recently seen first.
    LastSeen,
}

impl std::str::FromStr for BucketSort {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "fraction" => Ok(BucketSort::Fraction),
            "remaining" => Ok(BucketSort::Remaining),
            "key" => Ok(BucketSort::Key),
            "last_seen" => Ok(BucketSort::LastSeen),
            other => Err(format!(
                "unknown sort \"{other}\" (use fraction, remaining, key or last_seen)"
            )),
        }
    }
}

/// One bucket, as the admin page shows it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BucketRow {
    /// The bucket's key: the rule's key and the client (`login/203.0.113.7`), or the rule's
    /// key alone for a global bucket.
    pub key: String,
    /// The rule's name (`/` for the root).
    pub rule: String,
    /// What kind of bucket: the rule's algorithm and shaping ([`Rule::kind`](crate::config::Rule::kind)).
    pub kind: String,
    /// Whole tokens left now.
    pub remaining: u64,
    /// Tokens when full.
    pub capacity: u64,
    /// `remaining / capacity`.
    pub fraction: f64,
    /// When the bucket last took tokens (to about a second).
    pub last_seen: Timestamp,
}

/// Keeps the best `limit` rows in `sort` order without holding every match.
#[derive(Debug)]
pub(crate) struct TopRows {
    rows: Vec<BucketRow>,
    sort: BucketSort,
    limit: usize,
}

impl TopRows {
    pub(crate) fn new(sort: BucketSort, limit: usize) -> TopRows {
        TopRows {
            rows: Vec::new(),
            sort,
            limit,
        }
    }

    pub(crate) fn offer(&mut self, row: BucketRow) {
        self.rows.push(row);
        if self.rows.len() >= self.limit.saturating_mul(2).max(64) {
            self.trim();
        }
    }

    pub(crate) fn finish(mut self) -> Vec<BucketRow> {
        self.trim();
        self.rows
    }

    fn trim(&mut self) {
        let sort = self.sort;
        self.rows.sort_by(|a, b| compare(sort, a, b));
        self.rows.truncate(self.limit);
    }
}

fn compare(sort: BucketSort, a: &BucketRow, b: &BucketRow) -> Ordering {
    let by_key = || a.key.cmp(&b.key);
    match sort {
        BucketSort::Fraction => a.fraction.total_cmp(&b.fraction).then_with(by_key),
        BucketSort::Remaining => a.remaining.cmp(&b.remaining).then_with(by_key),
        BucketSort::Key => by_key(),
        BucketSort::LastSeen => b.last_seen.cmp(&a.last_seen).then_with(by_key),
    }
}
