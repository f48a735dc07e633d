//! [`ResponseFuture`]: the inner call, a ready-made refusal, (for remote stores) a decision
//! still on its way, (`on_limit = "delay"`) a request held until its turn or waiting for a
//! slot under a concurrency cap. Each state is a small future of its own, in its own file;
//! the enum here only delegates, and moves to the state the last one's output names.
//!
//! Nothing is boxed on the common paths; a `count_status` request carries a boxed charge to
//! settle once its response shows whether it counts, and a held request a boxed timer. A
//! held request costs a timer, not a thread.

mod calling;
mod carried;
mod charging;
mod deciding;
mod holding;
mod queued;

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use self::calling::{Called, Calling};
use self::carried::Answer;
pub(crate) use self::carried::Carried;
use self::charging::Charging;
use self::deciding::{AwaitingDecision, Decided};
use self::holding::{Held, Holding};
use self::queued::{AfterSlot, AwaitingSlot};
use super::body::{BodyStyle, Wrapped};
use super::charge::PendingCharge;
use super::outcome::Outcome;
use super::ready::ReadyService;
use super::response::{RateLimitHeaders, refusal_for};
use super::trace::DecisionSpan;
use super::upgrade::hand_to_upgrade;
use crate::clock::Timestamp;
use crate::concurrency::Permit;
use crate::limits::{Active, Deciding, Limits, QueuedPermit};
use crate::store::Store;

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit).
    pub struct ResponseFuture<S, St, B, K = Wrapped>
    where
        S: Service<Request<B>>,
        St: Store,
    {
        #[pin]
        state: State<S, St, B>,
        // The body style: a type, never a value (`fn` keeps the future `Send` and `Sync`).
        style: PhantomData<fn() -> K>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, St, B>
    where
        S: Service<Request<B>>,
        St: Store,
    {
        Deciding { deciding: AwaitingDecision<S, B, St> },
        Calling { #[pin] calling: Calling<S::Future, St> },
        Charging { charging: Charging<S::Response, St> },
        Rejected { response: Option<Response<Bytes>> },
        Holding { holding: Holding<S, B, St> },
        Queued { queued: AwaitingSlot<S, B, St> },
    }
}

impl<S, St, B, K> ResponseFuture<S, St, B, K>
where
    S: Service<Request<B>>,
    St: Store,
{
    fn new(state: State<S, St, B>) -> Self {
        ResponseFuture {
            state,
            style: PhantomData,
        }
    }

    /// Waits for a slot (at most `max_wait`), then decides the rate and calls the service.
    pub(crate) fn queued(
        permit: QueuedPermit,
        max_wait: std::time::Duration,
        carried: Carried<S, B, St>,
        limits: Limits<St>,
        rule: (Arc<Active>, usize),
    ) -> Self {
        let queued = AwaitingSlot::new(permit, max_wait, carried, limits, rule);
        Self::new(State::Queued { queued })
    }

    /// The future for a decided request: the one place an [`Outcome`] becomes a state,
    /// whether the decision was ready at once (in `call`) or arrived later.
    #[inline]
    pub(crate) fn settled(
        outcome: Outcome,
        service: impl ReadyService<S, B>,
        request: Request<B>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        Self::new(match outcome {
            Outcome::Admit(headers) => State::calling(service, request, headers, charge, permit),
            Outcome::Hold(delay, headers) => {
                let carried = Carried::new(service.take(), request, charge, permit);
                State::Holding {
                    holding: Holding::new(delay, carried, headers),
                }
            }
            Outcome::Reject(response) => State::Rejected {
                response: Some(refusal_for(response, &request)),
            },
        })
    }

    /// A refusal made before the inner service is asked.
    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        Self::new(State::Rejected {
            response: Some(response),
        })
    }

    /// Waits for `decision` on the rule at `rule`, asked for at `now`, then acts on it.
    pub(crate) fn deciding(
        decision: Deciding<St::Future>,
        carried: Carried<S, B, St>,
        rule: (Arc<Active>, usize),
        now: Timestamp,
        span: DecisionSpan,
    ) -> Self {
        let deciding = AwaitingDecision::new(decision, carried, rule, now, span);
        Self::new(State::Deciding { deciding })
    }
}

