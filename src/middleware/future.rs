//! [`ResponseFuture`]: the inner call, a ready-made denial, (for remote stores) a decision
//! still on its way, or (`on_limit = "delay"`) a request held until its turn. Nothing is
//! boxed on the common paths; a `count_status` request carries a boxed charge to settle
//! once its response shows whether it counts, and a held request a boxed timer.
//!
//! A request waiting for a slot under a concurrency cap (`on_limit = "delay"`) waits the
//! same way, at most `max_delay`, and is refused if none comes.
//!
//! A held request costs a timer, not a thread. Dropped while held (the client went away),
//! it never reaches the inner service, and gives nothing back: its place in the schedule
//! was taken when it was decided, as nginx's `limit_req` accounts a delayed request.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use super::body::{BodyStyle, Wrapped};
use super::charge::{PendingCharge, Settle};
use super::outcome::Outcome;
use super::ready::{Owned, ReadyService};
use super::response::{RateLimitHeaders, busy, refusal_for};
use super::settle;
use super::trace::DecisionSpan;
use super::upgrade::hand_to_upgrade;
use crate::clock::Timestamp;
use crate::concurrency::Permit;
use crate::key::Client;
use crate::limits::{Active, Admission, Deciding, Limits, QueuedPermit};
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
        Deciding {
            decision: Deciding<St::Future>,
            // Boxed: only remote stores park a request, and the in-memory path should not
            // carry (and copy) a whole request's worth of space in every future.
            parked: Option<Box<Parked<S, B, St>>>,
        },
        Calling {
            #[pin]
            future: S::Future,
            headers: Option<RateLimitHeaders>,
            charge: Option<Box<PendingCharge<St>>>,
            permit: Option<Box<Permit>>,
        },
        Charging {
            charging: St::Future,
            response: Option<S::Response>,
            pending: Option<Box<PendingCharge<St>>>,
            headers: Option<RateLimitHeaders>,
            permit: Option<Box<Permit>>,
        },
        Rejected {
            response: Option<Response<Bytes>>,
        },
        Holding {
            timer: Pin<Box<tokio::time::Sleep>>,
            held: Option<Box<Held<S, B, St>>>,
        },
        Queued {
            waiting: Pin<Box<Waiting>>,
            queued: Option<Box<QueuedRequest<S, B, St>>>,
        },
    }
}

pin_project! {
    /// A place in a concurrency queue, and how long it may be kept.
    pub(crate) struct Waiting {
        permit: QueuedPermit,
        #[pin]
        timer: tokio::time::Sleep,
    }
}

/// A request waiting for a slot, with a service made ready for it.
pub(crate) struct QueuedRequest<S, B, St> {
    service: S,
    request: Request<B>,
    limits: Limits<St>,
    rules: Arc<Active>,
    index: usize,
}

/// A request admitted for later (`on_limit = "delay"`), with a service made ready for it.
struct Held<S, B, St> {
    service: S,
    request: Request<B>,
    headers: RateLimitHeaders,
    charge: Option<Box<PendingCharge<St>>>,
    permit: Option<Box<Permit>>,
}

/// A request waiting for its decision, with a service already made ready for it.
struct Parked<S, B, St> {
    service: S,
    request: Request<B>,
    rules: Arc<Active>,
    index: usize,
    charge: Option<Box<PendingCharge<St>>>,
    permit: Option<Box<Permit>>,
    /// When the decision was asked for.
    now: Timestamp,
    /// The decision's span, open until the store answers.
    span: DecisionSpan,
}

