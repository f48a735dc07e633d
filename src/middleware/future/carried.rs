//! [`Carried`]: a request that waits, for its decision, its turn or a slot, with the service
//! made ready for it and what it already owes. The one carrier every waiting state holds.

use http::Request;

use crate::concurrency::Permit;
use crate::middleware::charge::PendingCharge;
use crate::middleware::ready::Owned;

/// A request waiting with a service made ready for it, and what it owes once answered.
pub(crate) struct Carried<S, B, St> {
    pub(super) service: S,
    pub(super) request: Request<B>,
    /// A `count_status` charge or a reservation to settle from the response.
    pub(super) charge: Option<Box<PendingCharge<St>>>,
    /// The slot held under a concurrency cap, or an observer of the response's body.
    pub(super) permit: Option<Box<Permit>>,
}

impl<S, B, St> Carried<S, B, St> {
    /// A request with the service to call once it may go, owing `charge` and holding
    /// `permit`.
    pub(crate) fn new(
        service: S,
        request: Request<B>,
        charge: Option<Box<PendingCharge<St>>>,
        permit: Option<Box<Permit>>,
    ) -> Self {
        Carried {
            service,
            request,
            charge,
            permit,
        }
    }
}

/// A carried request's parts, for the state that calls its service: the service, the
/// request, its charge and its permit.
pub(super) type Parts<S, B, St> = (
    Owned<S>,
    Request<B>,
    Option<Box<PendingCharge<St>>>,
    Option<Box<Permit>>,
);

impl<S, B, St> Carried<S, B, St> {
    /// Its parts, to be called now.
    pub(super) fn into_parts(self) -> Parts<S, B, St> {
        (Owned(self.service), self.request, self.charge, self.permit)
    }
}

/// The inner service's response, and the slot or observer its body carries.
pub(super) struct Answer<R> {
    pub(super) response: R,
    pub(super) permit: Option<Box<Permit>>,
}
