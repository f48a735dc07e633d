//! [`ResponseFuture`]: the inner call, a ready-made denial, (for remote stores) a decision
//! still on its way, or (`on_limit = "delay"`) a request held until its turn. Nothing is
//! boxed on the common paths; a `count_status` request carries a boxed charge to settle
//! once its response shows whether it counts, and a held request a boxed timer.
//!
//! A held request costs a timer, not a thread. Dropped while held (the client went away),
//! it never reaches the inner service, and gives nothing back: its place in the schedule
//! was taken when it was decided, as nginx's `limit_req` accounts a delayed request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use crate::body::ResponseBody;
use crate::config::RuleSet;
use crate::limits::{Charge, Limits};
use crate::outcome::Outcome;
use crate::response::RateLimitHeaders;
use crate::store::{Store, StoreError};

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit).
    pub struct ResponseFuture<S, St, B>
    where
        S: Service<Request<B>>,
        St: Store,
    {
        #[pin]
        state: State<S, St, B>,
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
            decision: St::Future,
            // Boxed: only remote stores park a request, and the in-memory path should not
            // carry (and copy) a whole request's worth of space in every future.
            parked: Option<Box<Parked<S, B, St>>>,
        },
        Calling {
            #[pin]
            future: S::Future,
            headers: Option<RateLimitHeaders>,
            charge: Option<Box<PendingCharge<St>>>,
        },
        Charging {
            charging: St::Future,
            response: Option<S::Response>,
            pending: Option<Box<PendingCharge<St>>>,
            headers: Option<RateLimitHeaders>,
        },
        Rejected {
            response: Option<Response<Bytes>>,
        },
        Holding {
            timer: Pin<Box<tokio::time::Sleep>>,
            held: Option<Box<Held<S, B, St>>>,
        },
    }
}

/// A request admitted for later (`on_limit = "delay"`), with a service made ready for it.
struct Held<S, B, St> {
    service: S,
    request: Request<B>,
    headers: RateLimitHeaders,
    charge: Option<Box<PendingCharge<St>>>,
}

/// A request waiting for its decision, with a service already made ready for it.
struct Parked<S, B, St> {
    service: S,
    request: Request<B>,
    rules: Arc<RuleSet>,
    index: usize,
    charge: Option<Box<PendingCharge<St>>>,
}

/// What a `count_status` request owes if its response counts.
pub(crate) struct PendingCharge<St> {
    pub(crate) limits: Limits<St>,
    pub(crate) rules: Arc<RuleSet>,
    pub(crate) index: usize,
    pub(crate) charge: Charge,
}

impl<St: Store> PendingCharge<St> {
    /// Starts the charge if `status` is one the rule counts.
    fn start(&self, status: http::StatusCode) -> Option<St::Future> {
        let rule = self.rules.rule(self.index)?;
        if !rule.count_status()?.contains(status) {
            return None;
        }
        self.limits.charge(rule, &self.charge)
    }

    /// The headers after the charge: they show what the charge left.
    fn headers(
        &self,
        result: Result<crate::Decision, StoreError>,
        before: Option<RateLimitHeaders>,
    ) -> Option<RateLimitHeaders> {
        let rule = self.rules.rule(self.index)?;
        match result {
            Ok(_) if rule.is_shadow() => None,
            Ok(decision) => Some(RateLimitHeaders::new(
                rule,
                &decision,
                self.rules.response().headers,
            )),
            Err(error) => {
                tracing::warn!(rule = rule.name(), %error, "rate-limit store failed to charge a counted response");
                before
            }
        }
    }
}

impl<S, St, B> ResponseFuture<S, St, B>
where
    S: Service<Request<B>>,
    St: Store,
{
    pub(crate) fn call(
        future: S::Future,
        headers: Option<RateLimitHeaders>,
        charge: Option<Box<PendingCharge<St>>>,
    ) -> Self {
        ResponseFuture {
            state: State::Calling {
                future,
                headers,
                charge,
            },
        }
    }

    /// Holds `request` for `delay`, then calls the ready `service` with it.
    pub(crate) fn holding(
        delay: std::time::Duration,
        service: S,
        request: Request<B>,
        headers: RateLimitHeaders,
        charge: Option<Box<PendingCharge<St>>>,
    ) -> Self {
        ResponseFuture {
            state: State::Holding {
                timer: Box::pin(tokio::time::sleep(delay)),
                held: Some(Box::new(Held {
                    service,
                    request,
                    headers,
                    charge,
                })),
            },
        }
    }

    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Rejected {
                response: Some(response),
            },
        }
    }

    pub(crate) fn deciding(
        decision: St::Future,
        service: S,
        request: Request<B>,
        rules: Arc<RuleSet>,
        index: usize,
        charge: Option<Box<PendingCharge<St>>>,
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
                })),
            },
        }
    }
}

impl<S, St, B, ResBody> Future for ResponseFuture<S, St, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    St: Store,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Deciding { decision, parked } => {
                    let result = ready!(Pin::new(decision).poll(cx));
                    // Polled again after completing: a contract violation; stay pending.
                    let Some(parked) = parked.take() else {
                        return Poll::Pending;
                    };
                    let Parked {
                        mut service,
                        request,
                        rules,
                        index,
                        charge,
                    } = *parked;
                    let outcome = match rules.rule(index) {
                        Some(rule) => Outcome::new(result, rule, &rules),
                        None => Outcome::Admit(None),
                    };
                    match outcome {
                        Outcome::Admit(headers) => state.set(State::Calling {
                            future: service.call(request),
                            headers,
                            charge,
                        }),
                        Outcome::Hold(delay, headers) => state.set(State::Holding {
                            timer: Box::pin(tokio::time::sleep(delay)),
                            held: Some(Box::new(Held {
                                service,
                                request,
                                headers,
                                charge,
                            })),
                        }),
                        Outcome::Reject(response) => {
                            return Poll::Ready(Ok(response.map(ResponseBody::rejection)));
                        }
                    }
                }
                StateProj::Holding { timer, held } => {
                    ready!(timer.as_mut().poll(cx));
                    let Some(held) = held.take() else {
                        return Poll::Pending;
                    };
                    let Held {
                        mut service,
                        request,
                        headers,
                        charge,
                    } = *held;
                    state.set(State::Calling {
                        future: service.call(request),
                        headers: Some(headers),
                        charge,
                    });
                }
                StateProj::Calling {
                    future,
                    headers,
                    charge,
                } => {
                    let mut response = ready!(future.poll(cx))?;
                    let mut headers = headers.take();
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
                                });
                                continue;
                            }
                        }
                    }
                    if let Some(headers) = headers {
                        headers.apply(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Charging {
                    charging,
                    response,
                    pending,
                    headers,
                } => {
                    let result = ready!(Pin::new(charging).poll(cx));
                    let (Some(mut response), Some(pending)) = (response.take(), pending.take())
                    else {
                        return Poll::Pending;
                    };
                    if let Some(headers) = pending.headers(result, headers.take()) {
                        headers.apply(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Rejected { response } => {
                    return match response.take() {
                        Some(response) => Poll::Ready(Ok(response.map(ResponseBody::rejection))),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}
