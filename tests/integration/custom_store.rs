//! The custom store of `examples/custom_store.rs` (the `Store` trait's documented example):
//! buckets kept as bytes outside tollgate, decided by `BucketState`, give every decision of
//! the shared matrix exactly as the in-memory store does.

use tollgate::Limits;
use tollgate::clock::FakeClock;
use tollgate::store::MemoryStore;

use crate::redis_backend::{run, scenarios};

#[allow(dead_code)] // its `main` is the example's, run by `cargo test` as an example
#[path = "../../examples/custom_store.rs"]
mod example;

#[tokio::test]
async fn a_store_built_on_bucket_state_decides_the_matrix_as_memory_does() {
    let dir = tempfile::tempdir().unwrap();
    for (index, (name, rules, steps)) in scenarios().into_iter().enumerate() {
        let config = dir.path().join(format!("limits{index}.toml"));
        std::fs::write(&config, format!("[limits]\n{rules}")).unwrap();
        let (memory_clock, custom_clock) = (FakeClock::new(), FakeClock::new());
        let memory = Limits::builder()
            .store(MemoryStore::new())
            .clock(memory_clock.clone())
            .load([&config])
            .unwrap();
        let custom = Limits::builder()
            .store(example::MapStore::default())
            .clock(custom_clock.clone())
            .load([&config])
            .unwrap();
        let expected = run(&memory, &memory_clock, &config, "", &steps).await;
        // The memory run left the file as its last reload wrote it: start from the table.
        std::fs::write(&config, format!("[limits]\n{rules}")).unwrap();
        custom.reload().unwrap();
        let actual = run(&custom, &custom_clock, &config, "", &steps).await;
        assert_eq!(expected.len(), actual.len(), "{name}");
        for ((step, want), (_, got)) in expected.iter().zip(&actual) {
            assert_eq!(want, got, "{name}: {step}");
        }
    }
}
