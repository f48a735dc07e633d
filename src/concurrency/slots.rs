//! The in-flight table: how many requests each bucket has in flight, and who waits for a
//! slot, in arrival order.
//!
//! A [`Slot`] is a guard: dropping it — when the response body has been sent, or when the
//! request is dropped for any reason (client gone, error, timeout, a panic unwinding through
//! the service) — gives the slot back, to the first live waiter if there is one. No other
//! path releases a slot, so one can never leak and never be released twice.
//!
//! Entries exist only while something is in flight or waiting: memory follows the requests
//! in flight, not the clients ever seen.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::key::Client;

/// At most this many requests wait for one bucket's slots; more are refused at once.
pub(crate) const MAX_WAITING: usize = 4096;

const SHARDS: usize = 16;

/// Which bucket a slot belongs to: a rule, and the client for per-client caps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SlotKey {
    /// The rule's id (`RuleId::get`).
    pub(crate) rule: u32,
    pub(crate) client: Option<Client<'static>>,
}

/// One bucket's requests in flight and its queue.
#[derive(Debug, Default)]
struct Slots {
    busy: u32,
    /// The cap the last request saw (an adaptive cap moves): releases hand a slot to a
    /// waiter only while `busy` stays within it.
    limit: u32,
    /// Each waiter is sent the number in flight when its slot is handed over.
    waiting: VecDeque<oneshot::Sender<u32>>,
}

/// Every bucket's requests in flight.
#[derive(Debug)]
pub struct InFlight {
    shards: Box<[Mutex<HashMap<SlotKey, Slots>>]>,
    hasher: foldhash::quality::RandomState,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: foldhash::quality::RandomState::default(),
        }
    }
}

/// What asking for a slot gave.
pub(crate) enum Acquired {
    /// A slot, now.
    Now(Slot),
    /// A place in the queue: the slot comes when one is released.
    Queued(SlotWait),
    /// None: the cap is reached and the request may not wait (or the queue is full).
    Full,
}

impl InFlight {
    fn shard(&self, key: &SlotKey) -> &Mutex<HashMap<SlotKey, Slots>> {
        let hash = self.hasher.hash_one(key) as usize;
        &self.shards[hash % self.shards.len()]
    }

    /// A slot of `key` under a cap of `limit`, now; with `may_wait`, a place in the queue
    /// when none is free. A queue is served in arrival order: while anyone waits, a newcomer
    /// waits behind them.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        key: SlotKey,
        limit: u32,
        may_wait: bool,
        gauge: metrics::Gauge,
    ) -> Acquired {
        let mut shard = self.shard(&key).lock();
        let slots = shard.entry(key.clone()).or_default();
        slots.limit = limit;
        if slots.waiting.is_empty() && slots.busy < limit {
            slots.busy += 1;
            let in_flight = slots.busy;
            drop(shard);
            gauge.increment(1.0);
            return Acquired::Now(Slot::new(Arc::clone(self), key, gauge, in_flight));
        }
        if !may_wait {
            Self::forget_if_idle(&mut shard, &key);
            return Acquired::Full;
        }
        // Waiters that gave up leave their place behind; prune before growing.
        if slots.waiting.len() >= 64 && slots.waiting.len().is_power_of_two() {
            slots.waiting.retain(|waiter| !waiter.is_closed());
        }
        if slots.waiting.len() >= MAX_WAITING {
            return Acquired::Full;
        }
        let (sender, receiver) = oneshot::channel();
        slots.waiting.push_back(sender);
        Acquired::Queued(SlotWait {
            receiver: Some(receiver),
            table: Arc::clone(self),
            key: Some(key),
            gauge,
        })
    }

    /// Gives a slot of `key` back: to the first waiter still waiting while the cap allows,
    /// else to no one.
    fn release(&self, key: &SlotKey) {
        let mut shard = self.shard(key).lock();
        let Some(slots) = shard.get_mut(key) else {
            return;
        };
        if slots.busy <= slots.limit {
            while let Some(waiter) = slots.waiting.pop_front() {
                // The slot passes to the waiter as it is: `busy` does not change.
                if waiter.send(slots.busy).is_ok() {
                    return;
                }
            }
        }
        slots.busy = slots.busy.saturating_sub(1);
        Self::forget_if_idle(&mut shard, key);
    }

    fn forget_if_idle(shard: &mut HashMap<SlotKey, Slots>, key: &SlotKey) {
        if shard
            .get(key)
            .is_some_and(|slots| slots.busy == 0 && slots.waiting.is_empty())
        {
            shard.remove(key);
        }
    }

    /// Requests in flight for the rule with id `rule` (`RuleId::get`), over all its buckets.
    pub fn in_flight(&self, rule: u32) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .iter()
                    .filter(|(key, _)| key.rule == rule)
                    .map(|(_, slots)| u64::from(slots.busy))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Buckets with something in flight or waiting (what the table holds).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }

    /// Whether nothing is in flight or waiting anywhere.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A slot held: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    table: Arc<InFlight>,
    key: SlotKey,
    gauge: metrics::Gauge,
    in_flight: u32,
}

