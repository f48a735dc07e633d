//! Hybrid mode's local side (`[store] sync = "local"`): per bucket, the tokens this
//! instance has leased from Redis and not spent yet, the global state it last saw, a
//! refusal Redis gave (repeated locally until it could change), and what it admitted
//! while Redis could not be reached (kept until Redis has charged it). No I/O: `sync`
//! makes the calls and reports back here.
//!
//! A lease is charged in Redis when it is granted, so leased tokens are never spent
//! twice; the instance spends them without a round trip. While a lease is being renewed,
//! this instance's other requests for the bucket are decided by Redis one by one, without
//! a lease, so one instance never holds more than one lease per bucket (the bound in
//! `sync`'s docs rests on it).

use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::scripts::Leased;
use crate::Quota;
use crate::algorithm::gcra;
use crate::clock::{Timestamp, duration_nanos};
use crate::decision::Decision;
use crate::store::{CheckMode, CheckRequest};

/// The most buckets tracked at once; beyond, new buckets are decided by Redis on every
/// request (correct, only not batched) until idle ones are dropped.
const MAX_ENTRIES: usize = 262_144;
/// A renewal not answered within this long is taken as lost (its request was cancelled):
/// the bucket may lease again.
const RENEWAL_LOST_NANOS: u64 = 1_000_000_000;

/// What the local side says about one request.
#[derive(Debug)]
pub(in crate::store::redis) enum Verdict {
    /// Decided here, without Redis.
    Local(Decision),
    /// Redis decides; `lease` says whether to ask for a lease at the same time.
    Remote { lease: bool },
}

/// The buckets this instance holds leases on.
#[derive(Default)]
pub(in crate::store::redis) struct Leases {
    table: Mutex<HashMap<String, Lease>>,
    /// The last settlement sequence number given out: rising across every bucket, so a
    /// bucket forgotten and tracked again never reuses one.
    sequence: std::sync::atomic::AtomicU64,
}

struct Lease {
    /// Leased tokens not yet spent.
    allowance: u64,
    /// Each quota's debt (ns until full) in Redis at `synced`, the lease included.
    debts: Vec<u64>,
    synced: Timestamp,
    /// Redis refused; refused here too until then.
    refused_until: Option<Timestamp>,
    /// Tokens admitted while Redis could not be reached, not yet sent to be charged.
    pending: u64,
    /// A charge of admissions sent and not known to have arrived: its sequence number
    /// and tokens. Sent again, unchanged, until Redis confirms it (Redis applies each
    /// sequence number once).
    unconfirmed: Option<(u64, u64)>,
    /// Tokens taken out of `allowance` to give back, not yet confirmed by Redis.
    returning: u64,
    last_used: Timestamp,
    quotas: Vec<Quota>,
    strict: bool,
    /// A lease renewal in flight since then: others go to Redis without a lease.
    renewing: Option<Timestamp>,
    /// A settlement of `pending`/`returning` in flight.
    settling: bool,
}

/// How one settlement went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store::redis) enum Outcome {
    /// Redis applied it.
    Reached,
    /// Redis answered with an error: nothing was applied.
    Refused,
    /// No answer: it may or may not have been applied.
    Unknown,
}

/// Tokens to give back and to charge for one bucket: one lease call of cost 0. The charge
/// carries a sequence number (0: none to charge), so Redis applies it once however often
/// it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::store::redis) struct Settlement {
    pub(in crate::store::redis) key: String,
    pub(in crate::store::redis) returned: u64,
    pub(in crate::store::redis) pending: u64,
    pub(in crate::store::redis) sequence: u64,
    pub(in crate::store::redis) quotas: Vec<Quota>,
    pub(in crate::store::redis) strict: bool,
}

impl Lease {
    fn new(request: &CheckRequest<'_>) -> Lease {
        Lease {
            allowance: 0,
            debts: Vec::new(),
            synced: request.now,
            refused_until: None,
            pending: 0,
            unconfirmed: None,
            returning: 0,
            last_used: request.now,
            quotas: request.quotas.to_vec(),
            strict: request.strict,
            renewing: None,
            settling: false,
        }
    }

    /// The rule changed its quotas: what was leased under the old ones goes back.
    fn requote(&mut self, request: &CheckRequest<'_>) {
        if self.quotas != request.quotas {
            self.returning += std::mem::take(&mut self.allowance);
            self.quotas = request.quotas.to_vec();
            self.debts.clear();
            self.refused_until = None;
        }
        self.strict = request.strict;
    }

