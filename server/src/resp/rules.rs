//! tollgate's own commands, over the live TOML rules the HTTP layer uses:
//!
//! ```text
//! TG.CHECK key [COST n] [PLAN p] → [1|0, remaining, retry-after ms, reset ms, rule]
//! TG.PEEK key [PLAN p]           → the same, taking nothing
//! TG.EXPLAIN key [PLAN p]        → key, route, client, rule, bucket, each prefix tried, the
//!                                  key's parts beside the route ([key] parts), the plan,
//!                                  the `also` limits it meets (name, per, rates, bucket)
//! TG.CHARGE key n                → as TG.CHECK, having taken n even past empty
//! TG.REFUND key n                → as TG.PEEK, having given n back (never past full)
//! ```
//!
//! `key` is a request key, `route/client` (`api/search/203.0.113.7`). `COST` defaults to the
//! rule's `cost`, as for a request through the layer. `PLAN` decides as if the client were
//! on that plan; without it, `[plans]` membership (by the key's client) or its default
//! chooses, as for a request. `remaining` is -1 and `rule` null when no rule limits the
//! key. Times are whole milliseconds, rounded up.

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
    let Some(options) = Options::parse(args.get(1..).unwrap_or_default(), take, reply) else {
        return;
    };
    let plan = options.plan;
    let result = if take {
        limits.check_plan(key, options.cost, plan).await
    } else {
        limits.peek_plan(key, plan).await
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

/// `TG.CHARGE key n` (`charge`) or `TG.REFUND key n`: a cost settled out of band.
pub(super) async fn adjust<St: Store>(
    limits: &Limits<St>,
    args: &[&[u8]],
    charge: bool,
    reply: &mut Reply<'_>,
) {
    let Some(key) = key(args, reply) else {
        return;
    };
    let Some(n) = integer(args.get(1))
        .ok()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|&n| n >= 1)
    else {
        return reply.error(INVALID_INTEGER);
    };
    let result = if charge {
        limits.charge(key, n).await
    } else {
        limits.refund(key, n).await
    };
    answer(result, reply);
}

/// `COST n` and `PLAN p`, in any order, each at most once.
#[derive(Default)]
struct Options<'a> {
    cost: Option<u64>,
    plan: Option<&'a str>,
}

impl<'a> Options<'a> {
    /// The options in `args`, or `None` with the error replied. `COST` only if `cost`.
    fn parse(args: &[&'a [u8]], cost: bool, reply: &mut Reply<'_>) -> Option<Options<'a>> {
        let mut options = Options::default();
        for pair in args.chunks(2) {
            let [name, value] = pair else {
                reply.error(SYNTAX_ERROR);
                return None;
            };
            if cost && name.eq_ignore_ascii_case(b"cost") && options.cost.is_none() {
                let Some(n) = integer(Some(value))
                    .ok()
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n >= 1)
                else {
                    reply.error(INVALID_INTEGER);
                    return None;
                };
                options.cost = Some(n);
            } else if name.eq_ignore_ascii_case(b"plan") && options.plan.is_none() {
                let Some(plan) = std::str::from_utf8(value)
                    .ok()
                    .filter(|p| !p.is_empty() && p.len() <= 64)
                else {
                    reply.error("ERR the plan must be a name of 1 to 64 bytes");
                    return None;
                };
                options.plan = Some(plan);
            } else {
                reply.error(SYNTAX_ERROR);
                return None;
            }
        }
        Some(options)
    }
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
    let Some(options) = Options::parse(args.get(1..).unwrap_or_default(), false, reply) else {
        return;
    };
    let rules = limits.rules();
    let (route, client) = key.rsplit_once('/').unwrap_or(("", key));
    let route = normalize_route(route, rules.route_settings());
    let why = rules.explain_as(&route, client, options.plan);
    reply.map(11);
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
    reply.bulk(b"plan");
    match &why.plan {
        Some(plan) => reply.bulk(plan.as_bytes()),
        None => reply.null(),
    }
    reply.bulk(b"limit");
    match &why.limit {
        Some(limit) => reply.bulk(limit.as_bytes()),
        None => reply.null(),
    }
    reply.bulk(b"also");
    reply.array(why.also.len());
    for also in &why.also {
        reply.array(4);
        reply.bulk(also.limit.as_bytes());
        reply.bulk(also.per.as_bytes());
        reply.bulk(also.rates.as_bytes());
        reply.bulk(also.bucket.as_bytes());
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
