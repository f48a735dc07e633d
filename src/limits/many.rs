//! Several keys decided together, as Envoy's rate limit service decides a request's
//! descriptors: all take their tokens, or none does.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::stack::{NoParts, draws};
use super::{Limits, decided_by};
use crate::clock::Timestamp;
use crate::config::{Per, Rule};
use crate::decision::Decision;
use crate::key::{Client, normalize_route};
use crate::store::{CheckMode, CheckRequest, Store, StoreError};
use crate::traffic::RuleCounters;

/// One key of a [`Limits::check_keys`] call, already in matching form: what a front end
/// whose keys are not request paths (Envoy descriptors, say) builds for each key.
///
/// `route` is every segment but the last, as [`normalize_route`] leaves it (and lower-cased
/// if the rules set `[key] case_insensitive`); `last` is the last segment, itself
/// percent-encoded if it could hold a `/` ([`encode_segment`](crate::key::encode_segment)).
///
/// ```
/// use tollgate::KeyCheck;
///
/// let key = KeyCheck::new("edge/remote_address", "203.0.113.7").cost(3);
/// assert_eq!((key.route(), key.last(), key.tokens()), ("edge/remote_address", "203.0.113.7", Some(3)));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KeyCheck<'k> {
    route: &'k str,
    last: &'k str,
    cost: Option<u64>,
    plan: Option<&'k str>,
}

impl<'k> KeyCheck<'k> {
    /// The key `route/last`, at its rule's `cost`.
    pub fn new(route: &'k str, last: &'k str) -> KeyCheck<'k> {
        KeyCheck {
            route,
            last,
            cost: None,
            plan: None,
        }
    }

    /// Decides under the rule's limits for `plan`, whatever `[plans]` would choose.
    pub fn plan(self, plan: &'k str) -> KeyCheck<'k> {
        KeyCheck {
            plan: Some(plan),
            ..self
        }
    }

    /// Takes `tokens` instead of the rule's `cost`.
    pub fn cost(self, tokens: u64) -> KeyCheck<'k> {
        KeyCheck {
            cost: Some(tokens),
            ..self
        }
    }

    /// Every segment but the last.
    pub fn route(&self) -> &'k str {
        self.route
    }

    /// The last segment.
    pub fn last(&self) -> &'k str {
        self.last
    }

    /// The tokens it takes; `None`: its rule's `cost`.
    pub fn tokens(&self) -> Option<u64> {
        self.cost
    }
}

/// Which keys resolving to one `per = "client"` rule share its bucket, in
/// [`Limits::check_keys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BucketBy {
    /// The key's last segment, the HTTP layer's client: `api = "100/min"` is 100 a minute
    /// per client across every route under `api/`.
    LastSegment,
    /// Everything in the key after the rule's own key: each distinct key under the rule
    /// counts apart, as each distinct descriptor does in Envoy's rate limit service.
    Remainder,
}

/// A key some rule limits, waiting for its decision.
struct Limited<'r> {
    /// Where its decision goes in the answer.
    at: usize,
    /// Where its rule is in the rule set.
    index: usize,
    rule: &'r Rule,
    counters: Option<&'r RuleCounters>,
    client: Client<'static>,
    cost: u64,
    /// The cost the caller gave (`None`: each limit's own).
    given: Option<u64>,
}

