//! [`Permit`]: a slot, and for an adaptive limit what its request teaches the controller.

use std::sync::Arc;

use parking_lot::Mutex;

use super::adaptive::{Controller, Sample};
use super::slots::Slot;
use crate::clock::Clock;

/// A request's place under a concurrency cap: its [`Slot`] (or a slot shared through the
/// store), given back when the permit is dropped, and — under an adaptive limit — the sample
/// its response will be.
#[derive(Debug)]
pub struct Permit {
    held: Held,
    sampler: Option<Sampler>,
}

/// Where the slot is.
#[derive(Debug)]
enum Held {
    /// In this process's in-flight table.
    Local(Slot),
    /// In a store shared with other instances (a Redis lease).
    Shared(Shared),
}

/// A shared slot's guard, and this instance's gauge of requests in flight.
struct Shared {
    _guard: Box<dyn std::any::Any + Send + Sync>,
    in_flight: u32,
    gauge: metrics::Gauge,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
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
        Permit {
            held: Held::Local(slot),
            sampler,
        }
    }

    /// A slot held in a shared store: released when `guard` is dropped.
    pub(crate) fn shared(
        guard: Box<dyn std::any::Any + Send + Sync>,
        in_flight: u32,
        gauge: metrics::Gauge,
    ) -> Permit {
        gauge.increment(1.0);
        Permit {
            held: Held::Shared(Shared {
                _guard: guard,
                in_flight,
                gauge,
            }),
            sampler: None,
        }
    }

    /// Requests in flight in the bucket when the slot was taken, this one included.
    pub fn in_flight_at_start(&self) -> u32 {
        match &self.held {
            Held::Local(slot) => slot.in_flight_at_start(),
            Held::Shared(shared) => shared.in_flight,
        }
    }

    /// The request is passed on to the service now: an adaptive limit measures the
    /// upstream's latency from here, not the time a rate's delay held the request.
    pub fn begin(&mut self) {
        if let Some(sampler) = self.sampler.as_mut() {
            sampler.started = sampler.clock.now().as_unix_nanos();
        }
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
            in_flight: self.in_flight_at_start(),
            ok,
        };
        let mut controller = sampler.controller.lock();
        controller.record(sample, now);
        sampler.limit_gauge.set(f64::from(controller.limit()));
    }
}
