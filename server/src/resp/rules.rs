//! tollgate's own commands, over the live TOML rules the HTTP layer uses:
//!
//! ```text
//! TG.CHECK key [COST n]   → [1|0, remaining, retry-after ms, reset ms, rule]
//! TG.PEEK key             → the same, taking nothing
//! TG.EXPLAIN key          → key, route, client, rule, bucket, each prefix tried, and the
//!                           key's parts beside the route ([key] parts)
//! ```
//!
//! `key` is a request key, `route/client` (`api/search/203.0.113.7`). `COST` defaults to the
//! rule's `cost`, as for a request through the layer. `remaining` is -1 and `rule` null when
//! no rule limits the key. Times are whole milliseconds, rounded up.

use tollgate::Decision;
use tollgate::Limits;
use tollgate::key::normalize_route;
use tollgate::store::{Store, StoreError};

use super::protocol::Reply;
use super::smyte::{INVALID_INTEGER, SYNTAX_ERROR, integer};

/// `TG.CHECK key [COST n]` (`take`) or `TG.PEEK key`.
pub(super) async fn check<St: Store>(
    limits: &Limits<St>,
    args: &[&[u8]],
    take: bool,
    reply: &mut Reply<'_>,
) {
    let Some(key) = key(args, reply) else {
        return;
    };
    let result = match (take, args.get(1..)) {
        (false, _) => limits.peek(key).await,
        (true, Some([])) => limits.check_rule_cost(key).await,
        (true, Some([option, value])) if option.eq_ignore_ascii_case(b"cost") => {
            match integer(Some(value))
                .ok()
                .and_then(|n| u64::try_from(n).ok())
                .filter(|&n| n >= 1)
            {
                Some(cost) => limits.check(key, cost).await,
                None => return reply.error(INVALID_INTEGER),
            }
        }
        _ => return reply.error(SYNTAX_ERROR),
    };
    // A rule with on_limit = "delay" answers when the request's turn comes.
    if let Ok(decision) = &result
        && decision.allowed()
        && !decision.delay().is_zero()
    {
        tokio::time::sleep(decision.delay()).await;
    }
    answer(result, reply);
}

fn answer(result: Result<Decision, StoreError>, reply: &mut Reply<'_>) {
    let decision = match result {
        Ok(decision) => decision,
        Err(error) => return reply.error(&format!("ERR {error}")),
    };
    let millis = |d: std::time::Duration| {
        i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
    };
    reply.array(5);
    reply.integer(i64::from(decision.allowed()));
    reply.integer(match decision.remaining() {
        u64::MAX => -1,
        n => i64::try_from(n).unwrap_or(i64::MAX),
    });
    reply.integer(if decision.allowed() {
        0
    } else {
        millis(decision.retry_after())
    });
    reply.integer(millis(decision.reset()));
    match decision.rule() {
        Some(rule) => reply.bulk(rule.as_bytes()),
        None => reply.null(),
    }
}

/// `TG.EXPLAIN key`: which rule and bucket the key gets, and why.
pub(super) fn explain<St: Store>(limits: &Limits<St>, args: &[&[u8]], reply: &mut Reply<'_>) {
    let Some(key) = key(args, reply) else {
        return;
    };
    let rules = limits.rules();
    let (route, client) = key.rsplit_once('/').unwrap_or(("", key));
    let route = normalize_route(route, rules.route_settings());
    let why = rules.explain(&route, client);
    reply.map(8);
    reply.bulk(b"key");
    reply.bulk(why.key.as_bytes());
    reply.bulk(b"route");
    reply.bulk(why.route.as_bytes());
    reply.bulk(b"client");
    reply.bulk(why.client.as_bytes());
    for (field, value) in [
        ("rule", &why.rule),
        ("kind", &why.kind),
        ("bucket", &why.bucket),
    ] {
        reply.bulk(field.as_bytes());
        match value {
            Some(value) => reply.bulk(value.as_bytes()),
            None => reply.null(),
        }
    }
    reply.bulk(b"tried");
    reply.array(why.tried.len());
    for step in &why.tried {
        reply.array(2);
        reply.bulk(step.prefix.as_bytes());
        reply.integer(i64::from(step.has_rule));
    }
    reply.bulk(b"parts");
    reply.array(why.parts.len());
    for part in &why.parts {
        reply.array(2);
        reply.bulk(part.part.as_bytes());
        reply.bulk(part.value.as_bytes());
    }
}

/// The key argument, which must be UTF-8 text (a request key is a path and a client).
fn key<'a>(args: &[&'a [u8]], reply: &mut Reply<'_>) -> Option<&'a str> {
    let key = args.first().and_then(|k| std::str::from_utf8(k).ok());
    if key.is_none() {
        reply.error("ERR the key must be UTF-8 text, route/client");
    }
    key
}
