//! Without the `insight` feature no traffic history is kept: [`Traffic`] holds nothing and
//! no rule gets a [`RuleTraffic`], so a rule's counters feed the metrics alone.

use std::sync::Arc;
use std::time::Duration;

use super::seen::Seen;
use crate::clock::Timestamp;
use crate::key::Client;

/// No history: see the module docs.
pub(crate) struct Traffic;

/// A rule's history, of which there is none (no value of this type exists).
pub(crate) enum RuleTraffic {}

impl Traffic {
    pub(crate) const DEFAULT_SPAN: Duration = Duration::from_secs(900);
    pub(crate) const DEFAULT_RESOLUTION: Duration = Duration::from_secs(5);

    /// No history to keep.
    pub(crate) fn new(span: Duration, resolution: Duration) -> Traffic {
        let _ = (span, resolution);
        Traffic
    }

    /// No rule's history.
    pub(crate) fn rule(&self, name: &str) -> Option<Arc<RuleTraffic>> {
        let _ = name;
        None
    }
}

impl RuleTraffic {
    pub(crate) fn record(&self, _now: Timestamp, _seen: Seen) {
        match *self {}
    }

    pub(crate) fn refused(&self, _now: Timestamp, _client: &Client<'_>) {
        match *self {}
    }

    pub(crate) fn settled(&self, _reserved: u64, _used: u64) {
        match *self {}
    }

    pub(crate) fn usage(&self, _input: u64, _cached: u64, _output: u64) {
        match *self {}
    }

    pub(crate) fn counts_money(&self, _currency: char, _unit_micros: u64) {
        match *self {}
    }
}
