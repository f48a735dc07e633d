//! The one decision API: every front end — the layer, the gateway's listeners, a library
//! user's own code — decides through these methods. A decision reads the rule snapshot once,
//! the clock once, and asks the store once.

use http::Request;

use super::Active;
use super::deciding::{Deciding, DecisionFuture};
use super::estimate::BodySeen;
use super::stack::{NoParts, draws};
use super::{Entry, Limits, QueuedPermit};
use crate::clock::Timestamp;
use crate::concurrency::Permit;
use crate::config::{Limit, Per, Rule};
use crate::decision::Decision;
use crate::key::{Client, Invalid, OnInvalid, SegmentBuffer, normalize_route};
use std::sync::Arc;

use crate::store::{CheckMode, Store, StoreError};

/// What the layer does with one request (`'r`: the request, which the client may borrow).
pub(crate) enum Admission<'r, F> {
    /// No rule, an unlimited one, or one without a rate: pass through without headers,
    /// holding the slot of the rule's concurrency cap if it has one.
    Pass(Option<Box<Permit>>),
    /// The store is deciding; the rule (by index into the rule set) shapes the response.
    /// For `count_status` rules the decision is a peek, and `charge` says what to take
    /// once the response shows whether it counts.
    Check {
        index: usize,
        decision: F,
        charge: Option<Charge>,
        permit: Option<Box<Permit>>,
        /// When the decision was made, and for whom: what its outcome is counted under.
        now: Timestamp,
        client: Client<'r>,
    },
    /// The rule's concurrency cap is reached: refuse at once.
    Busy,
    /// A credential failed verification and `[identity] on_invalid = "reject"`: answer 401,
    /// charging nothing.
    Unauthorized(Invalid),
    /// The cap is reached and the rule may wait (`on_limit = "delay"`), or the slot is
    /// asked of a shared store: it comes later, then the rate is checked
    /// ([`Limits::admit`] with [`Slot::Waited`]). Boxed: the common admissions stay small.
    Queue {
        index: usize,
        wait: Box<QueuedPermit>,
    },
}

/// The slot under a rule's concurrency cap a request is admitted with.
pub(crate) enum Slot {
    /// None yet: take one if the rule has a cap.
    Ask,
    /// The one it waited for (after [`Admission::Queue`]) under the rule at `index`.
    Waited { index: usize, permit: Permit },
}

/// What a request owes once its response is known: a `count_status` request's cost, if
/// its response counts; or, for a rule that reserves and settles (`cost = { reserve,
/// from }`), what it reserved.
#[derive(Debug)]
pub(crate) struct Charge {
    pub(crate) client: Client<'static>,
    pub(crate) cost: u64,
    /// `cost` was taken at admission, to be settled from the response.
    pub(crate) reserved: bool,
    /// The reservations of the `also` limits the request met that settle from the
    /// response (`cost = { reserve, from }` of their own): each limit's index and charge.
    pub(crate) also: Vec<(usize, Charge)>,
    /// The request's `model` (from its JSON body), pricing a money rule's response that
    /// names none.
    pub(crate) model: Option<Arc<str>>,
}

/// Tokens taken for a key before the actual cost is known ([`Limits::reserve`]): settle
/// it with the actual figure, or drop it to keep what was reserved.
#[must_use = "settle a reservation with what it cost, or drop it to keep the reservation"]
pub struct Reservation<St: Store = crate::store::MemoryStore> {
    limits: Limits<St>,
    key: String,
    reserved: u64,
    decision: Decision,
}

impl<St: Store> Reservation<St> {
    /// The decision that took the reservation: whether it was admitted, and the bucket
    /// after it.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Tokens reserved.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Replaces the reservation with `actual`: the unused part given back, an excess
    /// charged (into debt past empty). Returns the bucket afterwards. A refused
    /// reservation took nothing, so settling it changes nothing.
    pub async fn settle(self, actual: u64) -> Result<Decision, StoreError> {
        if !self.decision.allowed() {
            return Ok(self.decision);
        }
        match actual.cmp(&self.reserved) {
            std::cmp::Ordering::Equal => self.limits.peek(&self.key).await,
            std::cmp::Ordering::Greater => {
                self.limits.charge(&self.key, actual - self.reserved).await
            }
            std::cmp::Ordering::Less => self.limits.refund(&self.key, self.reserved - actual).await,
        }
    }
}

