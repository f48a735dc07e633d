//! Who is asking, verified: a request's token checked once, as the layer does, and a key
//! set fetched again when tokens name a `kid` it lacks (at most every [`KEY_REFETCH`]).

use http::Request;

use super::Limits;
use crate::key::{Invalid, Verified};
use crate::store::Store;

/// The shortest time between two fetches of a key set asked for by unknown `kid`s.
pub(crate) const KEY_REFETCH: std::time::Duration = std::time::Duration::from_secs(30);

impl<St: Store> Limits<St> {
    /// Verifies `request`'s token as the layer does (`[identity.jwt]`) and keeps what was
    /// found in its extensions, for [`check_request`](Limits::check_request) and `jwt:`
    /// key parts; nothing without `[identity.jwt]`.
    pub fn verify_identity<B>(&self, request: &mut Request<B>) {
        let rules = self.active();
        if let Some(verifier) = &rules.client_settings().jwt {
            let verified = verifier.verify(request);
            if verifier.refreshes() && verified == Verified::Invalid(Invalid::UnknownSigningKey) {
                self.unknown_signing_key();
            }
            request.extensions_mut().insert(verified);
        }
    }

    /// A token named a `kid` the fetched key set lacks: its keys may have rotated, so the
    /// URLs are fetched now — at most once every [`KEY_REFETCH`] whatever tokens arrive.
    pub(crate) fn unknown_signing_key(&self) {
        use std::sync::atomic::Ordering;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let last = self.shared.keys_fetched.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= KEY_REFETCH.as_secs()
            && self
                .shared
                .keys_fetched
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.shared.reloader.poll_now();
        }
    }
}
