//! [`AwaitingDecision`]: a request parked while a remote store decides, polled in the
//! decision's span; its output is the [`Outcome`] and the request to act on it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use super::carried::Carried;
use crate::clock::Timestamp;
use crate::key::Client;
use crate::limits::{Active, Deciding};
use crate::middleware::outcome::Outcome;
use crate::middleware::trace::DecisionSpan;
use crate::store::Store;

/// A decision on its way, and the request it is for.
pub(super) struct AwaitingDecision<S, B, St: Store> {
    decision: Deciding<St::Future>,
    // Boxed: only remote stores park a request, and the in-memory path should not carry
    // (and copy) a whole request's worth of space in every future.
    parked: Option<Box<Parked<S, B, St>>>,
}

/// The decision's outcome, and the request to act on it.
pub(super) struct Decided<S, B, St> {
    pub(super) outcome: Outcome,
    pub(super) carried: Carried<S, B, St>,
}

/// What the decision is for, and what its outcome is counted under.
struct Parked<S, B, St> {
    carried: Carried<S, B, St>,
    rules: Arc<Active>,
    index: usize,
    /// When the decision was asked for.
    now: Timestamp,
    /// The decision's span, open until the store answers.
    span: DecisionSpan,
}

impl<S, B, St: Store> AwaitingDecision<S, B, St> {
    /// Waits for `decision` on the rule at `index` of `rules`, asked for at `now`.
    pub(super) fn new(
        decision: Deciding<St::Future>,
        carried: Carried<S, B, St>,
        (rules, index): (Arc<Active>, usize),
        now: Timestamp,
        span: DecisionSpan,
    ) -> Self {
        AwaitingDecision {
            decision,
            parked: Some(Box::new(Parked {
                carried,
                rules,
                index,
                now,
                span,
            })),
        }
    }

    /// The outcome once the store answers; `None` if polled again after that.
    pub(super) fn poll_outcome(&mut self, cx: &mut Context<'_>) -> Poll<Option<Decided<S, B, St>>> {
        // Polled in the decision's span, which ends (as tracing-opentelemetry times it)
        // when last left: at the store's answer.
        let decision = Pin::new(&mut self.decision);
        let poll = match self.parked.as_ref() {
            Some(parked) => parked.span.in_scope(|| decision.poll(cx)),
            None => decision.poll(cx),
        };
        let result = ready!(poll);
        let Some(parked) = self.parked.take() else {
            return Poll::Ready(None);
        };
        let Parked {
            carried,
            rules,
            index,
            now,
            span,
        } = *parked;
        // The client is found again (it borrows the request): a remote decision's round
        // trip dwarfs it.
        let client = Client::identify(&carried.request, rules.client_settings());
        let outcome = Outcome::decided(result, &rules, index, now, &client, &span);
        Poll::Ready(Some(Decided { outcome, carried }))
    }
}
