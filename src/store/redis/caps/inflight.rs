//! Concurrency caps shared by gateways: a slot is a lease in a sorted set per bucket
//! (`slots.lua`), renewed by its gateway while its request is in flight and given back when
//! the request ends. A gateway that dies stops renewing; its leases expire within
//! `[store] concurrency_lease` and their slots come back.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::super::Inner;
use super::super::answer::unavailable_within;
use crate::store::{SharedSlot, SlotFuture, StoreError};

/// One lease held: dropping it gives the slot back.
struct Lease {
    inner: Weak<Inner>,
    key: String,
    id: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        {
            let mut held = inner.leases.by_key.lock();
            if let Some(ids) = held.get_mut(&self.key) {
                ids.remove(&self.id);
                if ids.is_empty() {
                    held.remove(&self.key);
                }
            }
        }
        // Given back in the background; if that fails the lease simply expires.
        if tokio::runtime::Handle::try_current().is_ok() {
            let (key, id) = (std::mem::take(&mut self.key), std::mem::take(&mut self.id));
            tokio::spawn(async move {
                let settings = inner.settings.load_full();
                let args = args("r", &settings, 0, &[id]);
                let call = inner.pool.slots(&settings, &key, &args);
                let _ = tokio::time::timeout(settings.timeout, call).await;
            });
        }
    }
}

fn args(
    mode: &str,
    settings: &crate::config::RedisSettings,
    limit: u32,
    ids: &[String],
) -> Vec<String> {
    let mut args = vec![
        mode.to_owned(),
        settings.concurrency_lease.as_millis().to_string(),
        limit.to_string(),
    ];
    args.extend(ids.iter().cloned());
    args
}

impl Inner {
    /// Takes a slot of the bucket whose decision key is `bucket_key`, under `limit`.
    pub(in crate::store::redis) fn acquire_slot(
        self: &Arc<Self>,
        bucket_key: &str,
        limit: u32,
    ) -> SlotFuture {
        // The slot set shares the bucket's hash tag (one node), with its own last byte.
        let mut key = bucket_key.to_owned();
        match key.pop() {
            Some('g') => key.push('N'),
            _ => key.push('n'),
        }
        let id = format!(
            "{}:{}",
            self.hybrid.id,
            self.leases.next.fetch_add(1, Ordering::Relaxed)
        );
        let inner = Arc::clone(self);
        Box::pin(async move {
            let settings = inner.settings.load_full();
            let args = args("a", &settings, limit, std::slice::from_ref(&id));
            let call = inner.pool.slots(&settings, &key, &args);
            let reply = unavailable_within(settings.timeout, call).await?;
            let (taken, in_flight) = match reply.as_slice() {
                [taken, in_flight] => (*taken == 1, u32::try_from(*in_flight).unwrap_or(0)),
                _ => {
                    return Err(StoreError::Unavailable {
                        reason: format!("unexpected reply from the slots script: {reply:?}"),
                    });
                }
            };
            if !taken {
                return Ok(None);
            }
            inner
                .leases
                .by_key
                .lock()
                .entry(key.clone())
                .or_default()
                .insert(id.clone());
            inner.start_renewing();
            let lease = Lease {
                inner: Arc::downgrade(&inner),
                key,
                id,
            };
            Ok(Some(SharedSlot::new(in_flight, Box::new(lease))))
        })
    }

    /// Renews every held lease a third of the lease time apart, until the store is dropped.
    fn start_renewing(self: &Arc<Self>) {
        if self.leases.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let settings = inner.settings.load_full();
                let every = settings.concurrency_lease / 3;
                let held: Vec<(String, Vec<String>)> = inner
                    .leases
                    .by_key
                    .lock()
                    .iter()
                    .map(|(key, ids)| (key.clone(), ids.iter().cloned().collect()))
                    .collect();
                for (key, ids) in held {
                    let args = args("n", &settings, 0, &ids);
                    let call = inner.pool.slots(&settings, &key, &args);
                    let _ = tokio::time::timeout(settings.timeout, call).await;
                }
                drop(inner);
                tokio::time::sleep(every).await;
            }
        });
    }
}
