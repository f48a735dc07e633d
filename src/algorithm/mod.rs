//! The limiting algorithms: pure arithmetic over an injected `now`, shared by every store.

pub(crate) mod gcra;
