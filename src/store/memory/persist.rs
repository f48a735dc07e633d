//! Snapshots of the in-memory store: every bucket written out under its rule's
//! key, and read back under today's rules at start.

use std::collections::HashMap;
use std::hash::BuildHasher;

use super::state::State;
use super::tables::{Compact, Entry, compact_ip, seen_stamp};
use super::{MemoryStore, hash_compact};
use crate::clock::Timestamp;
use crate::config::{Limit, RuleId};
use crate::quota::IntervalId;
use crate::store::snapshot::{self, Layout, Record};
use crate::store::{SnapshotError, StoreRules};
#[cfg(feature = "disk")]
use crate::{
    decision::Decision,
    store::{BucketRef, CheckRequest},
};

/// The rule key a snapshot files caller-defined (`RL.*`) buckets under: no rule's
/// normalised key starts with `/`.
pub(super) const CALLER_DEFINED_KEY: &str = "/rl";

impl MemoryStore {
    /// Writes every bucket to `[store] snapshot`, if set; how many were written.
    pub(super) fn save(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError> {
        let Some(path) = &rules.settings().snapshot else {
            return Ok(0);
        };
        let records = self.export(rules);
        snapshot::write(path, now, &records)?;
        Ok(records.len())
    }

    /// Reads `[store] snapshot` back, if set; how many buckets were restored.
    pub(super) fn restore(
        &self,
        rules: &StoreRules,
        now: Timestamp,
    ) -> Result<usize, SnapshotError> {
        match &rules.settings().snapshot {
            Some(path) => Ok(self.import(rules, snapshot::read(path)?, now.as_unix_nanos())),
            None => Ok(0),
        }
    }

    /// Every bucket of a rule in `rules`, for a snapshot.
    fn export(&self, rules: &StoreRules) -> Vec<Record> {
        // Candidates' buckets are left out: a candidate starts afresh after a restart.
        let keys: HashMap<RuleId, &str> = rules
            .rules()
            .iter()
            .filter(|rule| !rule.candidate)
            .map(|rule| (rule.id, &*rule.key))
            .collect();
        let mut records = Vec::new();
        for shard in &self.shards {
            shard.0.lock().for_each(|entry| {
                let rule = match keys.get(&entry.rule) {
                    Some(rule) => *rule,
                    None if entry.rule == RuleId::CALLER_DEFINED => CALLER_DEFINED_KEY,
                    None => return,
                };
                let (layout, words) = layout_words(&entry.state);
                records.push(Record {
                    rule: rule.to_owned(),
                    client: entry.client.clone(),
                    layout,
                    words,
                });
            });
        }
        records
    }

    /// Puts snapshot buckets back under today's rules; buckets of rules that are gone, or
    /// whose kind of bucket changed, or that have refilled meanwhile, are skipped.
    fn import(&self, rules: &StoreRules, records: Vec<Record>, now: u64) -> usize {
        let mut restored = 0;
        for record in records {
            let Some((id, state)) = restored_state(rules, record.rule.as_str(), &record) else {
                continue;
            };
            let entry = Entry {
                rule: id,
                last_seen: seen_stamp(now),
                client: record.client,
                state,
            };
            if self.insert_absent(entry, now) {
                restored += 1;
            }
        }
        self.keep_bound(now);
        restored
    }

    /// Holds `entry` unless its bucket is held already or it has refilled; whether it was
    /// put in. The caller keeps the bound.
    fn insert_absent(&self, entry: Entry, now: u64) -> bool {
        if entry.state.refills_in(now) == 0 {
            return false;
        }
        let hash = self.hasher.hash_one(entry.bucket());
        let mut tables = self.shard(hash).lock();
        if tables.contains(hash, entry.bucket()) {
            return false;
        }
        let hasher = &self.hasher;
        let compact = match (&entry.state, compact_ip(entry.bucket())) {
            (State::One { tat, interval }, Some(ip)) => IntervalId::intern(*interval)
                .map(|interval| Compact::new(entry.rule, ip, interval, tat[0], now)),
            _ => None,
        };
        match compact {
            Some(compact) => {
                tables
                    .compact
                    .insert_unique(hash, compact, |c| hash_compact(hasher, c));
            }
            None => {
                tables
                    .general
                    .insert_unique(hash, entry, |e| hasher.hash_one(e.bucket()));
            }
        }
        self.count(true, 1);
        true
    }

    #[cfg(feature = "disk")]
    /// Decides `request` as [`decide`](Self::decide) does, and returns with the decision
    /// the bucket's state after it as stored words and the nanoseconds until it will have
    /// refilled — read under the same lock, so no eviction can come between (`None`: the
    /// bucket is not held, having refilled). For a store that writes buckets elsewhere too
    /// (on disk).
    pub(crate) fn decide_exporting(&self, request: CheckRequest<'_>) -> (Decision, Exported) {
        let hash = self.hasher.hash_one(request.bucket);
        let mut tables = self.shard(hash).lock();
        let decision = self.decide_in(&mut tables, hash, request);
        let now = request.now.as_unix_nanos();
        let exported = exported(&tables, hash, request.bucket, now);
        drop(tables);
        self.keep_bound(now);
        (decision, exported)
    }

    #[cfg(feature = "disk")]
    /// Puts `bucket` back from stored words unless it is held already; whether it was.
    /// `global` says whether the bucket's rule keeps one bucket for all (the words must fit
    /// the kind of bucket the rule keeps, as a snapshot's must).
    pub(crate) fn import_bucket(
        &self,
        bucket: BucketRef<'_>,
        layout: Layout,
        words: Vec<u64>,
        now: u64,
    ) -> bool {
        let Some(state) = stored_state(layout, &words, bucket.rule == RuleId::CALLER_DEFINED)
        else {
            return false;
        };
        let entry = Entry {
            rule: bucket.rule,
            last_seen: seen_stamp(now),
            client: bucket.client.map(|c| c.clone().into_owned()),
            state,
        };
        // The bound is kept by the decision that follows (which reads this bucket first).
        self.insert_absent(entry, now)
    }

    #[cfg(feature = "disk")]
    /// Whether `bucket` is held.
    pub(crate) fn holds(&self, bucket: BucketRef<'_>) -> bool {
        let hash = self.hasher.hash_one(bucket);
        self.shard(hash).lock().contains(hash, bucket)
    }
}

#[cfg(feature = "disk")]
/// A bucket's state as words, with the nanoseconds until it will have refilled.
pub(crate) type Exported = Option<(Layout, Vec<u64>, u64)>;

#[cfg(feature = "disk")]
/// `bucket` (whose hash is `hash`) out of `tables`, if held.
fn exported(
    tables: &super::tables::Tables,
    hash: u64,
    bucket: BucketRef<'_>,
    now: u64,
) -> Exported {
    if let Some(ip) = compact_ip(bucket)
        && let Some(compact) = tables.compact.find(hash, |c| c.is(bucket.rule, ip))
    {
        let entry = compact.to_entry();
        let (layout, words) = layout_words(&entry.state);
        return Some((layout, words, entry.state.refills_in(now)));
    }
    let entry = tables.general.find(hash, |e| e.bucket() == bucket)?;
    let (layout, words) = layout_words(&entry.state);
    Some((layout, words, entry.state.refills_in(now)))
}

/// A bucket's state as a snapshot (or the disk store) writes it.
pub(crate) fn layout_words(state: &State) -> (Layout, Vec<u64>) {
    match state {
        State::One { tat, interval } => (Layout::One, vec![tat[0], *interval]),
        State::Many(words) => (Layout::Many, words.to_vec()),
        State::Discrete(words) => (Layout::Discrete, words.to_vec()),
        State::Warm(words) => (Layout::Warm, words.to_vec()),
        State::Log(log) => {
            let mut words = Vec::with_capacity(1 + log.periods.len() + log.entries.len());
            words.push(log.periods.len() as u64);
            words.extend(log.periods.iter());
            words.extend(log.entries.iter());
            (Layout::Log, words)
        }
        State::Ring(rings) => {
            let mut words = Vec::with_capacity(1 + 2 * rings.periods.len() + rings.words.len());
            words.push(rings.periods.len() as u64);
            for &(period, resolution) in &rings.periods {
                words.extend([period, resolution]);
            }
            words.extend(rings.words.iter());
            (Layout::Ring, words)
        }
    }
}

/// The id and state a snapshot record takes under today's rules, if it still fits them: its
/// rule exists and keeps the same kind of bucket — or it is a caller-defined bucket.
fn restored_state(rules: &StoreRules, key: &str, record: &Record) -> Option<(RuleId, State)> {
    let words = &record.words;
    if key == CALLER_DEFINED_KEY {
        let words: [u64; 6] = words.as_slice().try_into().ok()?;
        return (record.layout == Layout::Discrete && record.client.is_some())
            .then(|| (RuleId::CALLER_DEFINED, State::Discrete(Box::new(words))));
    }
    let rule = rules.by_key(key).filter(|rule| !rule.candidate)?;
    if !matches!(rule.limit, Limit::Limited { .. }) || rule.global() != record.client.is_none() {
        return None;
    }
    Some((rule.id, state_from(record.layout, words)?))
}

/// The state stored `words` of `layout` make, as a bucket of a rule or a caller-defined
/// (`RL.*`) one: the latter are always `discrete`, the former never. `None` for words no
/// bucket could have written.
pub(super) fn stored_state(layout: Layout, words: &[u64], caller_defined: bool) -> Option<State> {
    if caller_defined {
        if layout != Layout::Discrete {
            return None;
        }
        return Some(State::Discrete(Box::new(<[u64; 6]>::try_from(words).ok()?)));
    }
    state_from(layout, words)
}

/// The state stored `words` in `layout` stand for (a rule's bucket: not a caller-defined
/// one), if they are well formed.
pub(super) fn state_from(layout: Layout, words: &[u64]) -> Option<State> {
    let state = match layout {
        Layout::One => State::One {
            tat: [*words.first()?],
            interval: *words.get(1)?,
        },
        Layout::Many => State::Many(words.to_vec().into_boxed_slice()),
        Layout::Warm => State::Warm(Box::new(<[u64; 4]>::try_from(words).ok()?)),
        Layout::Log => {
            let n = usize::try_from(*words.first()?).ok()?;
            let periods = words.get(1..=n)?;
            let mut entries: Vec<u64> = words.get(n + 1..)?.to_vec();
            entries.sort_unstable();
            State::Log(Box::new(super::state::Log {
                periods: periods.into(),
                entries: entries.into(),
            }))
        }
        Layout::Ring => {
            let n = usize::try_from(*words.first()?).ok()?;
            let pairs = words.get(1..=n.checked_mul(2)?)?;
            let periods: Box<[(u64, u64)]> = pairs
                .chunks_exact(2)
                .map(|pair| (pair[0], pair[1]))
                .collect();
            // What no rule could have written (at most 60 sub-windows a period) is not read.
            if periods.iter().any(|&(period, resolution)| {
                resolution == 0 || period / resolution > crate::algorithm::subwindow::MAX_SUBWINDOWS
            }) {
                return None;
            }
            let expected: usize = periods
                .iter()
                .map(|&(period, resolution)| 2 + (period / resolution.max(1)).max(1) as usize)
                .sum();
            let rings = words.get(2 * n + 1..)?;
            if rings.len() != expected {
                return None;
            }
            State::Ring(Box::new(super::state::Rings {
                periods,
                words: rings.into(),
            }))
        }
        Layout::Discrete => return None,
    };
    Some(state)
}
