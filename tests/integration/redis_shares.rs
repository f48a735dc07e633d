//! Budgets divided among instances through a real `redis-server` (`claim_shares`): the
//! parts never sum past the budget, follow demand, are given up only once no longer held,
//! come back from an instance that stopped claiming, and many budgets go in a few calls.

use std::time::Duration;

use tollgate::config::RedisSettings;
use tollgate::store::{CLAIMS_PER_CALL, RedisStore, ShareClaim, SharePart, ShareTerms};

use crate::support::redis::RedisServer;

fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    let mut settings = RedisSettings::default();
    settings.url = server.url();
    settings.nodes = vec![server.url()];
    settings.key_prefix = format!("{prefix}:");
    RedisStore::new(&settings).unwrap()
}

/// Whether `part` is `rate` (to the millionth it is rounded to) and `burst`.
fn is(part: SharePart, rate: f64, burst: u32) -> bool {
    (part.rate - rate).abs() < 2e-6 && part.burst == burst
}

async fn claim(store: &RedisStore, claim: ShareClaim, terms: &ShareTerms) -> SharePart {
    store.claim_shares(&[claim], terms).await.unwrap()[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_follow_demand_within_the_budget_and_a_part_is_given_up_once_no_longer_held() {
    let Some(server) = RedisServer::start("shares by demand") else {
        return;
    };
    let terms = ShareTerms::new(Duration::from_secs(30));
    let (busy, quiet) = (store(&server, "demand"), store(&server, "demand"));
    let budget = |demand| ShareClaim::new("api", 100.0, 20).demand(demand);

    // Alone, the busy instance may hand out the whole budget, and does.
    let first = claim(&busy, budget(90.0), &terms).await;
    assert!(is(first, 100.0, 20) && first.instances == 1, "{first:?}");
    // A second instance finds no room: the first still holds it all.
    let newcomer = claim(&quiet, budget(10.0), &terms).await;
    assert!(
        is(newcomer, 0.0, 0) && newcomer.instances == 2,
        "{newcomer:?}"
    );
    // The busy one's part shrinks to its demand's (a floor of 5 each, then 90 % of
    // 90 by demand: 86), but while its shares are still out its claim stays at 100…
    let shrunk = claim(&busy, budget(90.0).held(100.0, 20).part(100.0, 20), &terms).await;
    assert!(is(shrunk, 86.0, 17), "{shrunk:?}");
    let still = claim(&quiet, budget(10.0), &terms).await;
    assert!(is(still, 0.0, 0), "nothing given up yet: {still:?}");
    // …and once they are shrunk, the room is the quiet one's.
    claim(&busy, budget(90.0).held(86.0, 17).part(86.0, 17), &terms).await;
    let grown = claim(&quiet, budget(10.0), &terms).await;
    assert!(is(grown, 14.0, 2), "{grown:?}");
    assert!(shrunk.rate + grown.rate <= 100.0);

    // A part that barely moves stays as it was (each change refills Envoy's buckets).
    let steady = claim(&busy, budget(88.0).held(86.0, 17).part(86.0, 17), &terms).await;
    assert!(is(steady, 86.0, 17), "{steady:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_stops_claiming_gives_its_part_back_after_the_lifetime() {
    let Some(server) = RedisServer::start("shares expire") else {
        return;
    };
    let terms = ShareTerms::new(Duration::from_millis(400));
    let (gone, staying) = (store(&server, "expire"), store(&server, "expire"));
    let budget = |demand| ShareClaim::new("api", 50.0, 10).demand(demand);
    claim(&gone, budget(50.0), &terms).await;
    let before = claim(&staying, budget(50.0), &terms).await;
    assert!(is(before, 0.0, 0), "the first holds the budget: {before:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = claim(&staying, budget(50.0), &terms).await;
    assert!(is(after, 50.0, 10) && after.instances == 1, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_budgets_are_claimed_in_batches_each_answered_in_order() {
    let Some(server) = RedisServer::start("shares batches") else {
        return;
    };
    let terms = ShareTerms::new(Duration::from_secs(30));
    let one = store(&server, "batches");
    let count = CLAIMS_PER_CALL * 2 + 7;
    let claims: Vec<ShareClaim> = (0..count)
        .map(|i| ShareClaim::new(format!("api/{i}"), (i + 1) as f64, 1).demand(1.0))
        .collect();
    let before = server.command_calls("evalsha");
    let parts = one.claim_shares(&claims, &terms).await.unwrap();
    assert_eq!(parts.len(), count);
    assert!(
        parts
            .iter()
            .enumerate()
            .all(|(i, part)| is(*part, (i + 1) as f64, 1)),
        "each budget's own part, in order: {:?}",
        parts
            .iter()
            .enumerate()
            .find(|(i, part)| !is(**part, (*i + 1) as f64, 1))
    );
    // Three calls (the script may be loaded once more on the first).
    let calls = server.command_calls("evalsha") - before;
    assert!((3..=4).contains(&calls), "{calls} calls");
}
