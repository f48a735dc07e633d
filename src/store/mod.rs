//! Where buckets live: the [`Store`] boundary and the in-memory [`MemoryStore`].
//!
//! The layer never touches bucket state itself; it asks a store for a [`Decision`]. A store
//! may answer later (a network backend) or at once (the in-memory store, whose future is
//! [`std::future::Ready`]: no boxing, no allocation, and the layer takes the answer on the
//! spot without parking the request).
//!
//! ```
//! use std::num::NonZeroU32;
//! use tollgate::clock::FakeClock;
//! use tollgate::clock::Clock;
//! use tollgate::key::Client;
//! use tollgate::store::{BucketRef, CheckMode, CheckRequest, MemoryStore, RuleId, Store};
//! use tollgate::Quota;
//!
//! let store = MemoryStore::new();
//! let quotas = [Quota::new("1/min".parse()?, NonZeroU32::new(1).unwrap()).unwrap()];
//! let client = Client::from_ip("192.0.2.1".parse().unwrap(), 64);
//! let request = CheckRequest {
//!     bucket: BucketRef { rule: RuleId::new(0), client: Some(&client) },
//!     quotas: &quotas,
//!     cost: 1,
//!     algorithm: tollgate::Algorithm::Gcra,
//!     strict: false,
//!     shaping: &tollgate::Shaping::NONE,
//!     now: FakeClock::new().now(),
//!     mode: CheckMode::Consume,
//! };
//! assert!(store.check(request).into_inner()?.allowed());
//! assert!(!store.check(request).into_inner()?.allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod all_or_nothing;
mod backend;
#[cfg(feature = "disk")]
mod disk;
mod inspect;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod rules;
mod snapshot;

use std::future::Future;
use std::pin::Pin;

pub use backend::{BackendFuture, BackendStore};
#[cfg(feature = "disk")]
pub use disk::DiskStore;
#[cfg(feature = "disk")]
pub(crate) use disk::disk_value;
pub(crate) use inspect::TopRows;
pub use inspect::{BucketQuery, BucketRow, BucketSort, CALLER_DEFINED_PREFIX, CALLER_DEFINED_RULE};
pub use memory::{BucketState, DamagedState, MemoryStore};
#[cfg(feature = "redis")]
pub use redis::{CLAIMS_PER_CALL, RedisFuture, RedisStore, ShareClaim, SharePart, ShareTerms};
pub use rules::{StoreRules, StoredRule};
pub use snapshot::SnapshotError;

/// The future of [`Store::check_all`]: one decision per request, in order.
pub type ManyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Decision>, StoreError>> + Send + 'a>>;

/// The boxed future of an occasional, administrative store call.
pub type AdminFuture<T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send>>;

pub use crate::algorithm::CheckMode;
pub use crate::config::RuleId;

use crate::Quota;
use crate::algorithm::{Algorithm, Shaping};
use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::key::Client;

/// Which bucket: a rule, and the client for `per = "client"` rules (`None` for
/// `per = "global"`, one bucket for everyone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketRef<'a> {
    /// The rule the request resolved to.
    pub rule: RuleId,
    /// The client, or `None` for a rule's single global bucket.
    pub client: Option<&'a Client<'a>>,
}

impl std::hash::Hash for BucketRef<'_> {
    /// The commonest bucket (a rule and an IPv4 client) is one word, hashed in one write;
    /// the rest hash their rule and client field by field. (Distinct buckets may share a
    /// word across the two forms; equality, not the hash, tells them apart.)
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self.client {
            Some(Client::Ip(std::net::IpAddr::V4(ip))) => {
                state.write_u64((u64::from(self.rule.get()) << 32) | u64::from(ip.to_bits()));
            }
            client => {
                self.rule.hash(state);
                client.hash(state);
            }
        }
    }
}

/// Everything a store needs for one decision.
#[derive(Clone, Copy, Debug)]
pub struct CheckRequest<'a> {
    /// The bucket to check.
    pub bucket: BucketRef<'a>,
    /// The rule's quotas; all must admit.
    pub quotas: &'a [Quota],
    /// Tokens the request takes.
    pub cost: u64,
    /// The rule's algorithm.
    pub algorithm: Algorithm,
    /// Whether refused requests hold the refill back.
    pub strict: bool,
    /// Delay and warm-up (token-bucket rules only); `&Shaping::NONE` for plain limits.
    pub shaping: &'a Shaping,
    /// The one reading of the clock this decision is made at.
    pub now: Timestamp,
    /// Consume or peek.
    pub mode: CheckMode,
}

