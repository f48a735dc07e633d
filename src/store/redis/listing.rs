//! The `/buckets` listing against Redis: which keys are this store's buckets, and what
//! each holds now, without changing any.

use redis::Value;

use super::keys::parse_bucket_key;
use super::pool::{Connection, Pool};
use super::scripts::{SCRIPT, decision_from, script_args};
use super::shards::parse_cluster_slots;
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

/// This store's keys, at most [`MAX_LISTED`]: `SCAN` of the one server, or of every
/// master of a cluster in turn.
async fn scan(connection: &mut Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let masters = match connection {
        Connection::Single(_) => vec![None],
        _ => {
            let slots: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(connection)
                .await?;
            masters(&slots).into_iter().map(Some).collect()
        }
    };
    let mut keys: Vec<String> = Vec::new();
    for master in masters {
        let mut cursor: u64 = 0;
        loop {
            let mut command = redis::cmd("SCAN");
            command
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1_000);
            let routing = master.as_ref().map(|(host, port)| {
                redis::cluster_routing::RoutingInfo::SingleNode(
                    redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    },
                )
            });
            let (next, batch): (u64, Vec<String>) = match (&mut *connection, routing) {
                (Connection::Cluster(cluster), Some(routing)) => {
                    redis::from_redis_value(cluster.route_command(command, routing).await?)?
                }
                #[cfg(feature = "tls")]
                (Connection::NamedCluster(cluster), Some(routing)) => {
                    redis::from_redis_value(cluster.route_command(command, routing).await?)?
                }
                _ => command.query_async(&mut *connection).await?,
            };
            keys.extend(batch);
            cursor = next;
            if cursor == 0 || keys.len() >= MAX_LISTED {
                break;
            }
        }
        if keys.len() >= MAX_LISTED {
            break;
        }
    }
    keys.truncate(MAX_LISTED);
    Ok(keys)
}

/// The masters in a `CLUSTER SLOTS` reply, each once.
fn masters(reply: &Value) -> Vec<(String, u16)> {
    let mut found: Vec<(String, u16)> = Vec::new();
    for (_, _, master) in parse_cluster_slots(reply).unwrap_or_default() {
        if let Some(master) = master
            && !found.contains(&master)
        {
            found.push(master);
        }
    }
    found
}

/// The `/buckets` listing: `SCAN` of this store's keys (at most [`MAX_LISTED`]), then a
/// peek of every bucket of a known rule under the asked prefix — one pipeline on one
/// server; on a cluster, one small pipeline per bucket (its slot's node), all in flight
/// at once.
pub(super) async fn list(
    pool: &Pool,
    settings: &RedisSettings,
    query: &BucketQuery,
    caller_time: bool,
) -> redis::RedisResult<Vec<BucketRow>> {
    let mut connection = pool.connection(settings).await?;
    let pattern = format!("{}*", escape_glob(&settings.key_prefix));
    let keys = scan(&mut connection, &pattern).await?;

    struct Candidate<'r> {
        display: String,
        rule: &'r Rule,
        algorithm: Algorithm,
        quotas: &'r [Quota],
    }
    let now = caller_time.then_some(query.now);
    let mut pipelines = vec![redis::pipe()];
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
        if pool.is_cluster() {
            pipelines.push(redis::pipe());
        }
        let Some(pipeline) = pipelines.last_mut() else {
            continue;
        };
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
                &crate::Shaping::NONE,
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
    // The script is loaded everywhere first (on a cluster, SCRIPT LOAD goes to every node).
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPT)
        .query_async::<String>(&mut connection)
        .await?;
    let replies = peek_all(&connection, pipelines).await?;
    let mut top = TopRows::new(query.sort, query.limit);
    let now_ns = query.now.as_unix_nanos();
    for (candidate, pair) in candidates.into_iter().zip(replies.chunks_exact(2)) {
        let idle: u64 = redis::from_redis_value_ref(&pair[0]).unwrap_or(0);
        let Ok(reply) = redis::from_redis_value_ref::<Vec<i64>>(&pair[1]) else {
            continue; // expired between SCAN and now, or not ours
        };
        let Ok(decision) = decision_from(&reply, candidate.algorithm, candidate.quotas, None)
        else {
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
            kind: candidate.rule.kind(),
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

/// Every pipeline's replies, in order: the non-empty pipelines all in flight at once.
async fn peek_all(
    connection: &Connection,
    pipelines: Vec<redis::Pipeline>,
) -> redis::RedisResult<Vec<Value>> {
    let mut tasks = tokio::task::JoinSet::new();
    for (index, pipeline) in pipelines.into_iter().enumerate() {
        if pipeline.is_empty() {
            continue;
        }
        let mut connection = connection.clone();
        tasks.spawn(async move {
            let replies: redis::RedisResult<Vec<Value>> =
                pipeline.query_async(&mut connection).await;
            (index, replies)
        });
    }
    let mut answered = Vec::with_capacity(tasks.len());
    while let Some(joined) = tasks.join_next().await {
        let (index, replies) = joined.map_err(|error| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "a listing task failed",
                error.to_string(),
            ))
        })?;
        answered.push((index, replies?));
    }
    answered.sort_by_key(|(index, _)| *index);
    Ok(answered
        .into_iter()
        .flat_map(|(_, replies)| replies)
        .collect())
}
