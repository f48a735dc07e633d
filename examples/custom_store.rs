//! A store of your own: buckets kept as bytes in a map — stand-in for a database, a
//! key-value service or a peer — and decided by tollgate's engine ([`BucketState`]).
//!
//! ```sh
//! cargo run --example custom_store
//! ```
//!
//! One method is required, [`Store::check`]; the rest have defaults (several buckets at
//! once by peek-then-take, no sweeping, no snapshots, no listing). This very file is the
//! example in the `Store` trait's docs, and the test matrix that holds the memory, Redis
//! and disk stores to the same decisions runs it too.

use std::collections::HashMap;
use std::future::{Ready, ready};
use std::sync::Mutex;

use tollgate::Decision;
use tollgate::key::Client;
use tollgate::store::{BucketState, CheckRequest, RuleId, Store, StoreError};

/// A bucket's name: its rule, and its client (none: the rule's one global bucket).
type BucketName = (RuleId, Option<Client<'static>>);

/// Buckets as bytes, by name.
#[derive(Default)]
pub struct MapStore {
    buckets: Mutex<HashMap<BucketName, Vec<u8>>>,
}

impl Store for MapStore {
    type Future = Ready<Result<Decision, StoreError>>;

    fn check(&self, request: CheckRequest<'_>) -> Self::Future {
        let client = request
            .bucket
            .client
            .map(|client| client.clone().into_owned());
        let Ok(mut buckets) = self.buckets.lock() else {
            return ready(Err(StoreError::Unavailable {
                reason: "the map's lock is poisoned".into(),
            }));
        };
        // Read the bucket (or start a new one), decide, write it back.
        let mut bucket = buckets
            .get(&(request.bucket.rule, client.clone()))
            .and_then(|bytes| BucketState::from_bytes(bytes).ok())
            .unwrap_or_else(|| BucketState::new(&request));
        let decision = bucket.decide(&request);
        buckets.insert((request.bucket.rule, client), bucket.to_bytes());
        ready(Ok(decision))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limits = tollgate::Limits::builder()
        .store(MapStore::default())
        .from_toml("[limits]\n\"login\" = \"2/min\"\n")?;
    assert!(limits.check("login/alice", 1).await?.allowed());
    assert!(limits.check("login/alice", 1).await?.allowed());
    let third = limits.check("login/alice", 1).await?;
    assert!(!third.allowed());
    assert_eq!(third.retry_after_secs(), 30);
    assert!(
        limits.check("login/bob", 1).await?.allowed(),
        "a bucket each"
    );
    Ok(())
}
