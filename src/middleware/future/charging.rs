//! [`Charging`]: a response waiting for its `count_status` charge or its settlement from a
//! header, so that its headers show what the charge left.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;

use super::carried::Answer;
use crate::concurrency::Permit;
use crate::middleware::charge::PendingCharge;
use crate::middleware::response::RateLimitHeaders;
use crate::store::Store;

/// A response held until the store has taken or settled what its request owes.
pub(super) struct Charging<R, St: Store> {
    charging: St::Future,
    response: Option<R>,
    pending: Option<Box<PendingCharge<St>>>,
    headers: Option<RateLimitHeaders>,
    permit: Option<Box<Permit>>,
}

impl<ResBody, St: Store> Charging<Response<ResBody>, St> {
    /// `response`, held while `charging` takes or settles what `pending` says.
    pub(super) fn new(
        charging: St::Future,
        response: Response<ResBody>,
        pending: Box<PendingCharge<St>>,
        headers: Option<RateLimitHeaders>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        Charging {
            charging,
            response: Some(response),
            pending: Some(pending),
            headers,
            permit,
        }
    }

    /// The response with its headers once the charge is made; `None` if polled again
    /// after that.
    pub(super) fn poll_charged(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Answer<Response<ResBody>>>> {
        let result = ready!(Pin::new(&mut self.charging).poll(cx));
        let (Some(mut response), Some(pending)) = (self.response.take(), self.pending.take())
        else {
            return Poll::Ready(None);
        };
        if let Some(headers) = pending.headers(result, self.headers.take()) {
            headers.apply(response.headers_mut());
        }
        Poll::Ready(Some(Answer {
            response,
            permit: self.permit.take(),
        }))
    }
}
