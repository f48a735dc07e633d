//! Exemplars for the decision-latency histogram: for each of its buckets, the last timed
//! decision made inside a sampled trace — its trace and span ids, its latency and when —
//! so a slow decision on a dashboard leads to its trace. Shown by `/metrics` in OpenMetrics
//! and sent with the OTLP metrics.
//!
//! The ids come from whoever knows the current trace (telemetry, once it starts, through
//! [`trace_with`]); until then the histogram records as before and keeps no exemplar.

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use parking_lot::Mutex;

use super::DECISION_BUCKETS;

/// A trace's and span's ids, as W3C trace context spells them in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceIds {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
}

/// One exemplar: a decision's latency, its trace, and when it was recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Exemplar {
    pub(crate) ids: TraceIds,
    pub(crate) value: f64,
    pub(crate) at: SystemTime,
}

/// Where the current trace's ids come from: `None` outside a sampled trace.
pub(crate) type CurrentTrace = fn() -> Option<TraceIds>;

static CURRENT_TRACE: OnceLock<CurrentTrace> = OnceLock::new();

/// One slot per bucket of `tollgate_decision_seconds`, the last `+Inf`.
static LATEST: [Mutex<Option<Exemplar>>; DECISION_BUCKETS.len() + 1] =
    [const { Mutex::new(None) }; DECISION_BUCKETS.len() + 1];

/// From now on, decisions timed inside a sampled trace keep an exemplar, the ids read by
/// `current` (once per process: later calls change nothing).
pub(crate) fn trace_with(current: CurrentTrace) {
    let _ = CURRENT_TRACE.set(current);
}

/// The exemplar of the bucket whose upper bound is `le` (`f64::INFINITY` for `+Inf`).
pub(crate) fn latest(le: f64) -> Option<Exemplar> {
    let index = DECISION_BUCKETS
        .iter()
        .position(|bound| *bound == le)
        .unwrap_or(DECISION_BUCKETS.len());
    if le.is_finite() && index == DECISION_BUCKETS.len() {
        return None;
    }
    *LATEST[index].lock()
}

/// The decision histogram's handle: records as the recorder's does, and keeps the value as
/// its bucket's exemplar when it was timed inside a sampled trace.
#[derive(Debug)]
pub(crate) struct WithExemplars(pub(crate) metrics::Histogram);

impl WithExemplars {
    /// `inner`, keeping exemplars.
    pub(crate) fn wrap(inner: metrics::Histogram) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(WithExemplars(inner)))
    }
}

impl metrics::HistogramFn for WithExemplars {
    fn record(&self, value: f64) {
        self.0.record(value);
        let Some(ids) = CURRENT_TRACE.get().and_then(|current| current()) else {
            return;
        };
        let index = DECISION_BUCKETS
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(DECISION_BUCKETS.len());
        *LATEST[index].lock() = Some(Exemplar {
            ids,
            value,
            at: SystemTime::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_in_a_sampled_trace_is_its_buckets_exemplar() {
        let histogram = WithExemplars::wrap(metrics::Histogram::noop());
        // No trace source yet: nothing kept.
        histogram.record(3e-7);
        assert_eq!(latest(5e-7), None);
        trace_with(|| {
            Some(TraceIds {
                trace_id: [7; 16],
                span_id: [9; 8],
            })
        });
        histogram.record(3e-7);
        histogram.record(5.0);
        let exemplar = latest(5e-7).expect("kept in the 500 ns bucket");
        assert_eq!(exemplar.ids.trace_id, [7; 16]);
        assert_eq!(exemplar.value, 3e-7);
        assert_eq!(latest(2.5e-7), None, "not in the bucket below");
        assert_eq!(latest(f64::INFINITY).map(|e| e.value), Some(5.0));
        assert_eq!(latest(0.123), None, "not a bound");
    }
}
