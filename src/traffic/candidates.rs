//! What each candidate limit would have done: see [`CandidateTraffic`].

use std::hash::DefaultHasher;
use std::sync::Arc;
use std::time::Duration;

use cardinality_estimator::CardinalityEstimator;
use parking_lot::Mutex;
use serde::Serialize;

use super::{Heavy, Seen, TrafficRing, WindowedTop};
use crate::clock::{Timestamp, duration_nanos};
use crate::key::Client;

/// Counters kept per third of each window for the clients a candidate would refuse most.
pub(crate) const TOP_CAPACITY: usize = 32;

/// The windows a candidate is reported over.
pub(crate) const WINDOWS: [(&str, Duration); 3] = [
    ("15m", Duration::from_secs(900)),
    ("1h", Duration::from_secs(3_600)),
    ("1d", Duration::from_secs(86_400)),
];

/// HyperLogLog++ at precision 10: 1,024 six-bit registers once large (768 bytes), a few
/// words while small; about 3 % standard error.
type Distinct = CardinalityEstimator<Client<'static>, DefaultHasher, 10, 6>;

/// What each candidate limit would have done: per candidate, the requests its rule saw and
/// those it would have refused, per minute over a day ([`TrafficRing`]); and for each of
/// the last 15 minutes, hour and day, how many distinct clients it would have refused (a
/// HyperLogLog++ estimate per third of the window, within a few per cent) and which most
/// ([`WindowedTop`]). Memory is fixed per candidate whatever the traffic: a day's ring
/// (1,440 slots), and three windows of three thirds, each a sketch of at most
/// 32 clients and an estimator of at most a few kilobytes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::Timestamp;
/// use tollgate::key::Client;
/// use tollgate::traffic::Traffic;
///
/// let traffic = Traffic::new(Duration::from_secs(900), Duration::from_secs(5));
/// let now = Timestamp::from_unix_nanos(1_767_225_600_000_000_000);
/// let twenty = traffic.candidate("api", "20/min").unwrap();
/// twenty.decided(now, &Client::from_segment("203.0.113.7"), true);
/// twenty.decided(now, &Client::from_segment("203.0.113.7"), false);
/// let report = twenty.report(now, 5);
/// assert_eq!((report.windows[0].requests, report.windows[0].would_refuse), (2, 1));
/// assert_eq!(report.windows[0].clients, 1);
/// assert_eq!(report.windows[0].top[0].client, "203.0.113.7");
/// ```
pub struct CandidateTraffic {
    rule: Arc<str>,
    label: Arc<str>,
    /// Per minute over a day: `Admitted` for requests it would have let through,
    /// `Refused` for those it would have refused.
    ring: TrafficRing,
    windows: Mutex<[RefusedIn; 3]>,
    allowed: metrics::Counter,
    refused: metrics::Counter,
}

/// The clients refused within one window: which most, and how many.
struct RefusedIn {
    top: WindowedTop<Client<'static>>,
    distinct: WindowedDistinct,
}

/// A candidate over one window ([`CandidateReport::windows`]).
#[derive(Clone, Debug, Serialize)]
pub struct CandidateWindow {
    /// `15m`, `1h` or `1d`.
    pub window: &'static str,
    /// Its length in seconds.
    pub seconds: u64,
    /// Requests the rule saw (and the candidate decided) in it.
    pub requests: u64,
    /// Of them, those the candidate would have refused.
    pub would_refuse: u64,
    /// Distinct clients it would have refused (an estimate, within a few per cent).
    pub clients: u64,
    /// The clients it would have refused most (approximately: see [`Heavy`]).
    pub top: Vec<Heavy>,
}

/// What one candidate would have done ([`CandidateTraffic::report`]).
#[derive(Clone, Debug, Serialize)]
pub struct CandidateReport {
    /// The rule it stands beside.
    pub rule: String,
    /// Its rates as written.
    pub candidate: String,
    /// Over the last 15 minutes, hour and day (each give or take a third, for `clients`
    /// and `top`; per minute for the counts).
    pub windows: Vec<CandidateWindow>,
}

impl CandidateTraffic {
    pub(super) fn new(rule: Arc<str>, label: Arc<str>) -> CandidateTraffic {
        let window = |(_, length): (&str, Duration)| RefusedIn {
            top: WindowedTop::new(length, TOP_CAPACITY),
            distinct: WindowedDistinct::new(length),
        };
        CandidateTraffic {
            ring: TrafficRing::new(Duration::from_secs(86_400), Duration::from_secs(60)),
            windows: Mutex::new(WINDOWS.map(window)),
            allowed: metrics::counter!("tollgate_candidate_requests_total", "rule" => Arc::clone(&rule), "candidate" => Arc::clone(&label), "outcome" => "allowed"),
            refused: metrics::counter!("tollgate_candidate_requests_total", "rule" => Arc::clone(&rule), "candidate" => Arc::clone(&label), "outcome" => "refused"),
            rule,
            label,
        }
    }

