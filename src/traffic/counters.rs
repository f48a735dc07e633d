//! What is counted for each rule as requests are decided: its Prometheus metrics (through
//! the `metrics` facade) and its traffic over time ([`Traffic`]). Runtime state, owned by
//! the limiter that enforces the rule; the rule itself stays plain data.

use std::fmt;
use std::sync::Arc;

use super::{RuleTraffic, Seen, Traffic};
use crate::clock::Timestamp;
use crate::key::Client;

/// Why a response's figure could not be believed: the `reason` of
/// `tollgate_settle_faults_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Negative,
    AboveMax,
    NotANumber,
    NotAWholeNumber,
    MalformedJson,
    BodyOverBound,
    /// A usage object without its input or output count, or counting more cached tokens
    /// than input.
    IncompleteUsage,
    /// A request body an estimate could not be read from (not JSON, too large, broken,
    /// or not read at all): the rule's `max` was reserved.
    UnreadableRequest,
    /// A money rule's response (or estimate) for a model `[prices]` has no price for.
    NoPrice,
}

impl Fault {
    /// Every fault, so a reserving rule's counters exist (at 0) before the first one.
    pub(crate) const ALL: [Fault; 9] = [
        Fault::Negative,
        Fault::AboveMax,
        Fault::NotANumber,
        Fault::NotAWholeNumber,
        Fault::MalformedJson,
        Fault::BodyOverBound,
        Fault::IncompleteUsage,
        Fault::UnreadableRequest,
        Fault::NoPrice,
    ];

    /// The metric's label and the log's words.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Fault::Negative => "negative",
            Fault::AboveMax => "above max",
            Fault::NotANumber => "not a number",
            Fault::NotAWholeNumber => "not a whole number",
            Fault::MalformedJson => "malformed JSON",
            Fault::BodyOverBound => "body larger than the bound read",
            Fault::IncompleteUsage => "incomplete usage",
            Fault::UnreadableRequest => "unreadable request body",
            Fault::NoPrice => "model without a price",
        }
    }
}

/// Handles to one rule's request counters, made once when its rule set is swapped in so
/// that counting a request is an atomic add (no label strings built per request). They bind
/// to the `metrics` recorder installed at that moment; without one they are no-ops.
#[derive(Clone)]
pub(crate) struct RuleCounters {
    allowed: metrics::Counter,
    limited: metrics::Counter,
    shadow_limited: metrics::Counter,
    /// `on_limit = "delay"`: requests held, and for how long.
    delayed: metrics::Counter,
    delay: metrics::Histogram,
    /// Rules with a `concurrency` cap only.
    pub(crate) concurrency: Option<ConcurrencyCounters>,
    /// Rules that reserve and settle (`cost = { reserve, from }`) only.
    pub(crate) settle: Option<SettleCounters>,
    /// The rule's traffic over time, for the admin page (`None` past the rules tracked).
    traffic: Option<Arc<RuleTraffic>>,
}

/// Counting an outcome: the rule's metrics, and its traffic over time.
impl RuleCounters {
    /// A request admitted at `now`.
    pub(crate) fn admitted(&self, now: Timestamp) {
        self.allowed.increment(1);
        self.seen(now, Seen::Admitted);
    }

    /// A request admitted at `now` and held `delay` first.
    pub(crate) fn held(&self, now: Timestamp, delay: std::time::Duration) {
        self.admitted(now);
        self.delayed.increment(1);
        self.delay.record(delay.as_secs_f64());
        self.seen(now, Seen::Delayed);
    }

    /// A request admitted at `now` (and counted so already) held `delay` first.
    pub(crate) fn delayed(&self, now: Timestamp, delay: std::time::Duration) {
        self.delayed.increment(1);
        self.delay.record(delay.as_secs_f64());
        self.seen(now, Seen::Delayed);
    }

    /// A request a shadow rule would have refused at `now` (it passed).
    pub(crate) fn shadow_refused(&self, now: Timestamp) {
        self.shadow_limited.increment(1);
        self.seen(now, Seen::ShadowRefused);
    }

    /// A request refused at `now`; `client`, when known, joins the rule's most refused.
    pub(crate) fn refused(&self, now: Timestamp, client: Option<&Client<'_>>) {
        self.limited.increment(1);
        let Some(traffic) = &self.traffic else {
            return;
        };
        match client {
            Some(client) => traffic.refused(now, client),
            None => traffic.record(now, Seen::Refused),
        }
    }

    /// A request refused by the rule's concurrency cap at `now`: refused, and refused for
    /// concurrency.
    pub(crate) fn refused_for_concurrency(&self, now: Timestamp, client: Option<&Client<'_>>) {
        self.refused(now, client);
        if let Some(concurrency) = &self.concurrency {
            concurrency.refused.increment(1);
        }
    }

    /// A reservation settled: `reserved` at admission, `used` in the end.
    pub(crate) fn settled(&self, reserved: u64, used: u64) {
        if let Some(traffic) = &self.traffic {
            traffic.settled(reserved, used);
        }
    }