impl<S, St, B> State<S, St, B>
where
    S: Service<Request<B>>,
    St: Store,
{
    /// Calls the ready `service` with `request` now: the one place a decided request is
    /// passed on (and where an adaptive limit starts measuring the upstream).
    #[inline]
    fn calling(
        service: impl ReadyService<S, B>,
        request: Request<B>,
        headers: Option<RateLimitHeaders>,
        charge: Option<Box<PendingCharge<St>>>,
        mut permit: Option<Box<Permit>>,
    ) -> Self {
        if let Some(permit) = permit.as_mut() {
            permit.begin();
        }
        let future = service.call(request);
        State::Calling {
            calling: Calling::new(future, headers, charge, permit),
        }
    }

    /// Calls a request that waited, with the service it carried.
    fn call_carried(carried: Carried<S, B, St>, headers: Option<RateLimitHeaders>) -> Self {
        let (service, request, charge, permit) = carried.into_parts();
        Self::calling(service, request, headers, charge, permit)
    }
}

impl<S, St, B, K, ResBody> Future for ResponseFuture<S, St, B, K>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    St: Store,
    K: BodyStyle<ResBody>,
{
    type Output = Result<Response<K::Body>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        // Each state's own future runs; its output names the next state, or the answer.
        // A state polled again after it completed (a contract violation) stays pending.
        loop {
            let next = match state.as_mut().project() {
                StateProj::Calling { calling } => match calling.poll_called(cx) {
                    Poll::Ready(Called::Answered(answer)) => {
                        return Poll::Ready(Ok(admitted::<K, _>(answer)));
                    }
                    Poll::Ready(Called::Charging(charging)) => State::Charging { charging },
                    Poll::Ready(Called::Failed(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => return Poll::Pending,
                },
                StateProj::Deciding { deciding } => match deciding.poll_outcome(cx) {
                    Poll::Ready(Some(Decided { outcome, carried })) => {
                        let (service, request, charge, permit) = carried.into_parts();
                        Self::settled(outcome, service, request, charge, permit).state
                    }
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                },
                StateProj::Charging { charging } => match charging.poll_charged(cx) {
                    Poll::Ready(Some(answer)) => return Poll::Ready(Ok(admitted::<K, _>(answer))),
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                },
                StateProj::Holding { holding } => match holding.poll_turn(cx) {
                    Poll::Ready(Some(Held { carried, headers })) => {
                        State::call_carried(carried, Some(headers))
                    }
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                },
                StateProj::Queued { queued } => match queued.poll_slot(cx) {
                    Poll::Ready(Some(AfterSlot::Refused(response))) => {
                        return Poll::Ready(Ok(response.map(K::refused)));
                    }
                    Poll::Ready(Some(AfterSlot::Deciding(deciding))) => {
                        State::Deciding { deciding }
                    }
                    Poll::Ready(Some(AfterSlot::Calling(carried))) => {
                        State::call_carried(carried, None)
                    }
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                },
                StateProj::Rejected { response } => {
                    return match response.take() {
                        Some(response) => Poll::Ready(Ok(response.map(K::refused))),
                        None => Poll::Pending,
                    };
                }
            };
            state.set(next);
        }
    }
}

/// An admitted response in the body style `K`, its body carrying the slot or observer
/// (handed to the upgraded connection instead, for a protocol switch).
#[inline]
fn admitted<K: BodyStyle<ResBody>, ResBody>(
    answer: Answer<Response<ResBody>>,
) -> Response<K::Body> {
    let Answer {
        mut response,
        permit,
    } = answer;
    let permit = hand_to_upgrade(&mut response, permit);
    response.map(|body| K::admitted(body, permit))
}