/// A concurrency slot held in a store shared with other instances (a lease in Redis):
/// dropping it gives the slot back.
pub struct SharedSlot {
    in_flight: u32,
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl SharedSlot {
    /// A slot released when `guard` is dropped; `in_flight` in its bucket, itself included.
    pub fn new(in_flight: u32, guard: Box<dyn std::any::Any + Send + Sync>) -> SharedSlot {
        SharedSlot {
            in_flight,
            _guard: guard,
        }
    }

    /// Requests in flight in the bucket when the slot was taken, everywhere, this one
    /// included.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The guard, whose drop releases the slot.
    pub fn into_guard(self) -> Box<dyn std::any::Any + Send + Sync> {
        self._guard
    }
}

impl std::fmt::Debug for SharedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSlot")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl<'a> CheckRequest<'a> {
    /// The same request as a peek: what it would do, changing nothing.
    pub fn peek(&self) -> CheckRequest<'a> {
        CheckRequest {
            mode: CheckMode::Peek,
            ..*self
        }
    }
}

/// A shared slot on its way: `Ok(None)` when the cap is reached.
pub type SlotFuture = Pin<Box<dyn Future<Output = Result<Option<SharedSlot>, StoreError>> + Send>>;

/// A store could not decide (a network backend's failure; the in-memory store never fails).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend did not answer usefully.
    #[error("rate-limit store unavailable: {reason}")]
    Unavailable {
        /// What went wrong, for logs.
        reason: String,
    },
    /// The store cannot be made as configured (a malformed Redis URL, say).
    #[error("rate-limit store misconfigured: {reason}")]
    Invalid {
        /// What is wrong with the configuration.
        reason: String,
    },
}

/// A place that keeps buckets and decides against them.
///
/// The future is `Unpin` so the layer can poll it once in place: a store that answers
/// immediately costs nothing extra. Remote stores return a boxed future.
///
/// # A store of your own
///
/// One method is required, [`check`](Store::check); [`check_all`](Store::check_all)
/// defaults to peek-then-take. What else a store can do is an optional trait of its own,
/// offered through an accessor that defaults to `None`: [`Housekeeping`] (meeting each rule
/// set, forgetting removed rules, sweeping), [`Snapshots`], [`Inspection`] (the bucket
/// page) and [`SharedCaps`] (concurrency caps across instances), as governor keeps its
/// housekeeping apart from its one-method state store. [`BucketState`] is tollgate's engine for one bucket — every algorithm,
/// strict mode, peeks, refunds, shaping, carry-over across reloads — as bytes to keep
/// wherever you like. This store (`examples/custom_store.rs`, which the test matrix holding
/// the memory, Redis and disk stores to the same decisions runs too) keeps them in a map:
///
#[doc = concat!("```\n", include_str!("../../examples/custom_store.rs"), "\n```")]
pub trait Store: Send + Sync + 'static {
    /// The pending answer.
    type Future: Future<Output = Result<Decision, StoreError>> + Send + Unpin + 'static;

    /// Decides `request`, taking its tokens when admitted in [`CheckMode::Consume`].
    ///
    /// Buckets whose rule changed its rates since they were last touched carry their
    /// consumption over into the new quotas; see the GCRA module docs.
    fn check(&self, request: CheckRequest<'_>) -> Self::Future;

    /// What kind of store this is, in a word, for traces (`ratelimit.store`): `memory`,
    /// `redis`, `disk`; `custom` unless a store says otherwise.
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// Decides `requests` together: if every one is admitted, all take their tokens; if any
    /// is refused, none takes anything (a strict bucket that refuses still holds its refill
    /// back; a charge or a refund reaches every bucket; requests naming one bucket are
    /// decided as one, their costs summed). The in-memory store does it atomically
    /// ([`MemoryStore::decide_all`]); this default looks at every bucket, then takes from
    /// each, so a concurrent request can come between the two (a store that can do better
    /// says so).
    fn check_all<'a>(&'a self, requests: &'a [CheckRequest<'a>]) -> ManyFuture<'a> {
        Box::pin(async move {
            let (buckets, member) = all_or_nothing::by_bucket(requests, |_| ());
            let mut decided = Vec::with_capacity(buckets.len());
            if !all_or_nothing::consuming(requests) {
                for (request, ()) in &buckets {
                    decided.push(self.check(*request).await?);
                }
                return Ok(all_or_nothing::in_order(&decided, &member));
            }
            let mut peeks = Vec::with_capacity(buckets.len());
            for (request, ()) in &buckets {
                peeks.push(self.check(request.peek()).await?);
            }
            let admitted = peeks.iter().all(Decision::allowed);
            for ((request, ()), peek) in buckets.iter().zip(peeks) {
                decided.push(if all_or_nothing::takes(request, &peek, admitted) {
                    self.check(*request).await?
                } else {
                    peek
                });
            }
            Ok(all_or_nothing::in_order(&decided, &member))
        })
    }

    /// Its housekeeping — meeting each rule set, dropping removed rules' buckets,
    /// sweeping refilled ones — if it keeps any ([`Housekeeping`]); the default: none.
    fn housekeeping(&self) -> Option<&dyn Housekeeping> {
        None
    }

    /// Its snapshots to `[store] snapshot`, if it writes any ([`Snapshots`]); the default:
    /// none (a shared store outlives its clients anyway).
    fn snapshots(&self) -> Option<&dyn Snapshots> {
        None
    }

    /// Its buckets listed and forgiven for introspection, if it can ([`Inspection`]); the
    /// default: nothing to list.
    fn inspection(&self) -> Option<&dyn Inspection> {
        None
    }

    /// Concurrency caps shared with the other instances using it, if it shares them
    /// ([`SharedCaps`]); the default: caps are kept in this process.
    fn shared_caps(&self) -> Option<&dyn SharedCaps> {
        None
    }
}

