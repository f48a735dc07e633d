//! [`Permit`]: a slot, and for an adaptive limit what its request teaches the controller.

use std::sync::Arc;

use parking_lot::Mutex;

use super::adaptive::{Controller, Sample};
use super::slots::Slot;
use crate::clock::Clock;

/// A request's place under a concurrency cap: its [`Slot`], given back when the permit is
/// dropped, and — under an adaptive limit — the sample its response will be.
#[derive(Debug)]
pub struct Permit {
    slot: Slot,
    sampler: Option<Sampler>,
}

/// What an adaptive limit needs to learn from one request.
#[derive(Debug)]
pub(crate) struct Sampler {
    pub(crate) controller: Arc<Mutex<Controller>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) started: u64,
    pub(crate) limit_gauge: metrics::Gauge,
}

impl Permit {
    pub(crate) fn new(slot: Slot, sampler: Option<Sampler>) -> Permit {
        Permit { slot, sampler }
    }

    /// The response has arrived: whether it succeeded (not a 5xx) is the sample an
    /// adaptive limit learns from. Once; a permit dropped without it teaches nothing.
    pub fn finished(&mut self, ok: bool) {
        let Some(sampler) = self.sampler.take() else {
            return;
        };
        let now = sampler.clock.now().as_unix_nanos();
        let sample = Sample {
            started: sampler.started,
            finished: now,
            in_flight: self.slot.in_flight_at_start(),
            ok,
        };
        let mut controller = sampler.controller.lock();
        controller.record(sample, now);
        sampler.limit_gauge.set(f64::from(controller.limit()));
    }
}
