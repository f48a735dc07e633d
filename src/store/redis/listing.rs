//! The `/buckets` listing against Redis: which keys are this store's buckets, and what
//! each holds now, without changing any.

use super::keys::parse_bucket_key;
use super::pool::Pool;
use super::script::{SCRIPT, decision_from, script_args};
use crate::Quota;
use crate::algorithm::{Algorithm, CheckMode};
use crate::clock::Timestamp;
use crate::config::{Limit, RedisSettings, Rule};
use crate::key::Client;
use crate::store::{BucketQuery, BucketRow, TopRows};

/// The most keys one `/buckets` listing examines.
const MAX_LISTED: usize = 10_000;

/// `text` with Redis glob characters escaped, for `SCAN MATCH`.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The `/buckets` listing: `SCAN` of this store's keys (at most [`MAX_LISTED`]), then one
/// pipeline peeking every bucket of a known rule under the asked prefix.
pub(super) async fn list(
    pool: &Pool,
    settings: &RedisSettings,
    query: &BucketQuery,
    caller_time: bool,
) -> redis::RedisResult<Vec<BucketRow>> {
    let mut connection = pool.connection(settings).await?;
    let pattern = format!("{}*", escape_glob(&settings.key_prefix));
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut connection)
            .await?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 || keys.len() >= MAX_LISTED {
            break;
        }
    }
    keys.truncate(MAX_LISTED);

    struct Candidate<'r> {
        display: String,
        rule: &'r Rule,
        algorithm: Algorithm,
        quotas: &'r [Quota],
    }
    let now = caller_time.then_some(query.now);
    let mut pipeline = redis::pipe();
    pipeline.cmd("SCRIPT").arg("LOAD").arg(SCRIPT).ignore();
    let mut candidates = Vec::new();
    for key in &keys {
        let Some((rule_key, client)) = parse_bucket_key(&settings.key_prefix, key) else {
            continue;
        };
        let Some(rule) = query.rules.get(rule_key) else {
            continue;
        };
        let Limit::Limited {
            quotas, algorithm, ..
        } = rule.limit()
        else {
            continue;
        };
        let mut display = String::new();
        let client = client.map_or(Client::Unknown, Client::from_segment);
        rule.write_bucket_key(&mut display, &client);
        if !display.starts_with(query.prefix.as_str()) {
            continue;
        }
        pipeline.cmd("OBJECT").arg("IDLETIME").arg(key);
        pipeline
            .cmd("EVALSHA")
            .arg(pool.script_hash())
            .arg(1)
            .arg(key)
            .arg(script_args(
                now,
                CheckMode::Peek,
                1,
                false,
                *algorithm,
                quotas,
            ));
        candidates.push(Candidate {
            display,
            rule,
            algorithm: *algorithm,
            quotas,
        });
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let replies: Vec<redis::Value> = pipeline.query_async(&mut connection).await?;
    let mut top = TopRows::new(query.sort, query.limit);
    let now_ns = query.now.as_unix_nanos();
    for (candidate, pair) in candidates.into_iter().zip(replies.chunks_exact(2)) {
        let idle: u64 = redis::from_redis_value_ref(&pair[0]).unwrap_or(0);
        let Ok(reply) = redis::from_redis_value_ref::<Vec<i64>>(&pair[1]) else {
            continue; // expired between SCAN and now, or not ours
        };
        let Ok(decision) = decision_from(&reply, candidate.algorithm, candidate.quotas) else {
            continue;
        };
        let capacity = decision.limit().max(1);
        let fraction = decision.remaining() as f64 / capacity as f64;
        if query.max_fraction.is_some_and(|max| fraction > max) {
            continue;
        }
        top.offer(BucketRow {
            key: candidate.display,
            rule: candidate.rule.name().to_owned(),
            remaining: decision.remaining(),
            capacity,
            fraction,
            last_seen: Timestamp::from_unix_nanos(
                now_ns.saturating_sub(idle.saturating_mul(1_000_000_000)),
            ),
        });
    }
    Ok(top.finish())
}
