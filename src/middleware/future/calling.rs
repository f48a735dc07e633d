//! [`Calling`]: the inner service's call. When it answers, what the request owes is settled
//! from the response: the `also` limits' reservations, the rule's reservation (from a
//! header now, or from the body by an observer), a `count_status` charge; the headers
//! show what the charge left.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use super::carried::Answer;
use super::charging::Charging;
use crate::concurrency::{BodyObserver, Permit};
use crate::middleware::charge::{PendingCharge, Settle};
use crate::middleware::response::RateLimitHeaders;
use crate::middleware::settle;
use crate::store::Store;

pin_project! {
    /// The inner service's call, and what its response settles.
    pub(super) struct Calling<F, St> {
        #[pin]
        future: F,
        headers: Option<RateLimitHeaders>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    }
}

/// What the inner service's answer leads to.
pub(super) enum Called<R, E, St: Store> {
    /// The response, its headers added, with the slot or observer its body carries.
    Answered(Answer<R>),
    /// A charge or settlement still on its way before the response can go.
    Charging(Charging<R, St>),
    /// The inner service failed.
    Failed(E),
}

impl<F, St> Calling<F, St> {
    /// The call `future`, whose response gets `headers` once `charge` is settled.
    #[inline]
    pub(super) fn new(
        future: F,
        headers: Option<RateLimitHeaders>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        Calling {
            future,
            headers,
            charge,
            permit,
        }
    }
}

impl<F, St, ResBody, E> Calling<F, St>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    St: Store,
{
    /// The inner service's answer, settled as far as it can be at once. Inlined into the
    /// response future's poll: the answer is then built where it is used, not copied out.
    #[inline(always)]
    pub(super) fn poll_called(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Called<Response<ResBody>, E, St>> {
        let this = self.project();
        let mut response = match ready!(this.future.poll(cx)) {
            Ok(response) => response,
            Err(error) => {
                // A failure teaches an adaptive limit nothing, and frees the slot.
                if let Some(mut permit) = this.permit.take() {
                    permit.finished(false);
                }
                return Poll::Ready(Called::Failed(error));
            }
        };
        let mut permit = this.permit.take();
        if let Some(permit) = permit.as_mut() {
            permit.finished(!response.status().is_server_error());
        }
        let headers = this.headers.take();
        let charge = this.charge;
        // The `also` limits' own reservations, beside the rule's.
        if let Some(pending) = charge.as_mut()
            && !pending.charge.also.is_empty()
        {
            let also = std::mem::take(&mut pending.charge.also);
            let (limits, rules) = (&pending.limits, &pending.rules);
            for observer in settle::settle_also_from_head(limits, rules, also, &response) {
                observe(&mut permit, observer);
            }
        }
        if let Some(pending) = charge.take_if(|pending| pending.charge.reserved) {
            // A reservation: settled from the head now, or from the body later.
            match pending.settle_from_head(&response) {
                Settle::Now(pending, settling) => {
                    let charging = Charging::new(settling, response, pending, headers, permit);
                    return Poll::Ready(charge_now(charging, cx));
                }
                Settle::FromBody(observer) => observe(&mut permit, observer),
                Settle::Kept => {}
            }
        }
        if let Some(pending) = charge.take()
            && let Some(counting) = pending.start(response.status())
        {
            let charging = Charging::new(counting, response, pending, headers, permit);
            return Poll::Ready(charge_now(charging, cx));
        }
        if let Some(headers) = headers {
            headers.apply(response.headers_mut());
        }
        Poll::Ready(Called::Answered(Answer { response, permit }))
    }
}

/// Polls a charge once: the response if the store answered at once (the in-memory one),
/// else the state to wait for it in.
fn charge_now<ResBody, E, St: Store>(
    mut charging: Charging<Response<ResBody>, St>,
    cx: &mut Context<'_>,
) -> Called<Response<ResBody>, E, St> {
    match charging.poll_charged(cx) {
        Poll::Ready(Some(answer)) => Called::Answered(answer),
        Poll::Ready(None) | Poll::Pending => Called::Charging(charging),
    }
}

/// Hands `observer` the response's body: through the permit it travels with, or its own.
fn observe(permit: &mut Option<Box<Permit>>, observer: Box<dyn BodyObserver>) {
    match permit.as_mut() {
        Some(held) => held.observe(observer),
        None => *permit = Some(Box::new(Permit::observing(observer))),
    }
}
