//! The shared concurrency leases this instance holds (state only; `inflight` makes the
//! calls): what the renewal task renews and a dropped lease leaves.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::Mutex;

/// The leases this instance holds, by slot-set key.
#[derive(Debug)]
pub(in crate::store::redis) struct HeldLeases {
    pub(in crate::store::redis) by_key: Mutex<HashMap<String, HashSet<String>>>,
    /// Whether the renewal task is running.
    pub(in crate::store::redis) renewing: AtomicBool,
    /// The next lease's number (ids are the instance's hybrid id and this).
    pub(in crate::store::redis) next: AtomicU64,
}

impl HeldLeases {
    pub(in crate::store::redis) fn new() -> HeldLeases {
        HeldLeases {
            by_key: Mutex::new(HashMap::new()),
            renewing: AtomicBool::new(false),
            next: AtomicU64::new(0),
        }
    }
}
