//! Settling a reservation from the response (`cost = { reserve, from }`): reading what the
//! response says it cost — a header, a trailer, a JSON body's field, or the last
//! server-sent event carrying it — within bounds, and charging or refunding the
//! difference when the response ends.
//!
//! What is read is never changed: the reader only looks at the frames on their way out.
//! A response that never says, says something that is not a count (negative, not a number,
//! above the rule's `max`, malformed JSON, a JSON body larger than [`MAX_JSON_BODY`]), fails
//! mid-body, or is dropped because the client went away, keeps its reservation; the faults
//! are counted (`tollgate_settle_faults_total`) and logged once per rule a minute.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;

use super::figure::{BodyReader, Figure, figure_of_header};
use crate::concurrency::BodyObserver;
use crate::config::CostSource;
use crate::limits::{Active, Charge, Limits};
use crate::store::Store;
use crate::traffic::Fault;

/// A reservation waiting for its response's figure, read from the body.
pub(crate) struct BodySettlement<St: Store> {
    pub(crate) limits: Limits<St>,
    pub(crate) rules: Arc<Active>,
    pub(crate) index: usize,
    pub(crate) charge: Charge,
    pub(crate) reader: BodyReader,
}

impl<St: Store> std::fmt::Debug for BodySettlement<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodySettlement")
            .field("reserved", &self.charge.cost)
            .finish_non_exhaustive()
    }
}

impl<St: Store> BodyObserver for BodySettlement<St> {
    fn data(&mut self, bytes: &[u8]) {
        self.reader.data(bytes);
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        self.reader.trailers(trailers);
    }

    fn end(self: Box<Self>) {
        let BodySettlement {
            limits,
            rules,
            index,
            charge,
            reader,
        } = *self;
        if let Some(settling) = settle(&limits, &rules, index, &charge, reader.finish()) {
            run_detached(settling);
        }
    }
}

/// Settles the reservations of the `also` limits a request met (`also`, each limit's index
/// in `rules` and its charge) from the response's head: those read from a header now (in
/// the background), the others by the observers returned, as the body goes by.
pub(crate) fn settle_also_from_head<St: Store, B>(
    limits: &Limits<St>,
    rules: &Arc<Active>,
    also: Vec<(usize, Charge)>,
    response: &http::Response<B>,
) -> Vec<Box<dyn BodyObserver>> {
    let content_type = response.headers().get(http::header::CONTENT_TYPE);
    let mut observers: Vec<Box<dyn BodyObserver>> = Vec::new();
    for (index, charge) in also {
        let Some(spec) = rules.rule(index).and_then(|rule| rule.settle()) else {
            continue;
        };
        if let CostSource::Header(name) = &spec.from {
            let figure = figure_of_header(response.headers().get(name), spec.max);
            if let Some(settling) = settle(limits, rules, index, &charge, figure) {
                run_detached(settling);
            }
            continue;
        }
        if let Some(reader) = BodyReader::new(&spec.from, content_type, spec.max) {
            observers.push(Box::new(BodySettlement {
                limits: limits.clone(),
                rules: Arc::clone(rules),
                index,
                charge,
                reader,
            }));
        }
    }
    observers
}

/// Settles `charge` (reserved under rule `index` of `rules`) with `figure`: the difference
/// charged or refunded, in the background if the store answers later.
pub(crate) fn settle<St: Store>(
    limits: &Limits<St>,
    rules: &Active,
    index: usize,
    charge: &Charge,
    figure: Figure,
) -> Option<St::Future> {
    let rule = rules.rule(index)?;
    let counters = rules.counters(index);
    // Usage is weighed (or, for a money rule, priced by its model) into one cost, believed
    // up to the rule's `max`.
    let (figure, usage) = match (figure, rule.settle()) {
        (Figure::Usage(usage, model), Some(spec)) => {
            let cost = match spec.money {
                None => Some(spec.weights.cost(usage)),
                Some(money) => model
                    .as_deref()
                    .or(charge.model.as_deref())
                    .and_then(|model| rules.prices().find(model))
                    .map(|price| money.units(price.micros(usage))),
            };
            match cost {
                Some(cost) if cost <= spec.max => (Figure::Found(cost), Some(usage)),
                Some(_) => (Figure::Bad(Fault::AboveMax), None),
                None => (Figure::Bad(Fault::NoPrice), Some(usage)),
            }
        }
        (Figure::Usage(..), None) => (Figure::Missing, None),
        (figure, _) => (figure, None),
    };
    if let Some(counters) = counters {
        if let Some(usage) = usage {
            counters.usage([usage.input, usage.cached, usage.output]);
        }
        if let Some(money) = rule.settle().and_then(|spec| spec.money) {
            counters.counts_money(money.currency.symbol(), money.unit_micros);
        }
    }
    if let Some(counters) = counters {
        let used = match figure {
            Figure::Found(actual) => actual,
            Figure::Missing | Figure::Bad(_) | Figure::Usage(..) => charge.cost,
        };
        counters.settled(charge.cost, used);
    }
    let settles = counters.and_then(|counters| counters.settle.as_ref());
    let actual = match figure {
        Figure::Found(actual) => actual,
        Figure::Missing | Figure::Usage(..) => {
            if let Some(settles) = settles {
                settles.kept.increment(1);
            }
            return None;
        }
        Figure::Bad(fault) => {
            if let Some(settles) = settles {
                settles.fault(fault).increment(1);
                settles.kept.increment(1);
            }
            warn_now_and_then(rule.name(), fault.reason());
            return None;
        }
    };
    if let Some(settles) = settles {
        match actual.cmp(&charge.cost) {
            std::cmp::Ordering::Less => settles.refunded.increment(1),
            std::cmp::Ordering::Equal => settles.exact.increment(1),
            std::cmp::Ordering::Greater => settles.charged.increment(1),
        }
        settles.tokens.increment(actual);
    }
    limits.settle_reserved(rules, index, charge, actual)
}

/// Drives a settlement started without a response to wait for: at once if the store has
/// answered already (memory), else on the runtime in the background.
pub(crate) fn run_detached<F>(future: F)
where
    F: std::future::Future<Output = Result<crate::Decision, crate::store::StoreError>>
        + Send
        + Unpin
        + 'static,
{
    crate::limits::drive_detached(future, |result| {
        if let Err(error) = result {
            tracing::warn!(%error, "rate-limit store failed to settle a reservation; the reservation stands");
        }
    });
}

/// Logs a settle fault, once per rule a minute.
fn warn_now_and_then(rule: &str, reason: &'static str) {
    static LAST: LazyLock<Mutex<HashMap<String, Instant>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let now = Instant::now();
    let mut last = LAST.lock();
    if last
        .get(rule)
        .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(60))
    {
        return;
    }
    // Rules are few; the map is bounded by them (and a reload's renames).
    if last.len() > 10_000 {
        last.clear();
    }
    last.insert(rule.to_owned(), now);
    tracing::warn!(
        rule,
        reason,
        "a response's cost could not be read; its reservation stands (logged once a minute per rule)"
    );
}
