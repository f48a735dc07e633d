//! Without the `insight` feature nothing is measured beside a decision: no rule has
//! candidates or `suggest` (the config refuses them), so there is nothing to tune.

use super::{Active, Limits};
use crate::clock::Timestamp;
use crate::key::Client;
use crate::store::{CheckMode, Store};

impl<St: Store> Limits<St> {
    /// Nothing to measure: see the module docs.
    #[inline(always)]
    pub(crate) fn tune(
        &self,
        _rules: &Active,
        _index: usize,
        _client: &Client<'_>,
        _how: (CheckMode, Option<u64>),
        _now: Timestamp,
        _counted: bool,
    ) {
    }
}