/// A store's housekeeping ([`Store::housekeeping`]). Each method defaults to doing nothing.
pub trait Housekeeping: Send + Sync {
    /// Meets a newly compiled rule set before it takes effect (at load and at every
    /// reload): its `[store]` table, and its rules' keys for stores that name buckets by
    /// them.
    fn configure(&self, rules: &StoreRules) {
        let _ = rules;
    }

    /// Drops the buckets of rules a reload removed (stores whose buckets expire by
    /// themselves may ignore it).
    fn forget(&self, rules: &[RuleId]) {
        let _ = rules;
    }

    /// Drops buckets that have refilled completely — they are indistinguishable from new
    /// ones — and returns how many. Called in the background every `sweep_interval`.
    fn sweep(&self, now: Timestamp) -> usize {
        let _ = now;
        0
    }
}

/// A store's snapshots ([`Store::snapshots`]): its buckets written to `[store] snapshot`
/// and read back at start.
pub trait Snapshots: Send + Sync {
    /// Writes the buckets to `[store] snapshot`, if set, and returns how many were written.
    fn save_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError>;

    /// Reads the buckets back from `[store] snapshot`, if set, at start.
    fn restore_snapshot(&self, rules: &StoreRules, now: Timestamp) -> Result<usize, SnapshotError>;
}

/// A store's buckets for introspection ([`Store::inspection`]): the admin listener's
/// bucket page and its forgiving.
pub trait Inspection: Send + Sync {
    /// Lists buckets, filtered, sorted and bounded as `query` asks.
    fn buckets(&self, query: BucketQuery) -> AdminFuture<Vec<BucketRow>>;

    /// Drops one bucket — forgiving a client — and says whether it existed.
    fn remove(&self, bucket: BucketRef<'_>) -> AdminFuture<bool>;
}

/// Concurrency caps shared with other instances ([`Store::shared_caps`]).
pub trait SharedCaps: Send + Sync {
    /// Takes one of `limit` slots of `bucket`'s concurrency cap, shared with the other
    /// instances using this store. `None`: it cannot now (no runtime to wait on it, say),
    /// and the caller keeps this cap in this process.
    fn acquire_slot(&self, bucket: BucketRef<'_>, limit: u32) -> Option<SlotFuture>;
}