    /// A response's usage, by kind (input, cached, output): counted in the metrics and
    /// the rule's traffic.
    pub(crate) fn usage(&self, usage: [u64; 3]) {
        if let Some(kinds) = self.settle.as_ref().and_then(|s| s.usage.as_ref()) {
            for (counter, n) in kinds.iter().zip(usage) {
                counter.increment(n);
            }
        }
        if let Some(traffic) = &self.traffic {
            traffic.usage(usage[0], usage[1], usage[2]);
        }
    }

    /// The rule counts money: `unit_micros` millionths of `currency` a token.
    pub(crate) fn counts_money(&self, currency: char, unit_micros: u64) {
        if let Some(traffic) = &self.traffic {
            traffic.counts_money(currency, unit_micros);
        }
    }

    fn seen(&self, now: Timestamp, seen: Seen) {
        if let Some(traffic) = &self.traffic {
            traffic.record(now, seen);
        }
    }
}

/// What a reserving rule settles from: one figure, or token usage by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reserves {
    Figure,
    Usage,
}

/// A concurrency cap's metrics: in flight now, the cap, and requests it refused.
#[derive(Clone)]
pub(crate) struct ConcurrencyCounters {
    pub(crate) in_flight: metrics::Gauge,
    pub(crate) limit: metrics::Gauge,
    pub(crate) refused: metrics::Counter,
}

/// A reserving rule's settlements: by outcome, the tokens used, and the faults by reason —
/// every series made when the rule is swapped in, so each exists at 0 before its first
/// event (a dashboard's `increase()` cannot see a series' first sample).
#[derive(Clone)]
pub(crate) struct SettleCounters {
    pub(crate) refunded: metrics::Counter,
    pub(crate) exact: metrics::Counter,
    pub(crate) charged: metrics::Counter,
    pub(crate) kept: metrics::Counter,
    pub(crate) tokens: metrics::Counter,
    /// Input, cached and output tokens of `from = "usage"` rules (`None` for others).
    pub(crate) usage: Option<[metrics::Counter; 3]>,
    /// In the order of [`Fault::ALL`].
    faults: [metrics::Counter; Fault::ALL.len()],
}

impl SettleCounters {
    fn new(name: &Arc<str>, usage: bool) -> SettleCounters {
        let outcome = |outcome: &'static str| metrics::counter!("tollgate_settled_total", "rule" => Arc::clone(name), "outcome" => outcome);
        SettleCounters {
            refunded: outcome("refunded"),
            exact: outcome("exact"),
            charged: outcome("charged"),
            kept: outcome("kept"),
            tokens: metrics::counter!("tollgate_settled_tokens_total", "rule" => Arc::clone(name)),
            usage: usage.then(|| {
                ["input", "cached", "output"].map(|kind| {
                    metrics::counter!("tollgate_usage_tokens_total", "rule" => Arc::clone(name), "kind" => kind)
                })
            }),
            faults: Fault::ALL.map(|fault| {
                metrics::counter!("tollgate_settle_faults_total", "rule" => Arc::clone(name), "reason" => fault.reason())
            }),
        }
    }

    /// The counter of `fault`.
    pub(crate) fn fault(&self, fault: Fault) -> &metrics::Counter {
        // `Fault::ALL` lists the variants in declaration order.
        &self.faults[fault as usize]
    }
}

impl RuleCounters {
    /// The counters of the rule named `name`, whose concurrency cap starts at `cap` (if it
    /// has one), with settlement counters if it `reserves` (and token usage counters if
    /// that is from `usage`), counting its traffic into `traffic`.
    pub(crate) fn new(
        name: &str,
        cap: Option<u32>,
        reserves: Option<Reserves>,
        traffic: &Traffic,
    ) -> RuleCounters {
        let name: Arc<str> = Arc::from(name);
        let settle =
            reserves.map(|reserves| SettleCounters::new(&name, reserves == Reserves::Usage));
        let concurrency = cap.map(|cap| {
            let counters = ConcurrencyCounters {
                in_flight: metrics::gauge!("tollgate_in_flight", "rule" => Arc::clone(&name)),
                limit: metrics::gauge!("tollgate_concurrency_limit", "rule" => Arc::clone(&name)),
                refused: metrics::counter!("tollgate_concurrency_refused_total", "rule" => Arc::clone(&name)),
            };
            counters.limit.set(f64::from(cap));
            counters
        });
        RuleCounters {
            allowed: metrics::counter!("tollgate_requests_total", "rule" => Arc::clone(&name), "outcome" => "allowed"),
            limited: metrics::counter!("tollgate_requests_total", "rule" => Arc::clone(&name), "outcome" => "limited"),
            shadow_limited: metrics::counter!("tollgate_requests_total", "rule" => Arc::clone(&name), "outcome" => "shadow_limited"),
            delayed: metrics::counter!("tollgate_delayed_total", "rule" => Arc::clone(&name)),
            delay: metrics::histogram!("tollgate_delay_seconds", "rule" => Arc::clone(&name)),
            concurrency,
            settle,
            traffic: traffic.rule(&name),
        }
    }
}

impl fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuleCounters")
    }
}
