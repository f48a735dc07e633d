//! Connections that outlive their response: a `101 Switching Protocols` answer (a
//! WebSocket) ends its HTTP body at once, but the connection it opens is the request's
//! work. A service relaying that connection puts an [`UpgradeSlot`] in the 101 response's
//! extensions; the layer hands it the request's concurrency slot instead of giving the slot
//! back when the empty body ends, and the slot is given back when the last clone of the
//! `UpgradeSlot` is dropped — when the relay ends, however it ends.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::concurrency::Permit;

/// Holds an upgraded connection's concurrency slot (see the module docs).
///
/// ```
/// use tollgate::body::UpgradeSlot;
///
/// let slot = UpgradeSlot::new();
/// let mut response = http::Response::builder().status(101).body(()).unwrap();
/// response.extensions_mut().insert(slot.clone());
/// // ... the relay task keeps `slot` until the connection closes; the layer fills it.
/// assert!(!slot.holds());
/// ```
#[derive(Clone, Debug, Default)]
pub struct UpgradeSlot(Arc<Mutex<Option<Box<Permit>>>>);

impl UpgradeSlot {
    /// An empty slot holder.
    pub fn new() -> UpgradeSlot {
        UpgradeSlot::default()
    }

    /// Whether it holds a slot (the request was under a concurrency cap).
    pub fn holds(&self) -> bool {
        self.0.lock().is_some()
    }

    /// Gives the slot back now.
    pub fn release(&self) {
        self.0.lock().take();
    }
}

/// Hands `permit` to the [`UpgradeSlot`] of a 101 `response`, if it has one; what is left
/// for the body to hold.
pub(crate) fn hand_to_upgrade<B>(
    response: &mut http::Response<B>,
    permit: Option<Box<Permit>>,
) -> Option<Box<Permit>> {
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return permit;
    }
    match (permit, response.extensions_mut().remove::<UpgradeSlot>()) {
        (Some(permit), Some(slot)) => {
            *slot.0.lock() = Some(permit);
            None
        }
        (permit, _) => permit,
    }
}
