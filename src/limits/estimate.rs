//! What a request reserves under a rule that estimates (`cost = { reserve = "estimate" }`):
//! its prompt's tokens and its output ceiling, weighed by the rule's weights, read from the
//! request's [`RequestJson`] — or the rule's `max` when the body gave none, counted as a
//! fault.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Active;
use crate::config::{EstimateFallback, Rule};
use crate::key::RequestJson;
use crate::traffic::Fault;

/// What the caller of a decision knows of the request's body.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BodySeen<'r> {
    /// No request (a key decided over RESP or gRPC): estimates fall back to `max`, quietly.
    NoRequest,
    /// A request whose body was not read (no [`ReadBodyLayer`](crate::ReadBodyLayer)).
    NotRead,
    /// A request whose body was read.
    Read(&'r RequestJson),
}

impl<'r> BodySeen<'r> {
    /// What `request` carries.
    pub(crate) fn of<B>(request: &'r http::Request<B>) -> BodySeen<'r> {
        match request.extensions().get::<RequestJson>() {
            Some(json) => BodySeen::Read(json),
            None => BodySeen::NotRead,
        }
    }
}

/// The tokens rule `index` of `rules` takes at admission when it estimates: `None` for
/// rules that do not (they take their own cost). `body` is asked only by a rule that
/// estimates: looking the body up is a request extension's hash-map probe.
pub(crate) fn estimate<'r>(
    rules: &Active,
    index: usize,
    rule: &Rule,
    body: impl FnOnce() -> BodySeen<'r>,
) -> Option<u64> {
    let settle = rule.settle()?;
    let json = match body() {
        // No request (a key decided over RESP or gRPC): `max`, quietly.
        BodySeen::NoRequest => return settle.estimate,
        BodySeen::NotRead => None,
        BodySeen::Read(json) => Some(json),
    };
    match settle.estimate_for(json, rules.prices())? {
        Ok(tokens) => Some(tokens),
        Err(why) => {
            let kind = match why {
                EstimateFallback::NoPrice => Fault::NoPrice,
                _ => Fault::UnreadableRequest,
            };
            fault(rules, index, rule, kind, why);
            settle.estimate
        }
    }
}

/// Counts an estimate that fell back to `max`, and logs it once per rule a minute.
fn fault(rules: &Active, index: usize, rule: &Rule, kind: Fault, why: EstimateFallback) {
    if let Some(settles) = rules.counters(index).and_then(|c| c.settle.as_ref()) {
        settles.fault(kind).increment(1);
    }
    static LAST: LazyLock<Mutex<HashMap<String, Instant>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let now = Instant::now();
    let mut last = LAST.lock();
    if last
        .get(rule.name())
        .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(60))
    {
        return;
    }
    if last.len() > 10_000 {
        last.clear();
    }
    last.insert(rule.name().to_owned(), now);
    tracing::warn!(
        rule = rule.name(),
        reason = %why,
        "a request's estimate could not be read; its rule's max is reserved (logged once a minute per rule)"
    );
}