impl<St: Store> Limits<St> {
    /// Decides several keys (`route/client`, as [`check`](Self::check) takes them) at once,
    /// each at its own cost (`None`: its rule's `cost`). If every key whose rule enforces
    /// admits its request, every one takes its tokens; if any refuses, none takes anything.
    /// Shadow rules only measure: they never refuse the others, and take their tokens only
    /// if the others were admitted. Keys no rule limits, or an unlimited rule, are admitted
    /// with [`Decision::unlimited`]. One decision per key, in order, each naming its rule;
    /// each limited one is counted in its rule's `tollgate_requests_total`.
    ///
    /// With the in-memory store the decision is atomic against concurrent requests
    /// ([`MemoryStore::decide_all`](crate::store::MemoryStore::decide_all)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits]\na = \"1/min\"\nb = \"5/min\"\n")?;
    /// limits.check("a/me", 1).await?; // a is now empty for me
    /// let both = limits.check_all(&[("a/me", None), ("b/me", None)]).await?;
    /// assert!(!both[0].allowed());
    /// assert_eq!(limits.peek("b/me").await?.remaining(), 5, "b took nothing");
    /// # Ok(()) }
    /// ```
    pub async fn check_all(
        &self,
        keys: &[(&str, Option<u64>)],
    ) -> Result<Vec<Decision>, StoreError> {
        let settings = self.rules().route_settings().clone();
        let routes: Vec<(Cow<'_, str>, &str, Option<u64>)> = keys
            .iter()
            .map(|&(key, cost)| {
                let (route, client) = key.rsplit_once('/').unwrap_or(("", key));
                (normalize_route(route, &settings), client, cost)
            })
            .collect();
        let keys: Vec<KeyCheck<'_>> = routes
            .iter()
            .map(|(route, last, cost)| KeyCheck {
                route,
                last,
                cost: *cost,
                plan: None,
            })
            .collect();
        self.check_keys(&keys, BucketBy::LastSegment).await
    }

    /// [`check_all`](Self::check_all) for keys a front end has already put in matching
    /// form, with its own idea of which keys share a bucket: all are admitted and charged,
    /// or none is charged. Envoy's rate limit service decides a request's descriptors this
    /// way, each descriptor `(k1,v1),(k2,v2)` of domain `d` being the key `d/k1/v1/k2` + `v2`,
    /// bucketed by [`BucketBy::Remainder`].
    ///
    /// ```
    /// use tollgate::{BucketBy, KeyCheck, Limits};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = Limits::from_toml("[limits]\n\"edge/user\" = \"2/min\"\n\"edge/ip\" = \"1/min\"\n")?;
    /// let keys = [KeyCheck::new("edge/user", "alice"), KeyCheck::new("edge/ip", "203.0.113.7")];
    /// let first = limits.check_keys(&keys, BucketBy::Remainder).await?;
    /// assert!(first.iter().all(|d| d.allowed()));
    ///
    /// // The address has had its one: neither key is charged, so alice keeps her second.
    /// let second = limits.check_keys(&keys, BucketBy::Remainder).await?;
    /// assert!(second[0].allowed() && !second[1].allowed());
    /// assert_eq!(limits.peek("edge/user/alice").await?.remaining(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn check_keys(
        &self,
        keys: &[KeyCheck<'_>],
        by: BucketBy,
    ) -> Result<Vec<Decision>, StoreError> {
        let rules = self.shared.active.load_full();
        let now = self.now();
        let mut decisions: Vec<Option<Decision>> = vec![None; keys.len()];
        let mut limited = Vec::new();
        for (at, key) in keys.iter().enumerate() {
            let found = rules.resolve_with(key.route, || key.last.into());
            let found =
                found.map(|index| rules.plan_index_for(index, key.plan, || key.last.into()));
            match found.and_then(|index| Some((index, rules.rule(index)?))) {
                // A rule with a concurrency cap alone has no rate to check here; one that
                // only carries `also` limits has theirs.
                Some((index, rule)) if rule_decides(rule) => {
                    limited.push(Limited {
                        at,
                        index,
                        rule,
                        counters: rules.counters(index),
                        client: bucket_client(key, rule, by),
                        cost: key.cost.unwrap_or_else(|| rule.cost()),
                        given: key.cost,
                    });
                }
                Some((_, rule)) => decisions[at] = Some(decided_by(Decision::unlimited(), rule)),
                None => decisions[at] = Some(Decision::unlimited()),
            }
        }
        if limited
            .iter()
            .any(|entry| !entry.rule.stack_indices().is_empty())
        {
            // Some key meets `also` limits: every key's limits together, all or nothing.
            let groups = limited
                .iter()
                .map(|entry| draws(&rules, entry.index, &entry.client, &NoParts, entry.given))
                .collect();
            let decided = self
                .decide_groups(&rules, groups, CheckMode::Consume, now)
                .await?;
            for (entry, decision) in limited.iter().zip(decided) {
                decisions[entry.at] = Some(decision);
                let how = (CheckMode::Consume, Some(entry.cost));
                self.tune(&rules, entry.index, &entry.client, how, now, true);
            }
            return Ok(decisions
                .into_iter()
                .map(|decision| decision.unwrap_or_else(Decision::unlimited))
                .collect());
        }
        let (shadowed, enforced): (Vec<&Limited<'_>>, Vec<&Limited<'_>>) =
            limited.iter().partition(|entry| entry.rule.is_shadow());
        let requests: Vec<CheckRequest<'_>> = enforced
            .iter()
            .filter_map(|entry| request(entry, now))
            .collect();
        let taken = match requests.as_slice() {
            // One bucket: a single check is already atomic, without the bookkeeping.
            [one] => vec![self.shared.store.check(*one).await?],
            _ => self.shared.store.check_all(&requests).await?,
        };
        let admitted = taken.iter().all(Decision::allowed);
        for (entry, decision) in enforced.iter().zip(taken) {
            decisions[entry.at] = Some(decision);
        }
        for entry in shadowed {
            if let Some(mut request) = request(entry, now) {
                if !admitted {
                    request.mode = CheckMode::Peek;
                }
                decisions[entry.at] = Some(self.shared.store.check(request).await?);
            }
        }
        for entry in &limited {
            if let Some(decision) = decisions[entry.at].take() {
                let decision = decided_by(decision, entry.rule);
                count(entry, &decision, now);
                decisions[entry.at] = Some(decision);
            }
            // Each candidate decides the key on its own, whatever the others did.
            let how = (CheckMode::Consume, Some(entry.cost));
            self.tune(&rules, entry.index, &entry.client, how, now, true);
        }
        Ok(decisions
            .into_iter()
            .map(|decision| decision.unwrap_or_else(Decision::unlimited))
            .collect())
    }
}

/// Whether a key resolved to `rule` is decided here: a limited rule with a rate, or with
/// `also` limits.
fn rule_decides(rule: &Rule) -> bool {
    let has_limits = !rule.quotas().is_empty() || !rule.stack_indices().is_empty();
    !rule.is_unlimited() && has_limits
}

/// The client a limited key's bucket is kept under.
fn bucket_client(key: &KeyCheck<'_>, rule: &Rule, by: BucketBy) -> Client<'static> {
    let last = || Client::from_segment(key.last).into_owned();
    if by == BucketBy::LastSegment {
        return last();
    }
    let depth = rule.key().split('/').filter(|s| !s.is_empty()).count();
    let mut segments = key.route.split('/').filter(|s| !s.is_empty());
    let Some(first) = segments.nth(depth) else {
        return last();
    };
    // Several segments: one client segment, `/` and `%` encoded so none can collide.
    let mut remainder: String = utf8_percent_encode(first, REMAINDER_UNSAFE).collect();
    for segment in segments.chain(std::iter::once(key.last)) {
        remainder.push_str("%2F");
        remainder.extend(utf8_percent_encode(segment, REMAINDER_UNSAFE));
    }
    Client::Key(Cow::Owned(remainder))
}

/// What a multi-segment remainder encodes to stay one unambiguous segment.
const REMAINDER_UNSAFE: &AsciiSet = &CONTROLS.add(b'/').add(b'%');

/// A limited key's check request, at its rule's numbers.
fn request<'a>(entry: &'a Limited<'_>, now: Timestamp) -> Option<CheckRequest<'a>> {
    let client = (entry.rule.per() == Some(Per::Client)).then_some(&entry.client);
    super::rule_request(entry.rule, client, entry.cost, now, CheckMode::Consume)
}

/// Counts `decision`, made at `now`, under the key's rule (its metrics and traffic).
fn count(entry: &Limited<'_>, decision: &Decision, now: Timestamp) {
    let Some(counters) = entry.counters else {
        return;
    };
    match (decision.allowed(), entry.rule.is_shadow()) {
        (true, _) => counters.admitted(now),
        (false, true) => counters.shadow_refused(now),
        (false, false) => counters.refused(now, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::from_toml(
            "[limits]\n\"d/k\" = \"2/min\"\n\"d/k/v\" = \"1/min\"\n\"s\" = { rate = \"1/min\", shadow = true }\n",
        )
        .unwrap()
    }

    async fn by_remainder(limits: &Limits, key: &str) -> Decision {
        let (route, last) = key.rsplit_once('/').unwrap();
        let check = KeyCheck::new(route, last);
        limits
            .check_keys(&[check], BucketBy::Remainder)
            .await
            .unwrap()
            .remove(0)
    }

    #[tokio::test]
    async fn remainder_buckets_count_each_distinct_key_apart() {
        let limits = limits();
        for _ in 0..2 {
            assert!(by_remainder(&limits, "d/k/a/j/x").await.allowed());
            assert!(by_remainder(&limits, "d/k/b/j/x").await.allowed());
        }
        let third = by_remainder(&limits, "d/k/a/j/x").await;
        assert!(!third.allowed(), "a/j/x has had its two");
        assert_eq!(third.rule(), Some("d/k"));
        // By last segment, the two keys share x's bucket, already spent.
        let shared = limits.check_all(&[("d/k/c/j/x", None)]).await.unwrap();
        assert!(
            shared[0].allowed(),
            "the last-segment bucket is a different one"
        );
        let shared = limits.check_all(&[("d/k/d/j/x", None)]).await.unwrap();
        assert!(shared[0].allowed());
        let shared = limits.check_all(&[("d/k/e/j/x", None)]).await.unwrap();
        assert!(!shared[0].allowed(), "c, d and e share the client x");
    }

    #[tokio::test]
    async fn an_exact_match_keeps_the_one_bucket() {
        let limits = limits();
        assert!(by_remainder(&limits, "d/k/v").await.allowed());
        let second = by_remainder(&limits, "d/k/v").await;
        assert!(!second.allowed());
        assert_eq!(second.rule(), Some("d/k/v"));
    }

    #[tokio::test]
    async fn shadow_decisions_say_so_and_never_refuse_the_others() {
        let limits = limits();
        limits.check("s/me", 1).await.unwrap();
        let both = limits
            .check_all(&[("s/me", None), ("d/k/me", None)])
            .await
            .unwrap();
        assert!(both[0].shadow() && !both[0].allowed());
        assert!(both[1].allowed() && !both[1].shadow());
        assert_eq!(limits.peek("d/k/me").await.unwrap().remaining(), 1);
    }
}