    /// Counts one decision of the candidate at `now` for `client`: `allowed`, or what it
    /// would have refused.
    pub fn decided(&self, now: Timestamp, client: &Client<'_>, allowed: bool) {
        if allowed {
            self.allowed.increment(1);
            self.ring.record(now, Seen::Admitted);
            return;
        }
        self.refused.increment(1);
        self.ring.record(now, Seen::Refused);
        let client = client.clone().into_owned();
        let mut windows = self.windows.lock();
        for window in windows.iter_mut() {
            window.distinct.insert(now, &client);
            window.top.offer(now, client.clone());
        }
    }

    /// The rule the candidate stands beside.
    pub fn rule(&self) -> &str {
        &self.rule
    }

    /// The candidate's rates as written.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The candidate over each window ending at `now`, with up to `top` clients each.
    pub fn report(&self, now: Timestamp, top: usize) -> CandidateReport {
        let series = self.ring.series(now);
        let windows = self.windows.lock();
        let windows = WINDOWS
            .iter()
            .zip(windows.iter())
            .map(|(&(name, length), refused)| {
                let minutes = usize::try_from(length.as_secs() / 60).unwrap_or(usize::MAX);
                let recent = &series[series.len().saturating_sub(minutes)..];
                let (mut requests, mut would_refuse) = (0, 0);
                for slot in recent {
                    requests += slot.counts.admitted + slot.counts.refused;
                    would_refuse += slot.counts.refused;
                }
                CandidateWindow {
                    window: name,
                    seconds: length.as_secs(),
                    requests,
                    would_refuse,
                    clients: refused.distinct.estimate(now),
                    top: refused
                        .top
                        .top(now, top)
                        .into_iter()
                        .map(|heavy| heavy.named())
                        .collect(),
                }
            })
            .collect();
        CandidateReport {
            rule: self.rule.to_string(),
            candidate: self.label.to_string(),
            windows,
        }
    }
}

impl std::fmt::Debug for CandidateTraffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandidateTraffic")
            .field("rule", &self.rule)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Distinct clients over roughly the last window: an estimator per third, merged when
/// asked (as [`WindowedTop`] keeps its sketches).
struct WindowedDistinct {
    third: u64,
    /// Each estimator with the number of the third it counts (`u64::MAX`: none yet).
    thirds: [(u64, Distinct); 3],
}

impl WindowedDistinct {
    fn new(window: Duration) -> WindowedDistinct {
        WindowedDistinct {
            third: (duration_nanos(window) / 3).max(1),
            thirds: [
                (u64::MAX, Distinct::new()),
                (u64::MAX, Distinct::new()),
                (u64::MAX, Distinct::new()),
            ],
        }
    }

    fn insert(&mut self, now: Timestamp, client: &Client<'static>) {
        let number = now.as_unix_nanos() / self.third;
        let Some((held, estimator)) = self.thirds.get_mut((number % 3) as usize) else {
            return;
        };
        if *held != number {
            if *held != u64::MAX && *held > number {
                return; // older than the third this estimator now counts
            }
            *estimator = Distinct::new();
            *held = number;
        }
        estimator.insert(client);
    }

    fn estimate(&self, now: Timestamp) -> u64 {
        let current = now.as_unix_nanos() / self.third;
        let mut merged = Distinct::new();
        for (held, estimator) in &self.thirds {
            if *held == u64::MAX || *held > current || current - *held > 2 {
                continue;
            }
            merged.merge(estimator);
        }
        merged.estimate() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    #[test]
    fn each_window_counts_its_own_span_and_distinct_clients_are_estimated_closely() {
        let clock = FakeClock::new();
        let candidate = CandidateTraffic::new("api".into(), "20/min".into());
        // 5,000 distinct clients refused two hours ago, 300 in the last ten minutes.
        for i in 0..5_000 {
            candidate.decided(
                clock.now(),
                &Client::from_segment(&format!("old-{i}")),
                false,
            );
        }
        clock.advance(Duration::from_secs(110 * 60));
        for i in 0..300 {
            let name = format!("new-{i}");
            let client = Client::from_segment(&name);
            candidate.decided(clock.now(), &client, false);
            candidate.decided(clock.now(), &client, true);
        }
        let report = candidate.report(clock.now(), 3);
        let [quarter, hour, day] = &report.windows[..] else {
            panic!("three windows")
        };
        assert_eq!((quarter.requests, quarter.would_refuse), (600, 300));
        assert_eq!((hour.requests, hour.would_refuse), (600, 300));
        assert_eq!((day.requests, day.would_refuse), (5_600, 5_300));
        let near = |estimate: u64, truth: f64| (estimate as f64 - truth).abs() / truth < 0.1;
        assert!(near(quarter.clients, 300.0), "{}", quarter.clients);
        assert!(near(day.clients, 5_300.0), "{}", day.clients);
        assert!(quarter.top.len() <= 3);

        // A day later, nothing is left in any window.
        clock.advance(Duration::from_secs(2 * 86_400));
        let report = candidate.report(clock.now(), 3);
        assert!(
            report
                .windows
                .iter()
                .all(|w| w.requests == 0 && w.clients == 0 && w.top.is_empty())
        );
    }
}
