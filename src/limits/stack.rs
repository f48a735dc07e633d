//! Several limits on one request, decided together: the rule a request resolves to and the
//! `also` limits it meets (`[limits."KEY".also]`), all admitting or none charged.
//!
//! A request's draws — one bucket per limit, each at its own cost — go to the store's
//! [`check_all`](crate::store::Store::check_all) at once (atomic in memory and on disk
//! under the buckets' locks; one script on one Redis server; take-then-give-back on a
//! Redis Cluster). Their decisions come back as one: the refusing limit that keeps the
//! client waiting longest, or, when all admit, the shown limit closest to refusing — with
//! a note of which limits the headers list.
//!
//! The common request, whose rule has no `also` limits, never comes here: one load of the
//! rule's (empty) stack says so.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::estimate::{BodySeen, estimate};
use super::{Active, Limits, decided_by};
use crate::clock::Timestamp;
use crate::config::{AlsoBy, Limit, Per, Rule};
use crate::decision::{Decision, StackNote};
use crate::key::{Client, KeyPart};
use crate::store::{CheckMode, CheckRequest, Store, StoreError};

/// A decision over several limits, on its way.
pub(crate) type StackFuture = Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>;

/// One bucket a request draws on: a limit (by index into its rule set), whose bucket
/// (`None`: the limit's one global bucket), and the tokens it takes.
#[derive(Clone, Debug)]
pub(crate) struct Draw {
    pub(crate) index: usize,
    pub(crate) client: Option<Client<'static>>,
    pub(crate) cost: u64,
    /// Only looked at, whatever the stack's mode: a `count_status` rule's own bucket,
    /// charged once its response counts.
    pub(crate) peek: bool,
}

impl Draw {
    /// The store's request for this draw under `rule`, at `now`, in `mode`.
    fn request<'a>(
        &'a self,
        rule: &'a Rule,
        now: Timestamp,
        mode: CheckMode,
    ) -> Option<CheckRequest<'a>> {
        let mode = if self.peek && mode == CheckMode::Consume {
            CheckMode::Peek
        } else {
            mode
        };
        super::rule_request(rule, self.client.as_ref(), self.cost, now, mode)
    }
}

/// What an `also` limit keyed by a part reads it from: the request, or (front ends without
/// one) nothing, and the limit counts per client.
pub(crate) trait PartValues {
    /// The part's value as one segment (`-` when absent), or `None` without a request.
    fn value(&self, part: &KeyPart) -> Option<Cow<'_, str>>;

    /// What is known of the request's body, for estimates.
    fn body(&self) -> BodySeen<'_> {
        BodySeen::NoRequest
    }
}

/// No request to read parts from: `also` limits kept per part count per client.
pub(crate) struct NoParts;

impl PartValues for NoParts {
    fn value(&self, _: &KeyPart) -> Option<Cow<'_, str>> {
        None
    }
}

impl<B> PartValues for http::Request<B> {
    fn value(&self, part: &KeyPart) -> Option<Cow<'_, str>> {
        Some(crate::key::part_value(part, self))
    }

    fn body(&self) -> BodySeen<'_> {
        BodySeen::of(self)
    }
}

