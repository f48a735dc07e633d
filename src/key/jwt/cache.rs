//! Tokens already verified: a bounded table by the token's SHA-256 digest (never the token
//! itself) → its claims, each kept until the token expires. A token is verified with a
//! public-key signature once, then found here while it lasts; a new key set makes a new
//! verifier, and so an empty cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::key::{ApiKeys, Claims, KeyDigest};

/// The most tokens kept: a few hundred bytes each.
pub(super) const CAPACITY: usize = 16 * 1024;

/// Verified tokens by digest.
#[derive(Default)]
pub(super) struct TokenCache {
    entries: Mutex<HashMap<KeyDigest, Entry, foldhash::fast::FixedState>>,
}

struct Entry {
    claims: Arc<Claims>,
    /// Unix seconds after which the token is no longer believed (its `exp` plus leeway).
    until: u64,
}

/// Seconds since the Unix epoch, now.
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl TokenCache {
    /// The digest a token is kept under.
    pub(super) fn digest(token: &str) -> KeyDigest {
        ApiKeys::digest(token.as_bytes())
    }

    /// The claims of the token with `digest`, if it verified before and has not expired.
    pub(super) fn get(&self, digest: &KeyDigest, now: u64) -> Option<Arc<Claims>> {
        let entries = self.entries.lock();
        let entry = entries.get(digest)?;
        (now <= entry.until).then(|| Arc::clone(&entry.claims))
    }

    /// Keeps `claims` under `digest` until `until`; when full, expired tokens go first,
    /// then (if none had) everything: a burst of new tokens costs verifications, not memory.
    pub(super) fn insert(&self, digest: KeyDigest, claims: Arc<Claims>, until: u64, now: u64) {
        let mut entries = self.entries.lock();
        if entries.len() >= CAPACITY {
            entries.retain(|_, entry| now <= entry.until);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(digest, Entry { claims, until });
    }

    /// How many tokens are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_found_until_it_expires_and_the_table_stays_bounded() {
        let cache = TokenCache::default();
        let claims = Arc::new(Claims::default());
        let digest = TokenCache::digest("t");
        cache.insert(digest, Arc::clone(&claims), 100, 50);
        assert!(cache.get(&digest, 100).is_some());
        assert!(cache.get(&digest, 101).is_none(), "expired");
        for n in 0..CAPACITY + 10 {
            let digest = TokenCache::digest(&n.to_string());
            cache.insert(digest, Arc::clone(&claims), 200, 150);
        }
        assert!(cache.len() <= CAPACITY);
    }
}
