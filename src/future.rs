//! [`ResponseFuture`]: the inner call, a ready-made denial, or (for remote stores) a
//! decision still on its way. Nothing is boxed.

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
use crate::response::RateLimitHeaders;
use crate::service::Outcome;
use crate::store::Store;

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
            parked: Option<Parked<S, B>>,
        },
        Calling {
            #[pin]
            future: S::Future,
            headers: Option<RateLimitHeaders>,
        },
        Rejected {
            response: Option<Response<Bytes>>,
        },
    }
}

/// A request waiting for its decision, with a service already made ready for it.
struct Parked<S, B> {
    service: S,
    request: Request<B>,
    rules: Arc<RuleSet>,
    index: usize,
}

impl<S, St, B> ResponseFuture<S, St, B>
where
    S: Service<Request<B>>,
    St: Store,
{
    pub(crate) fn call(future: S::Future, headers: Option<RateLimitHeaders>) -> Self {
        ResponseFuture {
            state: State::Calling { future, headers },
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
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                decision,
                parked: Some(Parked {
                    service,
                    request,
                    rules,
                    index,
                }),
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
                    let Some(Parked {
                        mut service,
                        request,
                        rules,
                        index,
                    }) = parked.take()
                    else {
                        return Poll::Pending;
                    };
                    let outcome = match rules.rule(index) {
                        Some(rule) => Outcome::new(result, rule, &rules),
                        None => Outcome::Admit(None),
                    };
                    match outcome {
                        Outcome::Admit(headers) => state.set(State::Calling {
                            future: service.call(request),
                            headers,
                        }),
                        Outcome::Reject(response) => {
                            return Poll::Ready(Ok(response.map(ResponseBody::rejection)));
                        }
                    }
                }
                StateProj::Calling { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(headers) = headers.take() {
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
