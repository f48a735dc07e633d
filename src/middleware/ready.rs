//! The service a decided request goes to: the layer's own, made ready and called in place,
//! or one already taken for a request that had to wait.

use http::Request;
use tower::Service;

/// The service a decided request goes to.
pub(crate) trait ReadyService<S: Service<Request<B>>, B> {
    /// Calls it with `request`.
    fn call(self, request: Request<B>) -> S::Future;
    /// Takes it away, for a request that must wait before it is called.
    fn take(self) -> S;
}

/// A service already taken for a request (one that waited for its decision or its turn).
pub(crate) struct Owned<S>(pub(crate) S);

impl<S: Service<Request<B>>, B> ReadyService<S, B> for Owned<S> {
    fn call(mut self, request: Request<B>) -> S::Future {
        self.0.call(request)
    }

    fn take(self) -> S {
        self.0
    }
}

/// The [`RateLimit`](crate::RateLimit)'s own inner service, made ready for this request:
/// called in place, and replaced by a fresh clone only when the request must wait (the
/// ready one goes with it, as tower's contract asks).
pub(crate) struct InPlace<'s, S>(pub(crate) &'s mut S);

impl<S: Service<Request<B>> + Clone, B> ReadyService<S, B> for InPlace<'_, S> {
    fn call(self, request: Request<B>) -> S::Future {
        self.0.call(request)
    }

    fn take(self) -> S {
        let fresh = self.0.clone();
        std::mem::replace(self.0, fresh)
    }
}
