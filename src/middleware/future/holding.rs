//! [`Holding`]: a request admitted for later (`on_limit = "delay"`), held by a timer until
//! its turn. Dropped while held (the client went away), it never reaches the inner service
//! and gives nothing back: its place in the schedule was taken when it was decided.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use super::carried::Carried;
use crate::middleware::response::RateLimitHeaders;

/// A request held until its turn, and the headers its response will carry.
pub(super) struct Holding<S, B, St> {
    timer: Pin<Box<tokio::time::Sleep>>,
    held: Option<Box<Held<S, B, St>>>,
}

/// A request whose turn has come, and the headers its response will carry.
pub(super) struct Held<S, B, St> {
    pub(super) carried: Carried<S, B, St>,
    pub(super) headers: RateLimitHeaders,
}

impl<S, B, St> Holding<S, B, St> {
    /// Holds `carried` for `delay`.
    pub(super) fn new(
        delay: std::time::Duration,
        carried: Carried<S, B, St>,
        headers: RateLimitHeaders,
    ) -> Self {
        Holding {
            timer: Box::pin(tokio::time::sleep(delay)),
            held: Some(Box::new(Held { carried, headers })),
        }
    }

    /// The request and its headers once its turn comes; `None` if polled again after that.
    pub(super) fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<Option<Held<S, B, St>>> {
        ready!(self.timer.as_mut().poll(cx));
        Poll::Ready(self.held.take().map(|held| *held))
    }
}
