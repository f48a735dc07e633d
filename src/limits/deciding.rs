//! A decision on its way: the store's own future for one bucket, or the boxed future of
//! several limits decided together ([`stack`](super::stack)); and [`DecisionFuture`], the
//! form [`Limits::check_request`](super::Limits::check_request) hands it out in.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::stack::StackFuture;
use crate::decision::Decision;
use crate::store::StoreError;

/// A decision on its way: one bucket's, as the store answers it, or several limits'
/// together (a rule and its `also` limits).
pub(crate) enum Deciding<F> {
    One(F),
    Stack(StackFuture),
}

impl<F> Future for Deciding<F>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Deciding::One(future) => Pin::new(future).poll(cx),
            Deciding::Stack(future) => future.as_mut().poll(cx),
        }
    }
}

/// The decision [`Limits::check_request`](super::Limits::check_request) started: await it, or, from a store that answers
/// at once (the in-memory one), take it with [`into_inner`](Self::into_inner).
#[must_use = "a decision does nothing until it is awaited or taken"]
pub struct DecisionFuture<F>(pub(super) Deciding<F>);

impl<F> std::fmt::Debug for DecisionFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Deciding::One(_) => "DecisionFuture(one limit)",
            Deciding::Stack(_) => "DecisionFuture(several limits)",
        })
    }
}

impl<F> Future for DecisionFuture<F>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.get_mut().0).poll(cx)
    }
}

impl<F> DecisionFuture<F>
where
    F: Future<Output = Result<Decision, StoreError>> + Unpin,
{
    /// The decision, from a store that has answered already (the in-memory store always
    /// has); a store still deciding (Redis) is an error: await the future instead.
    pub fn into_inner(mut self) -> Result<Decision, StoreError> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut self).poll(&mut cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(StoreError::Unavailable {
                reason: "the store has not answered yet: await the decision".into(),
            }),
        }
    }
}