/// The draws of a request resolved to the rule at `index` of `rules`, by `client`: the
/// rule's own bucket (if it has a rate) and each `also` limit's, each at `cost` if the
/// caller gave one, else at its limit's estimate (for limits that estimate) or own cost.
pub(crate) fn draws(
    rules: &Active,
    index: usize,
    client: &Client<'_>,
    parts: &dyn PartValues,
    cost: Option<u64>,
) -> Vec<Draw> {
    let Some(rule) = rules.rule(index) else {
        return Vec::new();
    };
    let stack = rule.stack_indices();
    let mut draws = Vec::with_capacity(stack.len() + 1);
    if let Limit::Limited {
        quotas,
        per,
        cost: own,
        ..
    } = rule.limit()
        && !quotas.is_empty()
    {
        draws.push(Draw {
            index,
            client: (*per == Per::Client).then(|| client.clone().into_owned()),
            cost: cost
                .or_else(|| estimate(rules, index, rule, || parts.body()))
                .unwrap_or(*own),
            peek: false,
        });
    }
    for &at in stack.iter() {
        let Some(also) = rules.rule(at) else { continue };
        let bucket = match also.also().map(|a| a.by()) {
            Some(AlsoBy::Global) => None,
            Some(AlsoBy::Part(part)) => Some(match parts.value(part) {
                Some(value) => Client::Key(Cow::Owned(value.into_owned())),
                None => client.clone().into_owned(),
            }),
            Some(AlsoBy::Client) | None => Some(client.clone().into_owned()),
        };
        draws.push(Draw {
            index: at,
            client: bucket,
            cost: cost
                .or_else(|| estimate(rules, at, also, || parts.body()))
                .unwrap_or_else(|| also.cost()),
            peek: false,
        });
    }
    draws
}

impl<St: Store> Limits<St> {
    /// Decides `draws` together at `now` in `mode`, on the rule set `rules`: one decision,
    /// noting which limit spoke and which the headers list. In [`CheckMode::Consume`] all
    /// take their tokens or none does, and each limit's outcome is counted in its own
    /// metrics; the other modes apply to every draw (a charge or a refund reaches every
    /// limit the request was charged under). A shadow rule's draw is decided after the
    /// others (taking its tokens only if they admitted) and never refuses.
    pub(crate) fn decide_stack(
        &self,
        rules: Arc<Active>,
        draws: Vec<Draw>,
        mode: CheckMode,
        now: Timestamp,
    ) -> StackFuture {
        let limits = self.clone();
        Box::pin(async move {
            let mut decisions = limits.decide_groups(&rules, vec![draws], mode, now).await?;
            Ok(decisions.pop().unwrap_or_else(Decision::unlimited))
        })
    }

    /// Decides several requests' worth of draws — `groups`, one per key of a
    /// [`check_keys`](Self::check_keys) call — together: in [`CheckMode::Consume`] every
    /// enforced draw of every group takes its tokens or none does. A bucket two groups
    /// draw on (a global `also` limit both keys meet) is drawn on once. One decision per
    /// group, as [`decide_stack`](Self::decide_stack) makes it.
    pub(crate) async fn decide_groups(
        &self,
        rules: &Active,
        groups: Vec<Vec<Draw>>,
        mode: CheckMode,
        now: Timestamp,
    ) -> Result<Vec<Decision>, StoreError> {
        let is_shadow = |draw: &Draw| rules.rule(draw.index).is_some_and(Rule::is_shadow);
        // Every distinct bucket once, enforced ones together.
        let mut unique: Vec<&Draw> = Vec::with_capacity(groups.iter().map(Vec::len).sum());
        for draw in groups.iter().flatten() {
            // One request's draws are distinct already; several keys' may meet.
            if groups.len() == 1
                || !unique
                    .iter()
                    .any(|seen| seen.index == draw.index && seen.client == draw.client)
            {
                unique.push(draw);
            }
        }
        let (shadowed, enforced): (Vec<&Draw>, Vec<&Draw>) =
            unique.into_iter().partition(|draw| is_shadow(draw));
        let requests: Vec<(&Draw, CheckRequest<'_>)> = enforced
            .iter()
            .filter_map(|draw| Some((*draw, draw.request(rules.rule(draw.index)?, now, mode)?)))
            .collect();
        let store = &self.shared.store;
        let mut decided: Vec<(&Draw, Decision)> = Vec::with_capacity(requests.len());
        match requests.as_slice() {
            [] => {}
            [(draw, one)] => decided.push((draw, store.check(*one).await?)),
            _ => {
                let checks: Vec<CheckRequest<'_>> = requests.iter().map(|(_, r)| *r).collect();
                let answers = store.check_all(&checks).await?;
                decided.extend(requests.iter().map(|(draw, _)| *draw).zip(answers));
            }
        }
        let admitted = decided.iter().all(|(_, decision)| decision.allowed());
        let mut shadows = Vec::new();
        for draw in shadowed {
            let Some(rule) = rules.rule(draw.index) else {
                continue;
            };
            let shadow_mode = if mode == CheckMode::Consume && !admitted {
                CheckMode::Peek
            } else {
                mode
            };
            if let Some(request) = draw.request(rule, now, shadow_mode) {
                shadows.push((draw, store.check(request).await?));
            }
        }
        if mode == CheckMode::Consume {
            count_outcomes(rules, &decided, &shadows, now);
        }
        if groups.len() == 1 {
            // One request's limits (the layer's case): every decision is its own.
            return Ok(vec![combine(rules, &decided, &shadows)]);
        }
        fn of<'d>(group: &[Draw], all: &[(&'d Draw, Decision)]) -> Vec<(&'d Draw, Decision)> {
            all.iter()
                .filter(|(draw, _)| {
                    group
                        .iter()
                        .any(|mine| mine.index == draw.index && mine.client == draw.client)
                })
                .map(|(draw, decision)| (*draw, decision.clone()))
                .collect()
        }
        Ok(groups
            .iter()
            .map(|group| {
                let mine = of(group, &decided);
                let my_shadows = of(group, &shadows);
                combine(rules, &mine, &my_shadows)
            })
            .collect())
    }
}