    /// The decision this lease's view gives at `now`, with `allowance` tokens still
    /// leased: as Redis would describe it, counting the unspent lease as available.
    fn view(&self, now: Timestamp, allowed: bool, retry: u64) -> Option<Decision> {
        if self.debts.len() != self.quotas.len() || self.quotas.is_empty() {
            return None;
        }
        let elapsed = duration_nanos(now.saturating_since(self.synced));
        let mut described = None;
        let mut reset = 0;
        for (index, (quota, debt)) in self.quotas.iter().zip(&self.debts).enumerate() {
            let interval = quota.interval_nanos();
            let debt = debt
                .saturating_sub(elapsed)
                .saturating_sub(self.allowance.saturating_mul(interval));
            reset = reset.max(debt);
            let retry = if allowed { 0 } else { retry };
            gcra::describe(&mut described, (index, quota), allowed, debt, retry);
        }
        described.map(|decision| decision.with_reset(reset))
    }

    fn renewing(&self, now: Timestamp) -> bool {
        self.renewing
            .is_some_and(|since| duration_nanos(now.saturating_since(since)) < RENEWAL_LOST_NANOS)
    }
}

impl Leases {
    /// Decides `request` (GCRA, consume or peek) on `key` from the lease if it can.
    pub(in crate::store::redis) fn decide(&self, key: &str, request: &CheckRequest<'_>) -> Verdict {
        let now = request.now;
        let mut table = self.table.lock();
        let full = table.len() >= MAX_ENTRIES;
        let lease = match table.entry(key.to_owned()) {
            Slot::Occupied(slot) => slot.into_mut(),
            Slot::Vacant(_) if full => return Verdict::Remote { lease: false },
            Slot::Vacant(slot) => slot.insert(Lease::new(request)),
        };
        lease.requote(request);
        let consume = request.mode != CheckMode::Peek;
        if lease.allowance >= request.cost
            && request.cost > 0
            && let Some(decision) = {
                let before = lease.allowance;
                lease.allowance -= request.cost;
                let decision = lease.view(now, true, 0);
                if !consume || decision.is_none() {
                    lease.allowance = before;
                }
                decision
            }
        {
            lease.last_used = now;
            return Verdict::Local(decision);
        }
        if let Some(until) = lease.refused_until {
            if now < until {
                let retry = duration_nanos(until.saturating_since(now));
                if let Some(decision) = lease.view(now, false, retry) {
                    return Verdict::Local(decision);
                }
            }
            lease.refused_until = None;
        }
        if !consume || lease.renewing(now) {
            return Verdict::Remote { lease: false };
        }
        lease.renewing = Some(now);
        lease.last_used = now;
        Verdict::Remote { lease: true }
    }

    /// Settles a reservation on `key` through its lease, without a round trip: a refund
    /// (`CheckMode::Refund`) puts the tokens back into the lease (they were charged in
    /// Redis when admitted) and a charge (`CheckMode::Charge`) spends the lease first and
    /// keeps the rest to charge at the next settlement — into debt, as Redis would. `None`
    /// when the bucket holds no lease under these quotas: Redis settles it.
    pub(in crate::store::redis) fn settle(
        &self,
        key: &str,
        request: &CheckRequest<'_>,
    ) -> Option<Decision> {
        let mut table = self.table.lock();
        let lease = table.get_mut(key)?;
        if lease.quotas != request.quotas || lease.debts.len() != lease.quotas.len() {
            return None;
        }
        match request.mode {
            CheckMode::Refund => lease.allowance = lease.allowance.saturating_add(request.cost),
            CheckMode::Charge => {
                let spent = request.cost.min(lease.allowance);
                lease.allowance -= spent;
                lease.pending = lease.pending.saturating_add(request.cost - spent);
                // What is owed is owed now: the view counts it as debt.
                let owed = request.cost - spent;
                for (debt, quota) in lease.debts.iter_mut().zip(&lease.quotas) {
                    *debt = debt.saturating_add(owed.saturating_mul(quota.interval_nanos()));
                }
            }
            _ => return None,
        }
        lease.last_used = request.now;
        let allowed = lease.debts.iter().zip(&lease.quotas).all(|(debt, quota)| {
            debt.saturating_sub(duration_nanos(request.now.saturating_since(lease.synced)))
                .saturating_sub(lease.allowance.saturating_mul(quota.interval_nanos()))
                <= quota.capacity_nanos()
        });
        lease.view(request.now, allowed, 0)
    }

