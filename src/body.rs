//! The response body of a rate-limited service: the inner body, or a denial's own.
//!
//! Under a concurrency cap the inner body holds the request's slot: it is given back when
//! the body has been sent to its end (or failed), or when the body is dropped unfinished —
//! the client went away mid-body.
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

use crate::concurrency::Permit;

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
            KindProj::Inner { body, permit } => {
                let frame = body.poll_frame(cx);
                // Sent to its end, or failed: the slot is free before the body is dropped.
                if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
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