impl<S, St, B, K> ResponseFuture<S, St, B, K>
where
    S: Service<Request<B>>,
    St: Store,
{
    pub(crate) fn call(
        future: S::Future,
        headers: Option<RateLimitHeaders>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        ResponseFuture {
            state: State::Calling {
                future,
                headers,
                charge,
                permit,
            },
            style: PhantomData,
        }
    }

    /// Waits for a slot (at most `max_wait`), then decides the rate and calls `service`.
    pub(crate) fn queued(
        permit: QueuedPermit,
        max_wait: std::time::Duration,
        service: S,
        request: Request<B>,
        limits: Limits<St>,
        rules: Arc<Active>,
        index: usize,
    ) -> Self {
        ResponseFuture {
            state: State::Queued {
                waiting: Box::pin(Waiting {
                    permit,
                    timer: tokio::time::sleep(max_wait),
                }),
                queued: Some(Box::new(QueuedRequest {
                    service,
                    request,
                    limits,
                    rules,
                    index,
                })),
            },
            style: PhantomData,
        }
    }

    /// The future for a decided request: the one place an [`Outcome`] becomes a state,
    /// whether the decision was ready at once (in `call`) or arrived later (here).
    pub(crate) fn settled(
        outcome: Outcome,
        service: impl ReadyService<S, B>,
        request: Request<B>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        match outcome {
            Outcome::Admit(headers) => Self::calling(service, request, headers, charge, permit),
            Outcome::Hold(delay, headers) => {
                Self::holding(delay, service.take(), request, headers, charge, permit)
            }
            Outcome::Reject(response) => Self::rejected(refusal_for(response, &request)),
        }
    }

    /// Calls the ready `service` with `request` now: the one place a decided request is
    /// passed on (and where an adaptive limit starts measuring the upstream).
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
        Self::call(service.call(request), headers, charge, permit)
    }

    /// Holds `request` for `delay`, then calls the ready `service` with it.
    pub(crate) fn holding(
        delay: std::time::Duration,
        service: S,
        request: Request<B>,
        headers: RateLimitHeaders,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        ResponseFuture {
            state: State::Holding {
                timer: Box::pin(tokio::time::sleep(delay)),
                held: Some(Box::new(Held {
                    service,
                    request,
                    headers,
                    charge,
                    permit,
                })),
            },
            style: PhantomData,
        }
    }

    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Rejected {
                response: Some(response),
            },
            style: PhantomData,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn deciding(
        decision: Deciding<St::Future>,
        service: S,
        request: Request<B>,
        rules: Arc<Active>,
        index: usize,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
        now: Timestamp,
        span: DecisionSpan,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                decision,
                parked: Some(Box::new(Parked {
                    service,
                    request,
                    rules,
                    index,
                    charge,
                    permit,
                    now,
                    span,
                })),
            },
            style: PhantomData,
        }
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
        loop {
            match state.as_mut().project() {
                StateProj::Deciding { decision, parked } => {
                    // Polled in the decision's span, which ends (as tracing-opentelemetry
                    // times it) when last left: at the store's answer.
                    let poll = match parked.as_ref() {
                        Some(parked) => parked.span.in_scope(|| Pin::new(decision).poll(cx)),
                        None => Pin::new(decision).poll(cx),
                    };
                    let result = ready!(poll);
                    // Polled again after completing: a contract violation; stay pending.
                    let Some(parked) = parked.take() else {
                        return Poll::Pending;
                    };
                    let Parked {
                        service,
                        request,
                        rules,
                        index,
                        charge,
                        permit,
                        now,
                        span,
                    } = *parked;
                    // The client is found again (it borrows the request): a remote
                    // decision's round trip dwarfs it.
                    let client = Client::identify(&request, rules.client_settings());
                    let outcome = Outcome::decided(result, &rules, index, now, &client, &span);
                    drop((client, span));
                    let settled = Self::settled(outcome, Owned(service), request, charge, permit);
                    state.set(settled.state);
                }
                StateProj::Holding { timer, held } => {
                    ready!(timer.as_mut().poll(cx));
                    let Some(held) = held.take() else {
                        return Poll::Pending;
                    };
                    let Held {
                        service,
                        request,
                        headers,
                        charge,
                        permit,
                    } = *held;
                    let calling =
                        Self::calling(Owned(service), request, Some(headers), charge, permit);
                    state.set(calling.state);
                }
                StateProj::Queued { waiting, queued } => {
                    let waiting = waiting.as_mut().project();
                    let permit = match Pin::new(waiting.permit).poll(cx) {
                        Poll::Ready(permit) => permit,
                        Poll::Pending => {
                            ready!(waiting.timer.poll(cx));
                            None
                        }
                    };
                    let Some(queued) = queued.take() else {
                        return Poll::Pending;
                    };
                    let QueuedRequest {
                        service,
                        request,
                        limits,
                        rules,
                        index,
                    } = *queued;
                    let Some(permit) = permit else {
                        // No slot within max_delay: refused, as if the cap had been full.
                        if let Some(counters) = rules.counters(index) {
                            let client = Client::identify(&request, rules.client_settings());
                            counters.refused_for_concurrency(limits.now(), Some(&client));
                        }
                        let response = refusal_for(busy(rules.response()), &request);
                        return Poll::Ready(Ok(response.map(K::refused)));
                    };
                    match limits.admit_after_slot(&rules, index, &request, permit) {
                        Admission::Check {
                            decision,
                            charge,
                            permit,
                            now,
                            ..
                        } => {
                            let charge = PendingCharge::boxed(&limits, &rules, index, charge);
                            let span = DecisionSpan::start(limits.store().kind());
                            state.set(
                                Self::deciding(
                                    decision, service, request, rules, index, charge, permit, now,
                                    span,
                                )
                                .state,
                            );
                        }
                        Admission::Pass(permit) => {
                            let calling =
                                Self::calling(Owned(service), request, None, None, permit);
                            state.set(calling.state);
                        }
                        // A rate check after a slot never asks for another slot.
                        Admission::Busy | Admission::Queue { .. } | Admission::Unauthorized(_) => {
                            let response = refusal_for(busy(rules.response()), &request);
                            return Poll::Ready(Ok(response.map(K::refused)));
                        }
                    }
                }
                StateProj::Calling {
                    future,
                    headers,
                    charge,
                    permit,
                } => {
                    let mut response = match ready!(future.poll(cx)) {
                        Ok(response) => response,
                        Err(error) => {
                            // A failure teaches an adaptive limit nothing, and frees the slot.
                            if let Some(mut permit) = permit.take() {
                                permit.finished(false);
                            }
                            return Poll::Ready(Err(error));
                        }
                    };
                    let mut permit = permit.take();
                    if let Some(permit) = permit.as_mut() {
                        permit.finished(!response.status().is_server_error());
                    }
                    let mut headers = headers.take();
                    // The `also` limits' own reservations, beside the rule's.
                    if let Some(pending) = charge.as_mut()
                        && !pending.charge.also.is_empty()
                    {
                        let also = std::mem::take(&mut pending.charge.also);
                        let (limits, rules) = (&pending.limits, &pending.rules);
                        for observer in
                            settle::settle_also_from_head(limits, rules, also, &response)
                        {
                            match permit.as_mut() {
                                Some(held) => held.observe(observer),
                                None => permit = Some(Box::new(Permit::observing(observer))),
                            }
                        }
                    }
                    if let Some(pending) = charge.take_if(|pending| pending.charge.reserved) {
                        // A reservation: settled from the head now, or from the body later.
                        match pending.settle_from_head(&response) {
                            Settle::Now(pending, mut settling) => {
                                match Pin::new(&mut settling).poll(cx) {
                                    Poll::Ready(result) => {
                                        headers = pending.headers(result, headers);
                                    }
                                    Poll::Pending => {
                                        state.set(State::Charging {
                                            charging: settling,
                                            response: Some(response),
                                            pending: Some(pending),
                                            headers,
                                            permit,
                                        });
                                        continue;
                                    }
                                }
                            }
                            Settle::FromBody(observer) => match permit.as_mut() {
                                Some(held) => held.observe(observer),
                                None => permit = Some(Box::new(Permit::observing(observer))),
                            },
                            Settle::Kept => {}
                        }
                    }
                    if let Some(pending) = charge.take()
                        && let Some(mut charging) = pending.start(response.status())
                    {
                        match Pin::new(&mut charging).poll(cx) {
                            Poll::Ready(result) => headers = pending.headers(result, headers),
                            Poll::Pending => {
                                state.set(State::Charging {
                                    charging,
                                    response: Some(response),
                                    pending: Some(pending),
                                    headers,
                                    permit,
                                });
                                continue;
                            }
                        }
                    }
                    if let Some(headers) = headers {
                        headers.apply(response.headers_mut());
                    }
                    let permit = hand_to_upgrade(&mut response, permit);
                    return Poll::Ready(Ok(response.map(|body| K::admitted(body, permit))));
                }
                StateProj::Charging {
                    charging,
                    response,
                    pending,
                    headers,
                    permit,
                } => {
                    let result = ready!(Pin::new(charging).poll(cx));
                    let (Some(mut response), Some(pending)) = (response.take(), pending.take())
                    else {
                        return Poll::Pending;
                    };
                    if let Some(headers) = pending.headers(result, headers.take()) {
                        headers.apply(response.headers_mut());
                    }
                    let permit = hand_to_upgrade(&mut response, permit.take());
                    return Poll::Ready(Ok(response.map(|body| K::admitted(body, permit))));
                }
                StateProj::Rejected { response } => {
                    return match response.take() {
                        Some(response) => Poll::Ready(Ok(response.map(K::refused))),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}
