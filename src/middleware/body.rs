//! The response body of a rate-limited service: the inner body, or a denial's own.
//!
//! Under a concurrency cap the inner body holds the request's slot: it is given back when
//! the body has been sent to its end (or failed), or when the body is dropped unfinished —
//! the client went away mid-body.
//!
//! Which type the layer's responses carry is a [`BodyStyle`]: [`Wrapped`] (the default)
//! works for any body and answers with [`ResponseBody`]; [`AxumBody`] keeps axum's own
//! `Body`, so axum does not box the response body a second time (what a wrapper costs
//! every response: an allocation and a virtual call per frame) and only a response holding
//! a concurrency slot is wrapped.
//!
//! ```
//! use bytes::Bytes;
//! use http_body::Body as _;
//! use tollgate::body::ResponseBody;
//!
//! let body: ResponseBody<http_body_util::Empty<Bytes>> = ResponseBody::rejection(Bytes::from("no"));
//! assert_eq!(body.size_hint().exact(), Some(2));
//! ```

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pub use super::upgrade::UpgradeSlot;
use crate::concurrency::Permit;

/// How the responses of a [`RateLimit`](crate::RateLimit) service carry their bodies: the
/// inner service's body when a request was admitted, a ready-made one when it was refused.
///
/// Chosen on the layer: [`RateLimitLayer::new`](crate::RateLimitLayer::new) gives
/// [`Wrapped`]; [`RateLimitLayer::axum_body`](crate::RateLimitLayer::axum_body) gives
/// [`AxumBody`]. Implement it for a body type of your own to keep that type too.
///
/// ```
/// use bytes::Bytes;
/// use http_body::Body as _;
/// use tollgate::body::{BodyStyle, ResponseBody, Wrapped};
///
/// let refused: ResponseBody<String> = <Wrapped as BodyStyle<String>>::refused(Bytes::from("no"));
/// assert_eq!(refused.size_hint().exact(), Some(2));
/// ```
pub trait BodyStyle<B> {
    /// The body of every response.
    type Body;

    /// The inner service's body. With a `permit` (a concurrency slot), the body must hold
    /// it until the body has ended, failed or been dropped.
    fn admitted(body: B, permit: Option<Box<Permit>>) -> Self::Body;

    /// The body of a refusal the limiter made.
    fn refused(body: Bytes) -> Self::Body;
}

/// Any body, wrapped in [`ResponseBody`]: the default [`BodyStyle`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Wrapped;

impl<B> BodyStyle<B> for Wrapped {
    type Body = ResponseBody<B>;

    fn admitted(body: B, permit: Option<Box<Permit>>) -> ResponseBody<B> {
        ResponseBody::holding(body, permit)
    }

    fn refused(body: Bytes) -> ResponseBody<B> {
        ResponseBody::rejection(body)
    }
}

/// axum's `Body`, kept: the [`BodyStyle`] of
/// [`RateLimitLayer::axum_body`](crate::RateLimitLayer::axum_body). An admitted response's
/// body passes through untouched unless it holds a concurrency slot (then it is wrapped, as
/// axum would have wrapped it anyway).
///
/// ```
/// use bytes::Bytes;
/// use http_body::Body as _;
/// use tollgate::body::{AxumBody, BodyStyle};
///
/// let refused: axum::body::Body = <AxumBody as BodyStyle<axum::body::Body>>::refused(Bytes::from("no"));
/// assert_eq!(refused.size_hint().exact(), Some(2));
/// ```
#[cfg(feature = "axum")]
#[derive(Clone, Copy, Debug, Default)]
pub struct AxumBody;

#[cfg(feature = "axum")]
impl BodyStyle<axum::body::Body> for AxumBody {
    type Body = axum::body::Body;

    fn admitted(body: axum::body::Body, permit: Option<Box<Permit>>) -> axum::body::Body {
        match permit {
            None => body,
            permit => axum::body::Body::new(ResponseBody::holding(body, permit)),
        }
    }

    fn refused(body: Bytes) -> axum::body::Body {
        axum::body::Body::from(body)
    }
}

pin_project! {
    /// Either the inner service's body, untouched, or the body of a denial.
    #[project = BodyProj]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B, permit: Option<Box<Permit>> },
        Rejection { body: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps the inner service's body.
    pub fn inner(body: B) -> Self {
        ResponseBody {
            kind: Kind::Inner { body, permit: None },
        }
    }

    /// Wraps the inner service's body, holding `permit` until the body is done.
    pub(crate) fn holding(body: B, permit: Option<Box<Permit>>) -> Self {
        ResponseBody {
            kind: Kind::Inner { body, permit },
        }
    }

    /// A complete body made by the limiter.
    pub fn rejection(body: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Rejection { body: Some(body) },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { mut body, permit } => {
                let frame = body.as_mut().poll_frame(cx);
                // Trailers are a body's last frame: hyper sends them and drops the body
                // without polling it again, as it does a body that says it has ended.
                let last = match &frame {
                    Poll::Ready(Some(Ok(frame))) => frame.is_trailers() || body.is_end_stream(),
                    _ => false,
                };
                match (&frame, permit.as_mut()) {
                    (Poll::Ready(Some(Ok(frame))), Some(held)) if held.observes() => {
                        held.frame(frame);
                        if last {
                            held.body_ended();
                        }
                    }
                    (Poll::Ready(None), Some(held)) => held.body_ended(),
                    _ => {}
                }
                // Sent to its end, or failed: the slot is free before the body is dropped.
                if last || matches!(frame, Poll::Ready(None | Some(Err(_)))) {
                    *permit = None;
                }
                frame
            }
            KindProj::Rejection { body } => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Rejection { body } => body.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Rejection { body } => {
                SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
