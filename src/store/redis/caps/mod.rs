//! Concurrency caps shared through Redis: a lease per slot in a sorted set (`slots.lua`),
//! renewed while its request is in flight (`inflight`: taking, renewing and giving back),
//! and the leases this instance holds (`held`), so a dead instance's slots expire within
//! `[store] concurrency_lease`.

mod held;
mod inflight;

pub(super) use held::HeldLeases;