impl<St: Store> std::fmt::Debug for Reservation<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("key", &self.key)
            .field("reserved", &self.reserved)
            .field("allowed", &self.decision.allowed())
            .finish()
    }
}

/// A request's own cost, overriding its rule's `cost`: insert it into the request's
/// extensions before the layer (for example from `Content-Length`, to limit bytes rather
/// than requests).
///
/// ```
/// use tollgate::{Limits, RequestCost, key::PeerAddr};
///
/// let limits = Limits::from_toml("[limits]\nupload = \"100/min\"\n")?;
/// let mut request = http::Request::post("/upload").body(())?;
/// request.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse()?));
/// request.extensions_mut().insert(RequestCost(60));
/// let first = limits.check_request(&request).unwrap().into_inner()?;
/// assert_eq!(first.remaining(), 40);
/// assert!(!limits.check_request(&request).unwrap().into_inner()?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestCost(pub u64);

impl<St: Store> Limits<St> {
    /// Takes `cost` tokens for `key` (`route/client`, e.g. `api/search/203.0.113.7`) now.
    pub async fn check(&self, key: &str, cost: u64) -> Result<Decision, StoreError> {
        self.check_at(key, cost, self.now()).await
    }

    /// Takes what a request to `key` costs under its rule (the rule's `cost`), as the layer
    /// would: what `TG.CHECK` without `COST` does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits]\nupload = { rate = \"100/min\", cost = 10 }\n")?;
    /// assert_eq!(limits.check_rule_cost("upload/192.0.2.1").await?.remaining(), 90);
    /// # Ok(()) }
    /// ```
    pub async fn check_rule_cost(&self, key: &str) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Consume, None, self.now())
            .await
    }

    /// Takes `cost` tokens for `key` as of `at` — for replaying recorded events.
    pub async fn check_at(
        &self,
        key: &str,
        cost: u64,
        at: Timestamp,
    ) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Consume, Some(cost), at)
            .await
    }

    /// Takes `n` tokens for `key` whatever its bucket holds, even past empty: a cost learned
    /// after the fact (tokens a response turned out to use, bytes served). The bucket owes
    /// what it could not pay, and refuses until that is refilled. What `TG.CHARGE` does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits]\nllm = \"1000/min\"\n")?;
    /// let charged = limits.charge("llm/key-1", 1500).await?;
    /// assert_eq!(charged.remaining(), 0);
    /// assert!(!limits.check("llm/key-1", 1).await?.allowed(), "500 tokens in debt");
    /// let refunded = limits.refund("llm/key-1", 600).await?;
    /// assert_eq!(refunded.remaining(), 100, "the debt paid, 100 back");
    /// # Ok(()) }
    /// ```
    pub async fn charge(&self, key: &str, n: u64) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Charge, Some(n), self.now())
            .await
    }

    /// Reserves `n` tokens for `key` now, to be settled when the actual cost is known: a
    /// request whose cost is learned only when it is done (tokens an LLM call used, rows a
    /// query scanned). If the reservation is refused ([`Decision::allowed`] is false on
    /// [`Reservation::decision`]) nothing was taken and settling changes nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits]\nllm = \"1000/min\"\n")?;
    /// let reservation = limits.reserve("llm/key-1", 200).await?;
    /// assert!(reservation.decision().allowed());
    /// // ... the call runs, and says it used 50 tokens:
    /// let settled = reservation.settle(50).await?;
    /// assert_eq!(settled.remaining(), 950, "150 of the 200 given back");
    ///
    /// // Dropped unsettled, a reservation keeps what it took.
    /// drop(limits.reserve("llm/key-1", 200).await?);
    /// assert_eq!(limits.peek("llm/key-1").await?.remaining(), 750);
    /// # Ok(()) }
    /// ```
    pub async fn reserve(&self, key: &str, n: u64) -> Result<Reservation<St>, StoreError> {
        let decision = self.check(key, n).await?;
        Ok(Reservation {
            limits: self.clone(),
            key: key.to_owned(),
            reserved: n,
            decision,
        })
    }

    /// Gives `n` tokens back to `key`'s bucket, never past full: a reservation larger than
    /// what was used, or a request that should not have counted. The decision describes
    /// the bucket afterwards, as [`peek`](Self::peek) would. What `TG.REFUND` does.
    pub async fn refund(&self, key: &str, n: u64) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Refund, Some(n), self.now())
            .await
    }

    /// Reports the state of `key`'s bucket without taking anything.
    pub async fn peek(&self, key: &str) -> Result<Decision, StoreError> {
        self.key_decision(key, CheckMode::Peek, None, self.now())
            .await
    }

    /// Decides `request` exactly as the layer would — key, rule, bucket — and takes its
    /// tokens, without calling any service. `None` when no rule limits it.
    ///
    /// For middleware outside tower. With the in-memory store the future is ready at once.
    ///
    /// ```
    /// use tollgate::{Limits, key::PeerAddr};
    ///
    /// let limits = Limits::from_toml("[limits]\nlogin = \"1/min\"\n")?;
    /// let mut request = http::Request::get("/login").body(())?;
    /// request.extensions_mut().insert(PeerAddr("192.0.2.1:1".parse()?));
    /// let decision = limits.check_request(&request).map(|check| check.into_inner());
    /// assert!(decision.unwrap()?.allowed());
    /// assert!(limits.check_request(&http::Request::get("/other").body(())?).is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A credential that fails verification counts as absent here, whatever
    /// `[identity] on_invalid` says (the layer answers 401 under `"reject"`): the next
    /// client source decides.
    pub fn check_request<B>(&self, request: &Request<B>) -> Option<DecisionFuture<St::Future>> {
        match self.admit_with(&self.active(), request, false, false) {
            Admission::Check { decision, .. } => Some(DecisionFuture(decision)),
            Admission::Pass(_)
            | Admission::Busy
            | Admission::Queue { .. }
            | Admission::Unauthorized(_) => None,
        }
    }

    /// Takes a `count_status` request's tokens now that its response counts: from the
    /// bucket of the rule at `index` of `rules` (the set that decided it), and its
    /// candidates'.
    pub(crate) fn charge_counted(
        &self,
        rules: &Active,
        index: usize,
        charge: &Charge,
    ) -> Option<St::Future> {
        let now = self.shared.clock.now();
        let how = (CheckMode::Charge, Some(charge.cost));
        self.tune(rules, index, &charge.client, how, now, false);
        self.start_check(rules.rule(index)?, &charge.client, how.0, how.1, now)
    }

    /// Takes `cost` tokens (the rule's, if `None`) for `key` under `plan`'s limits, as if
    /// the client were on that plan whatever `[plans]` says: what `TG.CHECK … PLAN`
    /// does. `plan = None` leaves the choice to `[plans]` (membership, then the default),
    /// as [`check`](Self::check) does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml(
    ///     "[limits.api]\nrate = \"10/min\"\nplans.pro = \"1000/min\"\n",
    /// )?;
    /// assert_eq!(limits.check_plan("api/user-42", Some(1), Some("pro")).await?.remaining(), 999);
    /// // The same bucket: what was spent under "pro" stays spent, capped at the rule's burst.
    /// assert_eq!(limits.check_plan("api/user-42", Some(1), None).await?.remaining(), 8);
    /// # Ok(()) }
    /// ```
    pub async fn check_plan(
        &self,
        key: &str,
        cost: Option<u64>,
        plan: Option<&str>,
    ) -> Result<Decision, StoreError> {
        self.decide_key(key, CheckMode::Consume, cost, self.now(), plan)
            .await
    }

    /// [`peek`](Self::peek) as if the client were on `plan` (`None`: as `[plans]` says).
    pub async fn peek_plan(&self, key: &str, plan: Option<&str>) -> Result<Decision, StoreError> {
        self.decide_key(key, CheckMode::Peek, None, self.now(), plan)
            .await
    }

    /// Settles a reservation: `actual` replaces what `charge` reserved — the difference
    /// charged (into debt if need be) or given back. `None` when they are equal.
    /// The rule is the one at `index` of `rules`, the set that admitted the request; its
    /// candidates settle alike.
    pub(crate) fn settle_reserved(
        &self,
        rules: &Active,
        index: usize,
        charge: &Charge,
        actual: u64,
    ) -> Option<St::Future> {
        let now = self.shared.clock.now();
        let (mode, difference) = match actual.cmp(&charge.cost) {
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Greater => (CheckMode::Charge, actual - charge.cost),
            std::cmp::Ordering::Less => (CheckMode::Refund, charge.cost - actual),
        };
        self.tune(
            rules,
            index,
            &charge.client,
            (mode, Some(difference)),
            now,
            false,
        );
        self.start_check(
            rules.rule(index)?,
            &charge.client,
            mode,
            Some(difference),
            now,
        )
    }

    async fn key_decision(
        &self,
        key: &str,
        mode: CheckMode,
        cost: Option<u64>,
        at: Timestamp,
    ) -> Result<Decision, StoreError> {
        self.decide_key(key, mode, cost, at, None).await
    }

    async fn decide_key(
        &self,
        key: &str,
        mode: CheckMode,
        cost: Option<u64>,
        at: Timestamp,
        plan: Option<&str>,
    ) -> Result<Decision, StoreError> {
        let (route, client) = key.rsplit_once('/').unwrap_or(("", key));
        let client = Client::from_segment(client);
        let future = {
            let rules = self.active();
            let route = normalize_route(route, rules.route_settings());
            let found = rules.resolve_with(&route, || client.to_string().into());
            let found =
                found.map(|index| rules.plan_index_for(index, plan, || client.to_string().into()));
            match found.and_then(|index| Some((index, rules.rule(index)?))) {
                Some((index, rule)) if !rule.stack_indices().is_empty() && !rule.is_unlimited() => {
                    let counted = mode == CheckMode::Consume;
                    self.tune(&rules, index, &client, (mode, cost), at, counted);
                    let draws = draws(&rules, index, &client, &NoParts, cost);
                    let rules = arc_swap::Guard::into_inner(rules);
                    return self.decide_stack(rules, draws, mode, at).await;
                }
                Some((index, rule)) => match self.start_check(rule, &client, mode, cost, at) {
                    Some(future) => {
                        let counted = mode == CheckMode::Consume;
                        self.tune(&rules, index, &client, (mode, cost), at, counted);
                        (future, rule.name_arc(), rule.is_shadow())
                    }
                    None => return Ok(super::decided_by(Decision::unlimited(), rule)),
                },
                None => return Ok(Decision::unlimited()),
            }
        };
        let (future, rule, shadow) = future;
        future
            .await
            .map(|decision| decision.with_rule(rule).with_shadow(shadow))
    }

    /// The layer's one door into the limits: resolves `request` against `rules`, takes a
    /// slot under the rule's concurrency cap (or uses the one it waited for) and starts its
    /// rate check — the whole per-request decision, reading the clock once.
    pub(crate) fn admit<'r, B>(
        &self,
        rules: &Arc<Active>,
        request: &'r Request<B>,
        slot: Slot,
    ) -> Admission<'r, Deciding<St::Future>> {
        let Slot::Waited { index, permit } = slot else {
            return self.admit_with(rules, request, true, true);
        };
        // The rate check of a request that has waited for its slot (`Admission::Queue`).
        let client = Client::identify(request, rules.client_settings());
        let Some(rule) = rules.rule(index) else {
            return Admission::Pass(Some(Box::new(permit)));
        };
        self.admit_rate(rules, index, rule, request, client, Some(Box::new(permit)))
    }

    fn admit_with<'r, B>(
        &self,
        rules: &Arc<Active>,
        request: &'r Request<B>,
        concurrency: bool,
        reject_invalid: bool,
    ) -> Admission<'r, Deciding<St::Future>> {
        let (client, invalid) = Client::identify_checked(request, rules.client_settings());
        if let Some(invalid) = invalid {
            let on_invalid = rules.client_settings().on_invalid;
            metrics::counter!("tollgate_invalid_credentials_total", "reason" => invalid.reason(), "action" => on_invalid.as_str()).increment(1);
            if reject_invalid && on_invalid == OnInvalid::Reject {
                return Admission::Unauthorized(invalid);
            }
        }
        let settings = rules.route_settings();
        let route = normalize_route(request.uri().path(), settings);
        let route = settings
            .parts
            .match_path(request, route, settings.case_insensitive);
        let mut buffer = SegmentBuffer::default();
        let found = rules.resolve_with(&route, || client.segment(&mut buffer).into());
        let Some((mut index, mut rule)) = found.and_then(|index| Some((index, rules.rule(index)?)))
        else {
            return Admission::Pass(None);
        };
        if rule.has_plans() {
            let plan = rules
                .plans()
                .choose(request, rules.client_settings(), || {
                    client.segment(&mut buffer).to_owned().into()
                })
                .map(|(plan, _)| plan);
            index = rules.plan_index(index, plan.as_deref());
            let Some(variant) = rules.rule(index) else {
                return Admission::Pass(None);
            };
            rule = variant;
        }
        let permit = if concurrency {
            match self.enter(rule, rules.counters(index), &client) {
                Entry::Free => None,
                Entry::Now(permit) => Some(Box::new(permit)),
                Entry::Queued(wait) => {
                    return Admission::Queue {
                        index,
                        wait: Box::new(wait),
                    };
                }
                Entry::Full => return Admission::Busy,
            }
        } else {
            None
        };
        self.admit_rate(rules, index, rule, request, client, permit)
    }

    /// The rate half of an admission, holding `permit` (the concurrency half's slot) throughout.
    fn admit_rate<'r, B>(
        &self,
        rules: &Arc<Active>,
        index: usize,
        rule: &Rule,
        request: &Request<B>,
        client: Client<'r>,
        permit: Option<Box<Permit>>,
    ) -> Admission<'r, Deciding<St::Future>> {
        let cost = request.extensions().get::<RequestCost>().map(|cost| cost.0);
        let now = self.shared.clock.now();
        let counts_status = matches!(
            rule.limit(),
            Limit::Limited {
                count_status: Some(_),
                ..
            }
        );
        let mode = if counts_status {
            CheckMode::Peek
        } else {
            CheckMode::Consume
        };
        let mut also_reserved = Vec::new();
        let reserves = rule.settle().is_some();
        // The model a charge remembers, looked up only where a charge can be made.
        let model: Option<Arc<str>> =
            (counts_status || reserves || !rule.stack_indices().is_empty())
                .then(|| request.extensions().get::<crate::key::RequestJson>())
                .flatten()
                .and_then(|json| json.model())
                .map(Arc::from);
        // What the rule itself takes: the caller's cost, its estimate, or its own cost.
        let mut own_cost = cost;
        let decision = if rule.stack_indices().is_empty() {
            own_cost = cost.or_else(|| {
                super::estimate::estimate(rules, index, rule, || BodySeen::of(request))
            });
            match self.start_check(rule, &client, mode, own_cost, now) {
                Some(decision) => Deciding::One(decision),
                None => return Admission::Pass(permit),
            }
        } else {
            // Several limits: the rule's own bucket (looked at only, for a `count_status`
            // rule, until its response counts) and each `also` limit's, together.
            let mut draws = draws(rules, index, &client, request, cost);
            if counts_status && let Some(own) = draws.first_mut().filter(|d| d.index == index) {
                own.peek = true;
            }
            if draws.is_empty() {
                return Admission::Pass(permit);
            }
            if let Some(own) = draws.first().filter(|d| d.index == index) {
                own_cost = Some(own.cost);
            }
            also_reserved = draws
                .iter()
                .filter(|draw| draw.index != index)
                .filter(|draw| rules.rule(draw.index).is_some_and(|r| r.settle().is_some()))
                .map(|draw| {
                    let charge = Charge {
                        client: draw
                            .client
                            .clone()
                            .unwrap_or_else(|| client.clone().into_owned()),
                        cost: draw.cost,
                        reserved: true,
                        also: Vec::new(),
                        model: model.clone(),
                    };
                    (draw.index, charge)
                })
                .collect();
            Deciding::Stack(self.decide_stack(Arc::clone(rules), draws, CheckMode::Consume, now))
        };
        #[cfg(feature = "insight")]
        if rule.is_tuned() {
            self.tune_slowly(rules, index, &client, (mode, cost), now, true);
        }
        let charge = (counts_status || reserves || !also_reserved.is_empty()).then(|| Charge {
            cost: own_cost.unwrap_or_else(|| rule.cost()),
            client: client.clone().into_owned(),
            reserved: reserves,
            also: also_reserved,
            model,
        });
        Admission::Check {
            index,
            decision,
            charge,
            permit,
            now,
            client,
        }
    }

    /// Starts the store's check for `rule` (`None` for unlimited rules), at the rule's own
    /// cost unless `cost` says otherwise.
    pub(super) fn start_check(
        &self,
        rule: &Rule,
        client: &Client<'_>,
        mode: CheckMode,
        cost: Option<u64>,
        now: Timestamp,
    ) -> Option<St::Future> {
        let Limit::Limited {
            cost: rule_cost,
            per,
            ..
        } = rule.limit()
        else {
            return None;
        };
        let client = match per {
            Per::Client => Some(client),
            Per::Global => None,
        };
        let request = super::rule_request(rule, client, cost.unwrap_or(*rule_cost), now, mode)?;
        Some(self.shared.store.check(request))
    }
}