    /// Records a lease call's answer for `request` on `key`: the tokens now leased and the
    /// global state; a refusal is repeated locally for at least `hold`.
    pub(in crate::store::redis) fn leased(
        &self,
        key: &str,
        request: &CheckRequest<'_>,
        answer: &Leased,
        hold: Duration,
    ) {
        let now = request.now;
        let mut table = self.table.lock();
        let Some(lease) = table.get_mut(key) else {
            return;
        };
        lease.requote(request);
        lease.renewing = None;
        lease.allowance = lease.allowance.saturating_add(answer.tokens);
        lease.debts.clone_from(&answer.debts);
        lease.synced = now;
        lease.last_used = now;
        lease.refused_until = (!answer.decision.allowed()).then(|| {
            let wait = answer.decision.retry_after().max(hold);
            Timestamp::from_unix_nanos(now.as_unix_nanos().saturating_add(duration_nanos(wait)))
        });
    }

    /// Records a lease call's reply that came after its request stopped waiting and was
    /// decided by `on_backend_error`. The lease is kept as [`Leases::leased`] keeps one;
    /// and if Redis admitted the request, it charged it there too, so that charge is
    /// credited: taken off what is still to be sent for admissions without Redis, or else
    /// added to the lease. (Dropping the reply instead reserved tokens in Redis that
    /// nobody spent, and charged the request twice.)
    pub(in crate::store::redis) fn answered_late(
        &self,
        key: &str,
        request: &CheckRequest<'_>,
        answer: &Leased,
        hold: Duration,
    ) {
        self.leased(key, request, answer, hold);
        if !answer.decision.allowed() || request.cost == 0 {
            return;
        }
        let mut table = self.table.lock();
        let Some(lease) = table.get_mut(key) else {
            return;
        };
        if lease.pending >= request.cost {
            lease.pending -= request.cost;
        } else {
            lease.allowance = lease.allowance.saturating_add(request.cost);
        }
    }

    /// A lease call failed: the bucket may try again.
    pub(in crate::store::redis) fn renewal_failed(&self, key: &str) {
        if let Some(lease) = self.table.lock().get_mut(key) {
            lease.renewing = None;
        }
    }

    /// `cost` tokens were admitted on `key` without Redis (it could not be reached): kept
    /// to charge there at the next settlement.
    pub(in crate::store::redis) fn admitted_without_redis(
        &self,
        key: &str,
        request: &CheckRequest<'_>,
    ) {
        let mut table = self.table.lock();
        // Kept even past MAX_ENTRIES: dropping an admission would lose budget.
        let lease = table
            .entry(key.to_owned())
            .or_insert_with(|| Lease::new(request));
        lease.requote(request);
        lease.renewing = None;
        lease.pending = lease.pending.saturating_add(request.cost);
        lease.last_used = request.now;
    }

    /// The settlements due at `now`: every bucket with admissions to charge or leases to
    /// give back, where a lease is given back once its bucket has been idle for `idle`.
    /// Idle buckets with nothing to settle are dropped.
    pub(in crate::store::redis) fn due(&self, now: Timestamp, idle: Duration) -> Vec<Settlement> {
        let idle = duration_nanos(idle);
        let mut due = Vec::new();
        self.table.lock().retain(|key, lease| {
            if lease.settling {
                return true;
            }
            let quiet = duration_nanos(now.saturating_since(lease.last_used)) >= idle
                && !lease.renewing(now);
            if quiet {
                lease.returning += std::mem::take(&mut lease.allowance);
            }
            if lease.unconfirmed.is_none() && lease.pending > 0 {
                let sequence = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
                lease.unconfirmed = Some((sequence, std::mem::take(&mut lease.pending)));
            }
            if lease.returning > 0 || lease.unconfirmed.is_some() {
                let (sequence, pending) = lease.unconfirmed.unwrap_or((0, 0));
                lease.settling = true;
                due.push(Settlement {
                    key: key.clone(),
                    returned: lease.returning,
                    pending,
                    sequence,
                    quotas: lease.quotas.clone(),
                    strict: lease.strict,
                });
                return true;
            }
            !(quiet && lease.refused_until.is_none_or(|until| until <= now))
        });
        due
    }