/// One decision for the stack: the refusing limit that keeps the client waiting longest;
/// when every limit admits, the shown limit closest to refusing (the fewest tokens left for
/// its size). A stack of a shadow rule alone speaks as the shadow rule.
fn combine(
    rules: &Active,
    decided: &[(&Draw, Decision)],
    shadows: &[(&Draw, Decision)],
) -> Decision {
    let shown = |index: usize| {
        rules.rule(index).is_some_and(|rule| {
            !rule.is_shadow() && rule.also().is_none_or(|also| also.in_headers())
        })
    };
    let refusing = decided
        .iter()
        .filter(|(_, decision)| !decision.allowed())
        .max_by_key(|(_, decision)| decision.retry_after());
    let speaker = refusing
        .or_else(|| {
            decided
                .iter()
                .filter(|(draw, _)| shown(draw.index))
                .min_by(|(_, a), (_, b)| closeness(a).total_cmp(&closeness(b)))
        })
        .or(decided.first())
        .or(shadows.first());
    let Some((draw, decision)) = speaker else {
        return Decision::unlimited();
    };
    let note = StackNote {
        speaker: draw.index,
        speaker_shown: shown(draw.index),
        shown: decided
            .iter()
            .filter(|(draw, _)| shown(draw.index))
            .map(|(draw, decision)| (draw.index, decision.quota()))
            .collect(),
    };
    match rules.rule(draw.index) {
        Some(rule) => decided_by(decision.clone(), rule).with_stack(note),
        None => decision.clone().with_stack(note),
    }
}

/// How full a limit's bucket is, 0 (empty) to 1: the closer to 0, the closer to refusing.
fn closeness(decision: &Decision) -> f64 {
    let limit = decision.limit().max(1) as f64;
    decision.remaining() as f64 / limit
}

/// Counts a consuming decision in each limit's metrics: when every enforced limit
/// admitted, each counts it admitted; otherwise each limit that refused counts it refused
/// (the others took nothing, and count nothing). A shadow rule counts what it would have
/// done.
fn count_outcomes(
    rules: &Active,
    decided: &[(&Draw, Decision)],
    shadows: &[(&Draw, Decision)],
    now: Timestamp,
) {
    let admitted = decided.iter().all(|(_, decision)| decision.allowed());
    for (draw, decision) in decided {
        let Some(counters) = rules.counters(draw.index) else {
            continue;
        };
        if admitted {
            counters.admitted(now);
        } else if !decision.allowed() {
            counters.refused(now, draw.client.as_ref());
        }
    }
    for (draw, decision) in shadows {
        if let Some(counters) = rules.counters(draw.index) {
            if decision.allowed() {
                counters.admitted(now);
            } else {
                counters.shadow_refused(now);
            }
        }
    }
}
