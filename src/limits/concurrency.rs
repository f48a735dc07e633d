//! The concurrency half of a decision: a slot under the rule's cap, taken before the rate
//! is checked, so that a refusal by either takes nothing from the other.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;

use super::Limits;
use crate::concurrency::{
    Acquired, Concurrency, Controller, InFlight, Permit, Sampler, SlotKey, SlotWait,
};
use crate::config::{Per, Rule, RuleId};
use crate::key::Client;
use crate::store::{BucketRef, SlotFuture, Store};
use crate::traffic::RuleCounters;

/// Each adaptive rule's controller, by rule id: it outlives reloads that keep the rule.
pub(super) type Controllers = Mutex<HashMap<RuleId, Arc<Mutex<Controller>>>>;

/// What a request's rule says about its slot.
pub(crate) enum Entry {
    /// The rule has no concurrency cap (or is a shadow rule whose cap is full).
    Free,
    /// A slot, taken.
    Now(Permit),
    /// A place in the queue (`on_limit = "delay"`): the slot comes when one is released.
    Queued(QueuedPermit),
    /// The cap is reached: refuse at once.
    Full,
}

impl<St: Store> Limits<St> {
    /// Takes a slot for a request of `client` under `rule`'s concurrency cap: from the
    /// store when it shares caps between instances (Redis), else from this process's table.
    pub(crate) fn enter(
        &self,
        rule: &Rule,
        rule_counters: Option<&RuleCounters>,
        client: &Client<'_>,
    ) -> Entry {
        let Some(cap) = rule.concurrency() else {
            return Entry::Free;
        };
        let Some(rule_counters) = rule_counters else {
            return Entry::Free;
        };
        let Some(counters) = rule_counters.concurrency.as_ref() else {
            return Entry::Free;
        };
        let (key, limit, controller) = match cap {
            Concurrency::Fixed(n) => {
                let per_client = rule.per() == Some(Per::Client);
                let bucket = BucketRef {
                    rule: rule.id(),
                    client: per_client.then_some(client),
                };
                let client = per_client.then(|| client.clone().into_owned());
                let key = SlotKey {
                    rule: rule.id().get(),
                    client,
                };
                if let Some(future) =
                    (self.shared.store.shared_caps()).and_then(|caps| caps.acquire_slot(bucket, n))
                {
                    return Entry::Queued(QueuedPermit::Shared {
                        future,
                        gauge: counters.in_flight.clone(),
                        fallback: Some((Arc::clone(&self.shared.in_flight), key, n)),
                    });
                }
                (key, n, None)
            }
            Concurrency::Adaptive(settings) => {
                let controller = self.controller(rule.id(), settings);
                let limit = controller.lock().limit();
                let key = SlotKey {
                    rule: rule.id().get(),
                    client: None,
                };
                (key, limit, Some(controller))
            }
        };
        let may_wait = rule.shaping().is_some_and(|s| s.delay().is_some()) && !rule.is_shadow();
        let in_flight = counters.in_flight.clone();
        let sampler = |controller: Option<Arc<Mutex<Controller>>>| {
            controller.map(|controller| Sampler {
                controller,
                clock: Arc::clone(&self.shared.clock),
                started: self.shared.clock.now().as_unix_nanos(),
                limit_gauge: counters.limit.clone(),
            })
        };
        match self
            .shared
            .in_flight
            .acquire(key, limit, may_wait, in_flight)
        {
            Acquired::Now(slot) => Entry::Now(Permit::new(slot, sampler(controller))),
            Acquired::Queued(wait) => Entry::Queued(QueuedPermit::Local {
                wait,
                controller,
                clock: Arc::clone(&self.shared.clock),
                limit_gauge: counters.limit.clone(),
            }),
            Acquired::Full if rule.is_shadow() => {
                rule_counters.shadow_refused(self.shared.clock.now());
                Entry::Free
            }
            Acquired::Full => {
                rule_counters.refused_for_concurrency(self.shared.clock.now(), Some(client));
                Entry::Full
            }
        }
    }

    /// `rule`'s adaptive controller, made on first use and kept within `settings`.
    fn controller(
        &self,
        rule: RuleId,
        settings: crate::AdaptiveSettings,
    ) -> Arc<Mutex<Controller>> {
        let mut controllers = self.shared.controllers.lock();
        let controller = controllers.entry(rule).or_insert_with(|| {
            let now = self.shared.clock.now().as_unix_nanos();
            let seed = now ^ (u64::from(rule.get()) << 32);
            Arc::new(Mutex::new(Controller::new(settings, now, seed)))
        });
        {
            let mut inner = controller.lock();
            if inner.settings() != settings {
                inner.reconfigure(settings);
            }
        }
        Arc::clone(controller)
    }

    /// Requests in flight, every rule and bucket (what the concurrency caps hold).
    pub fn in_flight(&self) -> &crate::concurrency::InFlight {
        &self.shared.in_flight
    }

    /// `rule`'s adaptive limit now and its measured no-load latency, if it has one.
    pub fn adaptive_state(&self, rule: RuleId) -> Option<(u32, Option<std::time::Duration>)> {
        let controllers = self.shared.controllers.lock();
        let controller = controllers.get(&rule)?.lock();
        Some((
            controller.limit(),
            controller.baseline().map(std::time::Duration::from_nanos),
        ))
    }
}

/// A slot on its way, resolving to the [`Permit`] (`None`: none came — the cap is reached
/// in the shared store, or the queue went away).
pub(crate) enum QueuedPermit {
    /// A place in this process's queue.
    Local {
        wait: SlotWait,
        controller: Option<Arc<Mutex<Controller>>>,
        clock: Arc<dyn crate::clock::Clock>,
        limit_gauge: metrics::Gauge,
    },
    /// A slot asked of the shared store; if the store cannot answer, the cap is kept in
    /// this process's table meanwhile (`fallback`).
    Shared {
        future: SlotFuture,
        gauge: metrics::Gauge,
        fallback: Option<(Arc<InFlight>, SlotKey, u32)>,
    },
}

impl Future for QueuedPermit {
    type Output = Option<Permit>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Permit>> {
        match &mut *self {
            QueuedPermit::Local {
                wait,
                controller,
                clock,
                limit_gauge,
            } => {
                let slot = std::task::ready!(Pin::new(wait).poll(cx));
                let sampler = controller.take().map(|controller| Sampler {
                    controller,
                    clock: Arc::clone(clock),
                    started: clock.now().as_unix_nanos(),
                    limit_gauge: limit_gauge.clone(),
                });
                Poll::Ready(slot.map(|slot| Permit::new(slot, sampler)))
            }
            QueuedPermit::Shared {
                future,
                gauge,
                fallback,
            } => {
                let result = std::task::ready!(future.as_mut().poll(cx));
                let permit = match result {
                    Ok(Some(slot)) => {
                        let in_flight = slot.in_flight();
                        Some(Permit::shared(slot.into_guard(), in_flight, gauge.clone()))
                    }
                    Ok(None) => None,
                    Err(error) => {
                        tracing::debug!(%error, "shared concurrency slot unavailable; kept locally");
                        match fallback.take() {
                            Some((table, key, limit)) => {
                                match table.acquire(key, limit, false, gauge.clone()) {
                                    Acquired::Now(slot) => Some(Permit::new(slot, None)),
                                    Acquired::Queued(_) | Acquired::Full => None,
                                }
                            }
                            None => None,
                        }
                    }
                };
                Poll::Ready(permit)
            }
        }
    }
}
