//! `backend = "redis-cluster"` against a real cluster of six redis-servers (3 masters, 3
//! replicas): shared budgets, buckets on every master, one slot and one round trip per
//! decision, the same decisions as memory, and a master killed under traffic.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use tollgate::store::{BackendStore, BucketQuery, BucketSort, Inspection};
use tollgate::{Limits, RateLimitLayer};

use crate::redis_backend::assert_decides_as_memory;
use crate::support::cluster::{RedisCluster, cluster_nodes};
use crate::support::{get as send, serve};

/// A `[store]` table for `cluster` under `prefix`, with `url` its seed list.
fn store_table(url: &str, prefix: &str, extra: &str) -> String {
    format!(
        "[store]\nbackend = \"redis-cluster\"\nurl = {url}\nkey_prefix = \"{prefix}:\"\n{extra}\n"
    )
}

/// The seed list as TOML: one node, or all of them.
fn seeds(cluster: &RedisCluster, all: bool) -> String {
    let urls = cluster.urls();
    if all {
        format!(
            "[{}]",
            urls.iter()
                .map(|u| format!("\"{u}\""))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("\"{}\"", urls[0])
    }
}

/// Redis Cluster's slot of `key` (CRC16 of its hash tag).
fn slot(key: &str) -> u16 {
    let open = key.find('{').unwrap();
    let close = key[open..].find('}').unwrap() + open;
    crc16::State::<crc16::XMODEM>::calculate(&key.as_bytes()[open + 1..close]) % 16_384
}

fn instance(config: &str) -> Limits<BackendStore> {
    Limits::builder()
        .store(BackendStore::new())
        .from_toml(config)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_budget_and_buckets_land_on_every_master() {
    let Some(cluster) = RedisCluster::shared("two_gateways_share_one_budget") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let rule = "[limits]\n\"/\" = \"6/h\"\n";
    // One seeds with a single node, the other with all six: both find the whole cluster.
    let a = instance(&format!(
        "{}{rule}",
        store_table(&seeds(cluster, false), "shared", "timeout = \"2s\"")
    ));
    let b = instance(&format!(
        "{}{rule}",
        store_table(&seeds(cluster, true), "shared", "timeout = \"2s\"")
    ));
    assert!(a.store().redis().unwrap().is_cluster());

    let mut admitted = 0;
    for i in 0..12 {
        let limits = if i % 2 == 0 { &a } else { &b };
        if limits.check("203.0.113.7", 1).await.unwrap().allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 6, "two gateways, one budget of 6 an hour");

    for client in 0..90 {
        assert!(
            a.check(&format!("10.0.0.{client}"), 1)
                .await
                .unwrap()
                .allowed()
        );
    }
    for limits in [&a, &b] {
        let redis = limits.store().redis().unwrap();
        assert!(
            !redis.breaker_open() && redis.local().is_empty(),
            "every decision came from the cluster (no MOVED fallback)"
        );
    }
    for master in cluster.masters() {
        let keys = cluster.keys_on(master, "shared:*");
        assert!(
            keys.len() >= 10,
            "master {master} holds {} of 91 buckets: clients spread over every master",
            keys.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_quota_rule_decides_in_one_slot_in_one_round_trip() {
    let Some(cluster) = RedisCluster::shared("a_multi_quota_rule_decides_in_one_slot") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let limits = instance(&format!(
        "{}[limits]\nlogin = {{ rate = [\"3/2s\", \"10/min\"], algorithm = \"sliding-window\" }}\n\
         api = {{ rate = [\"5/s\", \"100/h\"] }}\n",
        store_table(&seeds(cluster, false), "multi", "timeout = \"2s\"")
    ));
    // Warm up: connections and the script on every node.
    limits.check("api/warm", 1).await.unwrap();
    let before = cluster.command_calls("evalsha");
    for _ in 0..5 {
        limits.check("login/198.51.100.4", 1).await.unwrap();
        limits.check("api/198.51.100.4", 1).await.unwrap();
    }
    let calls = cluster.command_calls("evalsha") - before;
    assert_eq!(calls, 10, "one EVALSHA per decision, whatever the quotas");
    let redis = limits.store().redis().unwrap();
    assert!(
        !redis.breaker_open() && redis.local().is_empty(),
        "no CROSSSLOT, no fallback"
    );
    let keys: Vec<String> = cluster
        .masters()
        .into_iter()
        .flat_map(|master| cluster.keys_on(master, "multi:*198.51.100.4*"))
        .collect();
    assert_eq!(keys.len(), 2, "one key per rule and client: {keys:?}");
    for key in &keys {
        assert_eq!(cluster.slot(key), slot(key));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_decides_as_memory_does() {
    let Some(cluster) = RedisCluster::shared("the_cluster_decides_as_memory_does") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let seed = seeds(cluster, false);
    assert_decides_as_memory(|index| {
        store_table(&seed, &format!("matrix{index}"), "timeout = \"2s\"")
    })
    .await;
}

/// A client whose bucket under rule `"/"` and `prefix` lives in the slots of `master`.
fn clients_on(cluster: &RedisCluster, master: u16, prefix: &str, count: usize) -> Vec<String> {
    let ranges: Vec<_> = cluster_nodes(cluster.any_port())
        .into_iter()
        .filter(|node| node.port == master)
        .flat_map(|node| node.slots)
        .collect();
    (0..100_000)
        .map(|i| format!("c{i}"))
        .filter(|client| {
            let slot = slot(&format!("{prefix}:{{/{client}}}c"));
            ranges.iter().any(|range| range.contains(&slot))
        })
        .take(count)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_master_gives_no_5xx_and_shared_decisions_resume_after_promotion() {
    let Some(cluster) = RedisCluster::start("killing_a_master_gives_no_5xx") else {
        return;
    };
    let config = format!(
        "{}[client]\nsources = [\"header:x-client\"]\n[limits]\n\"/\" = \"1000/h\"\n",
        store_table(&seeds(&cluster, true), "failover", "")
    );
    let a = instance(&config);
    let b = instance(&config);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(a.clone()));
    let address = serve(app).await;

    let victim = cluster.masters()[0];
    let mut probes = clients_on(&cluster, victim, "failover", 400).into_iter();
    let survivor = cluster.masters()[1];
    let mut elsewhere = clients_on(&cluster, survivor, "failover", 400).into_iter();
    let steady = probes.next().unwrap();
    // Before: shared through the cluster.
    let first = send(address, "/", &[("x-client", &steady)]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(b.peek(&steady).await.unwrap().remaining(), 999);

    cluster.kill(victim);
    let killed = Instant::now();
    let mut statuses = Vec::new();
    let mut resumed = None;
    let (mut elsewhere_shared, mut elsewhere_total) = (0, 0);
    let deadline = killed + Duration::from_secs(30);
    while Instant::now() < deadline {
        let reply = send(address, "/", &[("x-client", &steady)]).await;
        statuses.push(reply.status);
        // A fresh client on the dead master's slots: taken through A, seen through B?
        let probe = probes.next().expect("enough probe clients");
        let taken = send(address, "/", &[("x-client", &probe)]).await;
        statuses.push(taken.status);
        // A client on a master still alive: its shard has its own breaker, so its
        // decisions mostly stay shared meanwhile (not all: the cluster client holds every
        // request while it re-reads the topology, and some wait past `timeout`).
        let other = elsewhere.next().expect("enough clients elsewhere");
        send(address, "/", &[("x-client", &other)]).await;
        elsewhere_total += 1;
        if b.peek(&other).await.unwrap().remaining() == 999 {
            elsewhere_shared += 1;
        }
        if b.peek(&probe).await.unwrap().remaining() == 999 {
            resumed = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "every request answered, none refused or failed: {statuses:?}"
    );
    let resumed = resumed.expect("shared decisions resume within 30 s of the kill");
    eprintln!(
        "failover: shared decisions resumed {resumed:?} after the master was killed ({} requests \
         meanwhile); clients of the other masters shared in {elsewhere_shared} of {elsewhere_total}",
        statuses.len()
    );
    // With one breaker for the whole cluster, the dead master's failures would send nearly
    // every decision to on_backend_error until the promotion.
    assert!(
        elsewhere_shared * 2 >= elsewhere_total,
        "one master's outage sends only its own slots to on_backend_error: \
         {elsewhere_shared} of {elsewhere_total} shared"
    );
    let promoted = cluster.master_of(slot(&format!("failover:{{/{steady}}}c")));
    assert!(
        promoted.is_some_and(|port| port != victim),
        "a replica was promoted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_listing_scans_every_master_and_forgiving_works() {
    let Some(cluster) = RedisCluster::shared("the_bucket_listing_scans_every_master") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let limits = instance(&format!(
        "{}[limits]\n\"/\" = \"10/min\"\nlogin = \"4/min\"\n",
        store_table(&seeds(cluster, false), "listing", "timeout = \"2s\"")
    ));
    for client in 0..30 {
        let cost = if client % 3 == 0 { 3 } else { 1 };
        let key = format!("login/10.1.0.{client}");
        assert!(limits.check(&key, cost).await.unwrap().allowed());
    }
    let mut query = BucketQuery::new(limits.rules().clone(), limits.now());
    query.prefix = "login/".into();
    query.max_fraction = Some(0.5);
    query.sort = BucketSort::Key;
    query.limit = 100;
    let below_half = limits.store().buckets(query.clone()).await.unwrap();
    assert_eq!(
        below_half.len(),
        10,
        "the ten clients that took 3 of 4, whichever master holds them"
    );
    let masters_holding: usize = cluster
        .masters()
        .into_iter()
        .filter(|&master| !cluster.keys_on(master, "listing:{login/*").is_empty())
        .count();
    assert_eq!(
        masters_holding, 3,
        "the listed buckets are spread over every master"
    );

    let rules = limits.rules();
    let client = tollgate::key::Client::from_segment("10.1.0.0");
    let bucket = tollgate::store::BucketRef {
        rule: rules.get("login").unwrap().id(),
        client: Some(&client),
    };
    assert!(limits.store().remove(bucket).await.unwrap(), "forgiven");
    let after = limits.store().buckets(query).await.unwrap();
    assert_eq!(after.len(), 9, "a forgiven bucket is gone from its master");
}

/// Hybrid mode on a cluster: leases taken from buckets on every master, spent locally,
/// and given back — in one pipeline per master — so that the shared budgets end exactly
/// where a strict limiter's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_leases_on_every_master_are_given_back_exactly() {
    let Some(cluster) = RedisCluster::shared("hybrid_leases_on_every_master") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    // 10 tokens a second, room for 1000; two instances lease at most 1 s × 10/s ÷ 2 = 5.
    let rule = "[limits]\n\"api\" = { rate = \"10/s\", burst = 1000 }\n";
    let hybrid = store_table(
        &seeds(cluster, true),
        "hybrid",
        "timeout = \"2s\"\nsync = \"local\"\nsync_interval = \"1s\"",
    );
    let fleet = [
        instance(&format!("{hybrid}{rule}")),
        instance(&format!("{hybrid}{rule}")),
    ];
    let clock = tollgate::clock::FakeClock::new();
    let neutral = Limits::builder()
        .store(BackendStore::new())
        .clock(clock.clone())
        .from_toml(&format!(
            "{}{rule}",
            store_table(&seeds(cluster, true), "hybrid", "timeout = \"2s\"")
        ))
        .unwrap();
    neutral.store().redis().unwrap().use_caller_time(true);
    let t0 = tollgate::clock::Clock::now(&clock);
    let at = |seconds: f64| {
        tollgate::clock::Timestamp::from_unix_nanos(
            t0.as_unix_nanos()
                .wrapping_add_signed((seconds * 1e9) as i64),
        )
    };
    for limits in &fleet {
        limits.store().redis().unwrap().use_caller_time(true);
    }
    for warm in [-3.0, -0.5] {
        for limits in &fleet {
            limits.store().redis().unwrap().sync_at(at(warm)).await;
        }
    }
    assert_eq!(fleet[0].store().redis().unwrap().instances(), 2);

    let clients: Vec<String> = (0..30).map(|i| format!("api/198.51.100.{i}")).collect();
    let calls_before = cluster.command_calls("evalsha");
    for client in &clients {
        for limits in &fleet {
            for _ in 0..148 {
                assert!(limits.check_at(client, 1, t0).await.unwrap().allowed());
            }
        }
    }
    let calls = cluster.command_calls("evalsha") - calls_before;
    assert!(
        calls < 8_880 / 4,
        "{calls} Redis calls for 8880 decisions: most were local"
    );
    let masters: std::collections::BTreeSet<_> = clients
        .iter()
        .map(|c| cluster.master_of(cluster.slot(&format!("hybrid:{{{c}}}c"))))
        .collect();
    assert_eq!(masters.len(), 3, "the clients' buckets are on every master");

    // Ten seconds later (idle long enough), 100 tokens have refilled: a strict limiter
    // shows 1000 - 296 + 100 = 804 left. Until the leases are given back, Redis shows less
    // (148 is not a whole number of 1 + 5: a lease is left over).
    clock.advance(Duration::from_secs(10));
    let mut short = 0;
    for client in &clients {
        let remaining = neutral.peek(client).await.unwrap().remaining();
        assert!(remaining <= 804, "{client}: {remaining}");
        if remaining < 804 {
            short += 1;
        }
    }
    assert!(short > 0, "some leases were outstanding");
    for limits in &fleet {
        limits.store().redis().unwrap().sync_at(at(10.0)).await;
    }
    for client in &clients {
        assert_eq!(
            neutral.peek(client).await.unwrap().remaining(),
            804,
            "{client}: every unspent lease given back to its master"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_two_instances_share_one_budget_across_every_master() {
    let pki = crate::support::certs::Pki::new("cluster");
    // For the addresses the nodes announce, and for a DNS name: `server_name` below.
    let server = pki.node_for("node", &["localhost", "127.0.0.1", "redis.internal"]);
    let tls = crate::support::cluster::ClusterTls {
        cert: server.cert.clone(),
        key: server.key.clone(),
        ca: pki.ca.clone(),
    };
    let Some(cluster) = RedisCluster::start_tls("over_tls_two_instances_share_one_budget", &tls)
    else {
        return;
    };
    let urls = format!(
        "[{}]",
        cluster
            .tls_urls()
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let config = format!(
        "{}[store.tls]\nca_file = \"{}\"\n[limits]\n\"/\" = \"3/h\"\n",
        store_table(
            &urls,
            "tls",
            "on_backend_error = \"deny\"\ntimeout = \"1s\""
        ),
        pki.ca.display()
    );
    let (a, b) = (instance(&config), instance(&config));
    // Clients spread over the three masters, each with one budget of 3 shared by A and B.
    for client in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] {
        let key = format!("x/{client}");
        let mut admitted = 0;
        for limits in [&a, &b, &a, &b] {
            if limits.check(&key, 1).await.unwrap().allowed() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 3, "{client}: one budget of 3, shared over TLS");
    }
    let holding: Vec<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&port| !cluster.keys_on(port, "tls:*").is_empty())
        .collect();
    assert!(
        holding.len() >= 2,
        "buckets on several masters: {holding:?}"
    );

    // `[store.tls] server_name`: every node — seeds, the masters decisions go to straight,
    // and the nodes the cluster client finds — is verified against the name, not the
    // address it is reached at. By address, as the nodes announce themselves.
    let by_address = format!(
        "[{}]",
        cluster
            .tls_urls()
            .iter()
            .map(|u| format!("\"{}\"", u.replace("localhost", "127.0.0.1")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let named = |name: &str, prefix: &str| {
        instance(&format!(
            "{}[store.tls]\nca_file = \"{}\"\nserver_name = \"{name}\"\n[limits]\n\"/\" = \"3/h\"\n",
            store_table(
                &by_address,
                prefix,
                "on_backend_error = \"deny\"\ntimeout = \"1s\""
            ),
            pki.ca.display()
        ))
    };
    let wrong = named("other.internal", "wrong");
    assert!(
        !wrong.check("x/alpha", 1).await.unwrap().allowed(),
        "a certificate not for server_name is refused"
    );
    let (a, b) = (
        named("redis.internal", "named"),
        named("redis.internal", "named"),
    );
    for client in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] {
        let key = format!("x/{client}");
        let mut admitted = 0;
        for limits in [&a, &b, &a, &b] {
            if limits.check(&key, 1).await.unwrap().allowed() {
                admitted += 1;
            }
        }
        assert_eq!(
            admitted, 3,
            "{client}: one budget of 3, over TLS named redis.internal"
        );
    }
    let holding: Vec<u16> = cluster
        .masters()
        .into_iter()
        .filter(|&port| !cluster.keys_on(port, "named:*").is_empty())
        .collect();
    assert!(
        holding.len() >= 2,
        "named: buckets on several masters: {holding:?}"
    );
    assert!(
        cluster
            .masters()
            .iter()
            .all(|&port| cluster.keys_on(port, "wrong:*").is_empty()),
        "nothing reached a node whose certificate was not checked"
    );
}

/// `connected_clients` of the node on `port`.
fn clients_of(port: u16) -> u64 {
    crate::support::cluster::cli(port, &["INFO", "clients"])
        .lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Decisions go straight to the master of their slot over `[store] connections`
/// connections per master (the cluster client's one per node stays for redirections and
/// the listing), so `connections` means on a Cluster what it means on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_master_gets_the_configured_connections() {
    let Some(cluster) = RedisCluster::shared("each_master_gets_the_configured_connections") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    // Connections of tests before this one close as their runtimes end.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let masters = cluster.masters();
    let before: Vec<u64> = masters.iter().map(|&port| clients_of(port)).collect();
    let limits = instance(&format!(
        "{}[limits]\n\"/\" = \"100/s\"\n",
        store_table(
            &seeds(cluster, false),
            "connections",
            "timeout = \"2s\"\nconnections = 3"
        )
    ));
    // Warm up: the slot table is read in the background after the first decision.
    limits.check("warm", 1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for client in 0..300 {
            limits.check(&format!("192.0.2.{client}"), 1).await.unwrap();
        }
        let grown: Vec<u64> = masters
            .iter()
            .zip(&before)
            .map(|(&port, &was)| clients_of(port).saturating_sub(was))
            .collect();
        if grown.iter().all(|&n| n >= 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every master gains the 3 configured connections: {grown:?} (before {before:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request's buckets on different masters: each taken on its own, those taken given
/// back when another refuses. No limit admits past its budget under concurrent requests,
/// and every token a refused request took comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stacked_limits_across_masters_never_overspend_and_give_back_what_a_refusal_took() {
    let Some(cluster) = RedisCluster::shared("stacked_limits_across_masters") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let config = format!(
        "{}[limits.\"/\"]\nrate = \"2/h\"\nalso.all = {{ rate = \"8/h\", per = \"global\" }}\n",
        store_table(
            &seeds(cluster, true),
            "stacked",
            "on_backend_error = \"deny\"\ntimeout = \"2s\""
        )
    );
    let limits = instance(&config);
    // Buckets on more than one master: the global one, and clients spread over all.
    let clients: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    let masters: std::collections::BTreeSet<Option<u16>> = clients
        .iter()
        .map(|c| cluster.master_of(cluster.slot(&format!("stacked:{{/{c}}}c"))))
        .chain([cluster.master_of(cluster.slot("stacked:{/#all}g"))])
        .collect();
    assert!(masters.len() >= 2, "{masters:?}");
    let mut tasks = Vec::new();
    for _ in 0..3 {
        for client in &clients {
            let limits = limits.clone();
            let key = client.clone();
            tasks.push(tokio::spawn(async move {
                limits.check(&key, 1).await.unwrap().allowed()
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        if task.await.unwrap() {
            admitted += 1;
        }
    }
    // Never more than the global budget. Fewer is possible while requests race: a token
    // one request took and gives back (its client's own bucket refused it) may be missing
    // for a moment to another (the README says so).
    assert!(admitted <= 8, "the global budget, never more: {admitted}");
    // What a refusal took from the global bucket came back: fresh clients, one at a time,
    // get exactly the rest of the budget.
    let mut later = 0;
    for fresh in 10..30 {
        if limits
            .check(&format!("s{fresh}"), 1)
            .await
            .unwrap()
            .allowed()
        {
            later += 1;
        }
    }
    assert_eq!(
        admitted + later,
        8,
        "the global budget, exactly, once requests settle"
    );
    // What each client's own bucket holds adds up to what was admitted: every token a
    // refused request took was given back.
    let mut left = 0;
    for client in &clients {
        left += local_remaining(&limits, client).await;
    }
    assert_eq!(
        left,
        clients.len() * 2 - admitted,
        "each client's own bucket gave back what its refused requests took"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_divided_among_instances_are_claimed_on_the_cluster_in_one_call() {
    use tollgate::store::{ShareClaim, ShareTerms};
    let Some(cluster) = RedisCluster::shared("budgets_divided_among_instances") else {
        return;
    };
    let _quiet = cluster.quiet().await;
    let config = format!(
        "{}[limits]\n\"/\" = \"6/h\"\n",
        store_table(&seeds(cluster, false), "shares", "timeout = \"2s\"")
    );
    let (a, b) = (instance(&config), instance(&config));
    let terms = ShareTerms::new(Duration::from_secs(30));
    // Budgets whose names would hash to different masters share the `{shares}` tag.
    let claims = |demand: f64| {
        ["api/a", "api/b", "login/c"]
            .map(|budget| ShareClaim::new(budget, 100.0, 10).demand(demand))
    };
    let first = a
        .store()
        .redis()
        .unwrap()
        .claim_shares(&claims(50.0), &terms)
        .await
        .unwrap();
    let second = b
        .store()
        .redis()
        .unwrap()
        .claim_shares(&claims(50.0), &terms)
        .await
        .unwrap();
    for (one, other) in first.iter().zip(&second) {
        assert_eq!((one.rate, other.rate, other.instances), (100.0, 0.0, 2));
    }
}

/// What `client`'s own bucket under `"/"` holds now (not the stack's speaker).
async fn local_remaining(limits: &Limits<BackendStore>, client: &str) -> usize {
    use tollgate::store::{BucketQuery, Inspection as _};
    let mut query = BucketQuery::new(limits.rules(), limits.now());
    query.prefix = client.to_owned();
    let rows = limits.store().buckets(query).await.unwrap();
    rows.iter()
        .find(|row| row.key == client)
        .map_or(2, |row| usize::try_from(row.remaining).unwrap_or(0))
}