impl Slot {
    fn new(table: Arc<InFlight>, key: SlotKey, gauge: metrics::Gauge, in_flight: u32) -> Slot {
        Slot {
            table,
            key,
            gauge,
            in_flight,
        }
    }

    /// Requests in flight in this bucket when the slot was taken, this one included.
    pub fn in_flight_at_start(&self) -> u32 {
        self.in_flight
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
        self.table.release(&self.key);
    }
}

/// A place in a bucket's queue: resolves to a [`Slot`] when one is handed over. Dropped
/// before that (it waited too long, or the client went away), it gives up its place — and
/// if a slot reached it in that very moment, gives the slot back.
#[derive(Debug)]
pub(crate) struct SlotWait {
    receiver: Option<oneshot::Receiver<u32>>,
    table: Arc<InFlight>,
    key: Option<SlotKey>,
    gauge: metrics::Gauge,
}

impl Future for SlotWait {
    type Output = Option<Slot>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Slot>> {
        let Some(receiver) = self.receiver.as_mut() else {
            return Poll::Ready(None);
        };
        let handed = std::task::ready!(Pin::new(receiver).poll(cx)).ok();
        self.receiver = None;
        match (handed, self.key.take()) {
            (Some(in_flight), Some(key)) => {
                self.gauge.increment(1.0);
                let slot = Slot::new(Arc::clone(&self.table), key, self.gauge.clone(), in_flight);
                Poll::Ready(Some(slot))
            }
            _ => Poll::Ready(None),
        }
    }
}

impl Drop for SlotWait {
    fn drop(&mut self) {
        let (Some(mut receiver), Some(key)) = (self.receiver.take(), self.key.take()) else {
            return;
        };
        receiver.close();
        if receiver.try_recv().is_ok() {
            // Handed over as we gave up: it was never used, so it goes straight back.
            self.table.release(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn key(client: u8) -> SlotKey {
        SlotKey {
            rule: 1,
            client: Some(Client::Ip(IpAddr::from([192, 0, 2, client]))),
        }
    }

    fn gauge() -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn now(table: &Arc<InFlight>, client: u8, limit: u32) -> Option<Slot> {
        match table.acquire(key(client), limit, false, gauge()) {
            Acquired::Now(slot) => Some(slot),
            _ => None,
        }
    }

    #[test]
    fn a_cap_admits_that_many_per_client_and_frees_on_drop() {
        let table = Arc::new(InFlight::default());
        let a = now(&table, 1, 2).unwrap();
        let b = now(&table, 1, 2).unwrap();
        assert!(now(&table, 1, 2).is_none(), "the third is refused");
        let other = now(&table, 2, 2).unwrap();
        assert_eq!(table.in_flight(1), 3);
        drop(a);
        let c = now(&table, 1, 2).unwrap();
        drop((b, c, other));
        assert!(table.is_empty(), "nothing kept once nothing is in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_arrival_order_and_a_newcomer_queues_behind_them() {
        let table = Arc::new(InFlight::default());
        let held = now(&table, 1, 1).unwrap();
        let mut waits = Vec::new();
        for _ in 0..3 {
            match table.acquire(key(1), 1, true, gauge()) {
                Acquired::Queued(wait) => waits.push(Box::pin(wait)),
                _ => panic!("should queue"),
            }
        }
        // The second gives up: its place passes on.
        let gave_up = waits.remove(1);
        drop(gave_up);
        drop(held);
        let first = waits.remove(0).await.unwrap();
        assert!(
            now(&table, 1, 5).is_none(),
            "someone waits: a newcomer does not jump the queue"
        );
        drop(first);
        let third = waits.remove(0).await.unwrap();
        drop(third);
        assert!(table.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_handed_to_a_waiter_that_just_left_goes_back() {
        let table = Arc::new(InFlight::default());
        let held = now(&table, 1, 1).unwrap();
        let Acquired::Queued(wait) = table.acquire(key(1), 1, true, gauge()) else {
            panic!("should queue");
        };
        drop(held); // handed to the waiter, which has not looked yet
        drop(wait); // and leaves without taking it
        assert!(table.is_empty(), "the slot was given back, not leaked");
    }

    #[test]
    fn a_lowered_cap_hands_no_slot_on_until_busy_is_below_it() {
        let table = Arc::new(InFlight::default());
        let slots: Vec<Slot> = (0..3).map(|_| now(&table, 1, 3).unwrap()).collect();
        let Acquired::Queued(_wait) = table.acquire(key(1), 2, true, gauge()) else {
            panic!("should queue");
        };
        let mut slots = slots.into_iter();
        drop(slots.next()); // busy 3 → 2: not below the new cap of 2, nobody is handed one
        assert_eq!(table.in_flight(1), 2);
        drop(slots.next()); // busy 2 → handed over: still 2
        assert_eq!(table.in_flight(1), 2);
    }
}
