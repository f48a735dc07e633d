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
    /// What reads the response body on its way out (a cost to settle from it).
    observer: Option<Box<dyn BodyObserver>>,
}

/// Something that reads a response body as it is sent: its data and trailers, and whether
/// it reached its end. Dropped without [`end`](Self::end) when the body failed or the
/// client went away mid-body.
pub(crate) trait BodyObserver: Send + Sync + std::fmt::Debug {
    /// A data frame.
    fn data(&mut self, bytes: &[u8]);
    /// The trailers.
    fn trailers(&mut self, trailers: &http::HeaderMap);
    /// The body was sent to its end.
    fn end(self: Box<Self>);
}

/// Several observers of one body (a reservation of the rule's and of its `also` limits').
#[derive(Debug)]
struct Fanout(Vec<Box<dyn BodyObserver>>);

impl BodyObserver for Fanout {
    fn data(&mut self, bytes: &[u8]) {
        for observer in &mut self.0 {
            observer.data(bytes);
        }
    }

    fn trailers(&mut self, trailers: &http::HeaderMap) {
        for observer in &mut self.0 {
            observer.trailers(trailers);
        }
    }

    fn end(self: Box<Self>) {
        for observer in self.0 {
            observer.end();
        }
    }
}

/// Where the slot is.
#[derive(Debug)]
enum Held {
    /// In this process's in-flight table.
    Local(Slot),
    /// In a store shared with other instances (a Redis lease).
    Shared(Shared),
    /// No slot: the permit only carries an observer of the body.
    Nothing,
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
            observer: None,
        }
    }

    /// A permit holding no slot, only `observer` of the response body.
    pub(crate) fn observing(observer: Box<dyn BodyObserver>) -> Permit {
        Permit {
            held: Held::Nothing,
            sampler: None,
            observer: Some(observer),
        }
    }

    /// Has `observer` read the response body too (beside any observer it has).
    pub(crate) fn observe(&mut self, observer: Box<dyn BodyObserver>) {
        self.observer = Some(match self.observer.take() {
            None => observer,
            Some(first) => Box::new(Fanout(vec![first, observer])),
        });
    }

    /// Whether something reads the body.
    pub(crate) fn observes(&self) -> bool {
        self.observer.is_some()
    }

    /// A frame of the body, for the observer.
    pub(crate) fn frame(&mut self, frame: &http_body::Frame<bytes::Bytes>) {
        if let Some(observer) = self.observer.as_mut() {
            if let Some(data) = frame.data_ref() {
                observer.data(data);
            } else if let Some(trailers) = frame.trailers_ref() {
                observer.trailers(trailers);
            }
        }
    }

    /// The body reached its end: the observer is told.
    pub(crate) fn body_ended(&mut self) {
        if let Some(observer) = self.observer.take() {
            observer.end();
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
            observer: None,
        }
    }

    /// Requests in flight in the bucket when the slot was taken, this one included.
    pub fn in_flight_at_start(&self) -> u32 {
        match &self.held {
            Held::Local(slot) => slot.in_flight_at_start(),
            Held::Shared(shared) => shared.in_flight,
            Held::Nothing => 0,
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