    /// Records how settlements went: those that reached Redis are cleared; those Redis
    /// refused stay, to be sent again — never dropped. When the outcome is unknown (no
    /// answer in time), returned tokens count as returned and the charge is sent again,
    /// unchanged: a lost reply never gives tokens back twice, and Redis applies a charge's
    /// sequence number once, so it never charges twice either.
    pub(in crate::store::redis) fn settled(&self, outcomes: &[(Settlement, Outcome)]) {
        let mut table = self.table.lock();
        for (settlement, outcome) in outcomes {
            let Some(lease) = table.get_mut(&settlement.key) else {
                continue;
            };
            lease.settling = false;
            if *outcome != Outcome::Refused {
                lease.returning = lease.returning.saturating_sub(settlement.returned);
            }
            if *outcome == Outcome::Reached
                && lease
                    .unconfirmed
                    .is_some_and(|(sequence, _)| sequence == settlement.sequence)
            {
                lease.unconfirmed = None;
            }
        }
    }

    /// Forgets a bucket's lease and refusal (the bucket was removed from Redis); what it
    /// admitted without Redis is kept.
    pub(in crate::store::redis) fn forgive(&self, key: &str) {
        if let Some(lease) = self.table.lock().get_mut(key) {
            lease.allowance = 0;
            lease.returning = 0;
            lease.refused_until = None;
        }
    }

    /// After a reload: refusals may no longer hold, and leases are given back at the next
    /// settlement (a rule's quotas may have changed).
    pub(in crate::store::redis) fn reconfigured(&self) {
        for lease in self.table.lock().values_mut() {
            lease.refused_until = None;
            lease.returning += std::mem::take(&mut lease.allowance);
        }
    }

    /// Buckets tracked, and tokens admitted without Redis not yet charged there.
    pub(in crate::store::redis) fn stats(&self) -> (usize, u64) {
        let table = self.table.lock();
        let pending = table
            .values()
            .map(|lease| lease.pending + lease.unconfirmed.map_or(0, |(_, tokens)| tokens))
            .sum();
        (table.len(), pending)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::algorithm::Algorithm;
    use crate::store::{BucketRef, RuleId};

    fn quota() -> Quota {
        Quota::new("10/s".parse().unwrap(), NonZeroU32::new(10).unwrap()).unwrap()
    }

    fn request(quotas: &[Quota], at_ms: u64) -> CheckRequest<'_> {
        CheckRequest {
            bucket: BucketRef {
                rule: RuleId::new(0),
                client: None,
            },
            quotas,
            cost: 1,
            algorithm: Algorithm::Gcra,
            strict: false,
            shaping: &crate::Shaping::NONE,
            now: Timestamp::from_unix_nanos(1_000_000_000_000 + at_ms * 1_000_000),
            mode: CheckMode::Consume,
        }
    }

    fn answer(allowed: bool, tokens: u64, debt: u64, retry: u64) -> Leased {
        Leased {
            decision: Decision::bucket(allowed, 0, 10, 100_000_000, debt, retry),
            tokens,
            debts: vec![debt + tokens * 100_000_000],
        }
    }

    #[test]
    fn leased_tokens_are_spent_locally_then_redis_is_asked_again() {
        let leases = Leases::default();
        let quotas = [quota()];
        let first = request(&quotas, 0);
        assert!(matches!(
            leases.decide("k", &first),
            Verdict::Remote { lease: true }
        ));
        // A second request while the renewal is in flight: Redis, without a lease.
        assert!(matches!(
            leases.decide("k", &first),
            Verdict::Remote { lease: false }
        ));
        leases.leased(
            "k",
            &first,
            &answer(true, 2, 100_000_000, 0),
            Duration::ZERO,
        );
        for _ in 0..2 {
            let Verdict::Local(decision) = leases.decide("k", &request(&quotas, 0)) else {
                panic!("a leased token is spent locally");
            };
            assert!(decision.allowed());
        }
        // Three tokens of ten are taken in Redis's eyes: seven remain.
        assert!(matches!(
            leases.decide("k", &request(&quotas, 0)),
            Verdict::Remote { lease: true }
        ));
    }

