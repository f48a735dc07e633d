//! [`AwaitingSlot`]: a request waiting for a slot under a concurrency cap
//! (`on_limit = "delay"`, or a slot asked of a shared store), at most `max_delay`; refused
//! if none comes, as if the cap had been full. With its slot, its rate is checked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use super::carried::Carried;
use super::deciding::AwaitingDecision;
use crate::key::Client;
use crate::limits::{Active, Admission, Limits, QueuedPermit, Slot};
use crate::middleware::charge::PendingCharge;
use crate::middleware::response::{busy, refusal_for};
use crate::middleware::trace::DecisionSpan;
use crate::store::Store;

/// A place in a concurrency queue, how long it may be kept, and the request it is for.
pub(super) struct AwaitingSlot<S, B, St> {
    waiting: Pin<Box<Waiting>>,
    queued: Option<Box<Queued<S, B, St>>>,
}

pin_project! {
    /// A place in a concurrency queue, and how long it may be kept.
    struct Waiting {
        permit: QueuedPermit,
        #[pin]
        timer: tokio::time::Sleep,
    }
}

/// The request, and what decides its rate once it has a slot.
struct Queued<S, B, St> {
    carried: Carried<S, B, St>,
    limits: Limits<St>,
    rules: Arc<Active>,
    index: usize,
}

/// What becomes of a request once its wait for a slot ends.
pub(super) enum AfterSlot<S, B, St: Store> {
    /// No slot came in time (or the rate check after it refused): this refusal.
    Refused(Response<Bytes>),
    /// It has a slot; its rate is being decided.
    Deciding(AwaitingDecision<S, B, St>),
    /// It has a slot and no rate to check: call the inner service.
    Calling(Carried<S, B, St>),
}

impl<S, B, St: Store> AwaitingSlot<S, B, St> {
    /// Waits for `permit` at most `max_wait`, then checks the rate of the rule at `index`.
    pub(super) fn new(
        permit: QueuedPermit,
        max_wait: std::time::Duration,
        carried: Carried<S, B, St>,
        limits: Limits<St>,
        (rules, index): (Arc<Active>, usize),
    ) -> Self {
        AwaitingSlot {
            waiting: Box::pin(Waiting {
                permit,
                timer: tokio::time::sleep(max_wait),
            }),
            queued: Some(Box::new(Queued {
                carried,
                limits,
                rules,
                index,
            })),
        }
    }

    /// What becomes of the request once its wait ends; `None` if polled again after that.
    pub(super) fn poll_slot(&mut self, cx: &mut Context<'_>) -> Poll<Option<AfterSlot<S, B, St>>> {
        let waiting = self.waiting.as_mut().project();
        let permit = match Pin::new(waiting.permit).poll(cx) {
            Poll::Ready(permit) => permit,
            Poll::Pending => {
                ready!(waiting.timer.poll(cx));
                None
            }
        };
        let Some(queued) = self.queued.take() else {
            return Poll::Ready(None);
        };
        let Queued {
            mut carried,
            limits,
            rules,
            index,
        } = *queued;
        let Some(permit) = permit else {
            // No slot within max_delay: refused, as if the cap had been full.
            if let Some(counters) = rules.counters(index) {
                let client = Client::identify(&carried.request, rules.client_settings());
                counters.refused_for_concurrency(limits.now(), Some(&client));
            }
            let refusal = refusal_for(busy(rules.response()), &carried.request);
            return Poll::Ready(Some(AfterSlot::Refused(refusal)));
        };
        let after = match limits.admit(&rules, &carried.request, Slot::Waited { index, permit }) {
            Admission::Check {
                decision,
                charge,
                permit,
                now,
                ..
            } => {
                carried.charge = PendingCharge::boxed(&limits, &rules, index, charge);
                carried.permit = permit;
                let span = DecisionSpan::start(limits.store().kind());
                let rules = (rules, index);
                AfterSlot::Deciding(AwaitingDecision::new(decision, carried, rules, now, span))
            }
            Admission::Pass(permit) => {
                carried.permit = permit;
                AfterSlot::Calling(carried)
            }
            // A rate check after a slot never asks for another slot.
            Admission::Busy | Admission::Queue { .. } | Admission::Unauthorized(_) => {
                AfterSlot::Refused(refusal_for(busy(rules.response()), &carried.request))
            }
        };
        Poll::Ready(Some(after))
    }
}
