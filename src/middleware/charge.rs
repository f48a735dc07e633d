//! What a request owes once its response is known: a `count_status` charge made only if
//! the status counts, and a reservation settled from the response's head (a header) or
//! handed to what reads its body (a trailer, a JSON field, the last server-sent event).

use std::sync::Arc;

use super::figure::{self, BodyReader};
use super::response::RateLimitHeaders;
use super::settle::{self, BodySettlement};
use crate::config::CostSource;
use crate::limits::{Active, Charge, Limits};
use crate::store::{Store, StoreError};

/// How a reservation is settled once the response's head is known.
pub(super) enum Settle<St: Store> {
    /// From a header: the store is settling it now.
    Now(Box<PendingCharge<St>>, St::Future),
    /// From the body, by this observer, when it ends.
    FromBody(Box<dyn crate::concurrency::BodyObserver>),
    /// Nothing to settle (the figure equals the reservation, or is missing or bad).
    Kept,
}

/// What a `count_status` request owes if its response counts, or what a reservation
/// settles against.
pub(crate) struct PendingCharge<St> {
    pub(crate) limits: Limits<St>,
    pub(crate) rules: Arc<Active>,
    pub(crate) index: usize,
    pub(crate) charge: Charge,
}

impl<St: Store> PendingCharge<St> {
    /// What a `count_status` request owes, settled later against the very rule set that
    /// decided (the snapshot, not a fresh load a reload may have replaced).
    pub(crate) fn boxed(
        limits: &Limits<St>,
        rules: &Arc<Active>,
        index: usize,
        charge: Option<Charge>,
    ) -> Option<Box<PendingCharge<St>>> {
        charge.map(|charge| {
            Box::new(PendingCharge {
                limits: limits.clone(),
                rules: Arc::clone(rules),
                index,
                charge,
            })
        })
    }

    /// Starts the charge if `status` is one the rule counts.
    pub(super) fn start(&self, status: http::StatusCode) -> Option<St::Future> {
        let rule = self.rules.rule(self.index)?;
        if !rule.count_status()?.contains(status) {
            return None;
        }
        self.limits
            .charge_counted(&self.rules, self.index, &self.charge)
    }

    /// Settles a reservation from the response's head (a `header:` source), or hands back
    /// what will read its body (trailer, JSON, events).
    pub(super) fn settle_from_head<B>(self: Box<Self>, response: &http::Response<B>) -> Settle<St> {
        let Some(spec) = self.rules.rule(self.index).and_then(|rule| rule.settle()) else {
            return Settle::Kept;
        };
        let (source, max) = (spec.from.clone(), spec.max);
        if let CostSource::Header(name) = &source {
            let figure = figure::figure_of_header(response.headers().get(name), max);
            return match settle::settle(&self.limits, &self.rules, self.index, &self.charge, figure)
            {
                Some(settling) => Settle::Now(self, settling),
                None => Settle::Kept,
            };
        }
        let content_type = response.headers().get(http::header::CONTENT_TYPE);
        let Some(reader) = BodyReader::new(&source, content_type, max) else {
            return Settle::Kept;
        };
        let PendingCharge {
            limits,
            rules,
            index,
            charge,
        } = *self;
        Settle::FromBody(Box::new(BodySettlement {
            limits,
            rules,
            index,
            charge,
            reader,
        }))
    }

    /// The headers after the charge: they show what the charge left.
    pub(super) fn headers(
        &self,
        result: Result<crate::Decision, StoreError>,
        before: Option<RateLimitHeaders>,
    ) -> Option<RateLimitHeaders> {
        let rule = self.rules.rule(self.index)?;
        match result {
            Ok(_) if rule.is_shadow() => None,
            Ok(decision) => Some(RateLimitHeaders::new(
                rule,
                &decision,
                self.rules.response().headers,
            )),
            Err(error) => {
                tracing::warn!(rule = rule.name(), %error, "rate-limit store failed to charge a counted response");
                before
            }
        }
    }
}