    #[test]
    fn a_refusal_is_repeated_locally_for_at_least_the_hold() {
        let leases = Leases::default();
        let quotas = [quota()];
        let first = request(&quotas, 0);
        let _ = leases.decide("k", &first);
        leases.leased(
            "k",
            &first,
            &answer(false, 0, 1_000_000_000, 100_000_000),
            Duration::from_millis(250),
        );
        let Verdict::Local(decision) = leases.decide("k", &request(&quotas, 100)) else {
            panic!("refused locally");
        };
        assert!(!decision.allowed());
        assert_eq!(decision.retry_after(), Duration::from_millis(150));
        assert!(matches!(
            leases.decide("k", &request(&quotas, 250)),
            Verdict::Remote { lease: true }
        ));
    }

    #[test]
    fn admissions_without_redis_are_settled_and_resent_until_they_reach_it() {
        let leases = Leases::default();
        let quotas = [quota()];
        leases.admitted_without_redis("k", &request(&quotas, 0));
        leases.admitted_without_redis("k", &request(&quotas, 1));
        let now = request(&quotas, 2).now;
        let due = leases.due(now, Duration::from_secs(1));
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].pending, due[0].returned), (2, 0));
        // In flight: not due twice.
        assert!(leases.due(now, Duration::from_secs(1)).is_empty());
        leases.settled(&[(due[0].clone(), Outcome::Refused)]);
        let again = leases.due(now, Duration::from_secs(1));
        assert_eq!(again, due, "a failed settlement is sent again");
        leases.settled(&[(again[0].clone(), Outcome::Unknown)]);
        let third = leases.due(now, Duration::from_secs(1));
        assert_eq!(
            third, due,
            "an admission whose fate is unknown is sent again"
        );
        leases.settled(&[(third[0].clone(), Outcome::Reached)]);
        assert_eq!(leases.stats(), (1, 0));
    }

    #[test]
    fn a_late_reply_keeps_its_lease_and_credits_the_request_it_charged() {
        let leases = Leases::default();
        let quotas = [quota()];
        let first = request(&quotas, 0);
        assert!(matches!(
            leases.decide("k", &first),
            Verdict::Remote { lease: true }
        ));
        // The request gave up waiting and was admitted without Redis ...
        leases.admitted_without_redis("k", &first);
        assert_eq!(leases.stats(), (1, 1));
        // ... then Redis's answer came: it admitted the request and leased 3 tokens.
        leases.answered_late(
            "k",
            &first,
            &answer(true, 3, 100_000_000, 0),
            Duration::ZERO,
        );
        assert_eq!(leases.stats(), (1, 0), "the request is not charged twice");
        for _ in 0..3 {
            assert!(matches!(
                leases.decide("k", &request(&quotas, 1)),
                Verdict::Local(_)
            ));
        }
        assert!(matches!(
            leases.decide("k", &request(&quotas, 1)),
            Verdict::Remote { lease: true }
        ));
        // Late again, while the admissions without Redis are being settled: the charge
        // is credited to the lease instead.
        let second = request(&quotas, 2);
        leases.admitted_without_redis("k", &second);
        let due = leases.due(second.now, Duration::from_secs(1));
        assert_eq!(due[0].pending, 1);
        leases.answered_late(
            "k",
            &second,
            &answer(true, 0, 100_000_000, 0),
            Duration::ZERO,
        );
        leases.settled(&[(due[0].clone(), Outcome::Reached)]);
        assert!(matches!(
            leases.decide("k", &request(&quotas, 2)),
            Verdict::Local(_)
        ));
    }

    #[test]
    fn an_idle_bucket_gives_its_lease_back_then_is_dropped() {
        let leases = Leases::default();
        let quotas = [quota()];
        let first = request(&quotas, 0);
        let _ = leases.decide("k", &first);
        leases.leased(
            "k",
            &first,
            &answer(true, 3, 100_000_000, 0),
            Duration::ZERO,
        );
        assert!(
            leases
                .due(request(&quotas, 500).now, Duration::from_secs(1))
                .is_empty()
        );
        let due = leases.due(request(&quotas, 1_000).now, Duration::from_secs(1));
        assert_eq!((due[0].returned, due[0].pending), (3, 0));
        leases.settled(&[(due[0].clone(), Outcome::Unknown)]);
        assert!(
            leases
                .due(request(&quotas, 1_001).now, Duration::from_secs(1))
                .is_empty()
        );
        assert_eq!(leases.stats(), (0, 0));
    }
}
