//! Hybrid mode (`[store] sync = "local"`) against a real `redis-server`: the simulation
//! at a small size, asserting the documented bound, and four instances under concurrent
//! load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::clock::{Clock, FakeClock, SystemClock, Timestamp};
use tollgate::config::RedisSettings;
use tollgate::store::{BackendStore, RedisStore};

use crate::support::hybrid_sim::{Load, simulate};
use crate::support::redis::RedisServer;

/// At 4 instances and 100 ms: no request over the strict limiter beyond the bound (one
/// interval of the rate), and a small fraction of a Redis call per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulation_stays_within_the_bound_with_few_redis_calls() {
    let Some(server) = RedisServer::start("hybrid simulation") else {
        return;
    };
    for (index, load) in [Load::Steady, Load::Half, Load::Burst, Load::Edge]
        .into_iter()
        .enumerate()
    {
        let measured = simulate(&server, &format!("sim{index}"), 4, 100, load, 2).await;
        eprintln!(
            "{load}: {measured:?}: {:.3} of strict, {} over",
            measured.admitted_ratio(),
            measured.over()
        );
        assert!(
            measured.admitted <= measured.strict + measured.bound,
            "{load}: {measured:?}"
        );
        assert!(measured.admitted > 0, "{load}: {measured:?}");
        if matches!(load, Load::Steady | Load::Half) {
            assert!(measured.ops_per_request() <= 0.05, "{load}: {measured:?}");
        }
    }
}

/// Four instances in hybrid mode over one Redis (4 instances with `sync = "local"`).
fn fleet(server: &RedisServer, prefix: &str, rule: &str) -> Vec<Limits<RedisStore>> {
    fleet_syncing_every(server, prefix, rule, "100ms")
}

/// The same, settling every `interval`.
fn fleet_syncing_every(
    server: &RedisServer,
    prefix: &str,
    rule: &str,
    interval: &str,
) -> Vec<Limits<RedisStore>> {
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}:\"\n\
         sync = \"local\"\nsync_interval = \"{interval}\"\ntimeout = \"500ms\"\n[limits]\n{rule}",
        url = server.url()
    );
    let mut settings = RedisSettings::default();
    settings.url = server.url();
    settings.nodes = vec![server.url()];
    (0..4)
        .map(|_| {
            Limits::builder()
                .store(RedisStore::new(&settings).unwrap())
                .from_toml(&config)
                .unwrap()
        })
        .collect()
}

/// A limiter deciding in Redis (not hybrid), connected now: what the shared budget holds.
fn newcomer(server: &RedisServer, prefix: &str, rule: &str) -> Limits<BackendStore> {
    Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}:\"\n\
             [limits]\n{rule}\n",
            server.url()
        ))
        .unwrap()
}

/// Runs two heartbeat rounds on every instance, so that each counts the whole fleet.
async fn introduce(fleet: &[Limits<RedisStore>]) {
    let now = SystemClock::new().now();
    let later = Timestamp::from_unix_nanos(now.as_unix_nanos() + 2_100_000_000);
    for at in [now, later] {
        for limits in fleet {
            limits.store().sync_at(at).await;
        }
    }
    for limits in fleet {
        assert_eq!(limits.store().instances(), 4);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_under_concurrent_load_admit_within_the_bound_with_few_redis_calls() {
    let Some(server) = RedisServer::start("hybrid under load") else {
        return;
    };
    // 1000/s with a burst of 1000; one lease is at most 100 ms × 1000/s ÷ 4 = 25 tokens.
    let fleet = Arc::new(fleet(&server, "load", "\"api\" = \"1000/s\"\n"));
    introduce(&fleet).await;
    assert!(server.command("CONFIG RESETSTAT").is_some());

    // 80,000 requests at most: a short burst of CPU, so that tests running beside this one
    // (a cluster failover timed in seconds) are not starved.
    let admitted = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..16 {
        let fleet = Arc::clone(&fleet);
        let admitted = Arc::clone(&admitted);
        let requests = Arc::clone(&requests);
        tasks.spawn(async move {
            let limits = &fleet[task % 4];
            for _ in 0..5_000 {
                if started.elapsed() >= Duration::from_secs(2) {
                    break;
                }
                let decision = limits.check("api/203.0.113.7", 1).await.unwrap();
                requests.fetch_add(1, Ordering::Relaxed);
                if decision.allowed() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed);
    let requests = requests.load(Ordering::Relaxed);
    let calls = server.command_calls("evalsha") + server.command_calls("eval");

    // What one strict limiter could admit over the run, plus one interval of the rate.
    let strict = 1_000.0 + 1_000.0 * elapsed;
    let bound = 100.0;
    eprintln!(
        "{requests} requests in {elapsed:.2} s: {admitted} admitted (strict at most {strict:.0}), \
         {calls} Redis calls"
    );
    assert!(
        (admitted as f64) <= strict + bound,
        "admitted {admitted} over {strict:.0} + {bound}"
    );
    assert!(
        (admitted as f64) >= 0.8 * strict.min(requests as f64),
        "admitted {admitted} of a strict {strict:.0}: the budget is used"
    );
    assert!(requests > 4 * admitted, "the load was over the limit");
    // Without hybrid mode every request is one EVALSHA.
    assert!(
        (calls as f64) < 0.05 * requests as f64,
        "{calls} Redis calls for {requests} requests"
    );
    for limits in fleet.iter() {
        assert!(limits.store().local().is_empty(), "no decision fell back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_made_while_redis_was_down_are_charged_once_it_is_back() {
    let Some(mut server) = RedisServer::start("hybrid outage") else {
        return;
    };
    // Too slow to lease (10/min): every decision goes to Redis, or falls back.
    let fleet = fleet(&server, "outage", "\"login\" = \"10/min\"\n");
    introduce(&fleet).await;
    let instance = &fleet[0];
    server.kill();
    for _ in 0..3 {
        let decision = instance.check("login/198.51.100.4", 1).await.unwrap();
        assert!(decision.allowed(), "on_backend_error = local admits");
    }
    assert_eq!(instance.store().unsettled(), 3);
    let now = SystemClock::new().now();
    instance.store().sync_at(now).await;
    assert_eq!(
        instance.store().unsettled(),
        3,
        "kept while Redis is down, not dropped"
    );

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while instance.store().unsettled() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        instance.store().sync_at(SystemClock::new().now()).await;
    }
    assert_eq!(
        instance.store().unsettled(),
        0,
        "charged once Redis is back"
    );
    // A newcomer, connected after the restart, sees the three in the shared budget.
    let decision = newcomer(&server, "outage", "\"login\" = \"10/min\"")
        .peek("login/198.51.100.4")
        .await
        .unwrap();
    assert_eq!(
        decision.remaining(),
        7,
        "10 per minute, 3 spent during the outage"
    );
}

/// Windows are decided in Redis in hybrid mode too (only token buckets lease): a calendar
/// month and a sliding window in sub-windows are one budget across instances, and the
/// month ends at local midnight on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_and_sub_window_rules_share_one_budget_in_hybrid_mode() {
    let Some(server) = RedisServer::start("hybrid calendar") else {
        return;
    };
    let clock = tollgate::clock::FakeClock::new();
    // 2026-01-31 23:59 in Berlin.
    clock.advance(Duration::from_secs(2_674_740));
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"cal:\"\n\
         sync = \"local\"\nsync_interval = \"100ms\"\ntimeout = \"2s\"\n[limits]\n\
         month = {{ rate = \"4/month\", calendar = \"Europe/Berlin\" }}\n\
         fine = {{ rate = \"4/min\", algorithm = \"sliding-window\", resolution = \"10s\" }}\n",
        url = server.url()
    );
    let mut settings = RedisSettings::default();
    settings.url = server.url();
    settings.nodes = vec![server.url()];
    let fleet: Vec<Limits<RedisStore>> = (0..2)
        .map(|_| {
            let limits = Limits::builder()
                .store(RedisStore::new(&settings).unwrap())
                .clock(clock.clone())
                .from_toml(&config)
                .unwrap();
            limits.store().use_caller_time(true);
            limits
        })
        .collect();
    for key in ["month/c", "fine/c"] {
        for limits in fleet.iter().chain(&fleet) {
            assert!(limits.check(key, 1).await.unwrap().allowed(), "{key}");
        }
        let refused = fleet[0].check(key, 1).await.unwrap();
        assert!(
            !refused.allowed(),
            "{key}: four in all, across both instances"
        );
    }
    assert_eq!(
        fleet[1].check("month/c", 1).await.unwrap().retry_after(),
        Duration::from_secs(60)
    );
    clock.advance(Duration::from_secs(60));
    assert!(
        fleet[1].check("month/c", 1).await.unwrap().allowed(),
        "February"
    );
    for limits in &fleet {
        assert!(limits.store().local().is_empty(), "decided in Redis");
    }
}

/// In hybrid mode a settlement goes through the bucket's lease: no round trip, and the
/// budget in Redis ends up exact once the lease is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_go_through_the_lease_without_a_round_trip() {
    let Some(server) = RedisServer::start("hybrid settlement") else {
        return;
    };
    let clock = tollgate::clock::FakeClock::new();
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"settle:\"\n\
         sync = \"local\"\nsync_interval = \"100ms\"\ntimeout = \"2s\"\n[limits]\n\
         llm = \"6000/min\"\n",
        url = server.url()
    );
    let mut settings = RedisSettings::default();
    settings.url = server.url();
    settings.nodes = vec![server.url()];
    let limits = Limits::builder()
        .store(RedisStore::new(&settings).unwrap())
        .clock(clock.clone())
        .from_toml(&config)
        .unwrap();
    limits.store().use_caller_time(true);
    // Two heartbeat rounds: the instance counts itself, so it may lease.
    limits.store().sync_at(clock.now()).await;
    clock.advance(Duration::from_millis(2_100));
    limits.store().sync_at(clock.now()).await;
    // The first reservation asks Redis, and takes a lease; the rest are local.
    let first = limits.reserve("llm/c", 5).await.unwrap();
    assert!(first.decision().allowed());
    let before = crate::redis_backend::script_calls(&server);
    let second = limits.reserve("llm/c", 2).await.unwrap();
    assert!(second.decision().allowed());
    first.settle(3).await.unwrap();
    second.settle(25).await.unwrap();
    limits.refund("llm/c", 1).await.unwrap();
    assert_eq!(
        crate::redis_backend::script_calls(&server),
        before,
        "settled through the lease, no round trip"
    );
    // Idle for a while: the lease and the owed tokens are settled with Redis, and Redis
    // holds exactly what was used (3 + 25 − 1), give or take what refilled meanwhile.
    clock.advance(Duration::from_secs(3));
    limits.store().sync_at(clock.now()).await;
    clock.advance(Duration::from_secs(3));
    limits.store().sync_at(clock.now()).await;
    let redis_only = Limits::builder()
        .store(RedisStore::new(&settings).unwrap())
        .clock(clock.clone())
        .from_toml(&config.replace("sync = \"local\"\n", ""))
        .unwrap();
    redis_only.store().use_caller_time(true);
    let left = redis_only.peek("llm/c").await.unwrap().remaining();
    assert_eq!(
        left, 6000,
        "six seconds refill 600: the 27 used are long paid back"
    );
    // A charge beyond the lease is owed, and charged at the next settlement: 100 reserved
    // (asked of Redis with a new lease of 10), 400 used — the lease's 10 spent, 290 owed.
    let third = limits.reserve("llm/c", 100).await.unwrap();
    let before = crate::redis_backend::script_calls(&server);
    let settled = third.settle(400).await.unwrap();
    assert_eq!(crate::redis_backend::script_calls(&server), before);
    assert_eq!(
        settled.remaining(),
        6000 - 110 - 290,
        "the lease's view counts what is owed"
    );
    assert_eq!(redis_only.peek("llm/c").await.unwrap().remaining(), 5890);
    clock.advance(Duration::from_secs(2));
    limits.store().sync_at(clock.now()).await;
    // Two seconds refilled the 110 taken; the 290 owed were charged at the settlement.
    let left = redis_only.peek("llm/c").await.unwrap().remaining();
    assert_eq!(left, 6000 - 290);
}

/// Holds every client's commands in `server` for `ms` (Redis's `CLIENT PAUSE`): replies
/// come late, as from a slow network, and the commands still run.
fn hold_replies(server: &RedisServer, ms: u64) {
    let said = server.command(&format!("CLIENT PAUSE {ms} ALL"));
    assert_eq!(said.as_deref(), Some("+OK"), "CLIENT PAUSE");
}

/// Opens every connection of `instance`'s pool before replies are held (a connection
/// made during the pause would fail rather than be slow).
async fn connect(instance: &Limits<RedisStore>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answered = 0;
    while answered < 4 {
        assert!(Instant::now() < deadline, "Redis answers every connection");
        match instance.store().ping().await {
            Ok(()) => answered += 1,
            Err(_) => {
                answered = 0;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Admissions made while Redis was down are sent as one charge; when its reply is late
/// (the charge was applied, the instance did not hear), the instance sends it again, and
/// Redis applies it once: the shared budget is charged three tokens, not six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_reply_was_late_is_sent_again_and_applied_once() {
    let Some(mut server) = RedisServer::start("hybrid late settlement") else {
        return;
    };
    let fleet = fleet(&server, "late", "\"login\" = \"10/min\"\n");
    introduce(&fleet).await;
    let instance = &fleet[0];
    // At the caller's time: no background round settles behind the test's back.
    instance.store().use_caller_time(true);
    let at = SystemClock::new().now();
    server.kill();
    for _ in 0..3 {
        let decision = instance
            .check_at("login/198.51.100.4", 1, at)
            .await
            .unwrap();
        assert!(decision.allowed(), "on_backend_error = local admits");
    }
    server.restart();
    connect(instance).await;
    instance.store().sync_at(at).await; // loads the script into the new server
    // The charge goes out; its reply comes after the round stopped waiting (500 ms).
    hold_replies(&server, 1_200);
    instance.store().sync_at(at).await;
    assert_eq!(instance.store().unsettled(), 3, "not known to have arrived");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while instance.store().unsettled() > 0 && Instant::now() < deadline {
        instance.store().sync_at(at).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(instance.store().unsettled(), 0, "confirmed at last");
    // Seen by a limiter connected after the restart (the fleet's other instances would
    // first find their connections broken, and fall back).
    let decision = newcomer(&server, "late", "\"login\" = \"10/min\"")
        .peek("login/198.51.100.4")
        .await
        .unwrap();
    assert_eq!(
        decision.remaining(),
        7,
        "10 per minute, 3 spent during the outage, charged once"
    );
}

/// A lease call answered after its request stopped waiting: the request was decided by
/// `on_backend_error` (admitted here, to be charged later), but Redis had admitted it and
/// leased tokens too. The late reply is kept: the lease is this instance's to spend, and
/// the request is not charged a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_lease_is_kept_and_its_request_is_not_charged_twice() {
    let Some(server) = RedisServer::start("hybrid late lease") else {
        return;
    };
    // 1/s among 4 instances, 10 s apart: a lease is 2 tokens (Redis keeps the bucket for
    // the 3 s its debt lasts). Decided at one instant of a fake clock (the caller's time),
    // so nothing refills while replies are held.
    let rule = "\"api\" = { rate = \"1/s\", burst = 100 }";
    let fleet = fleet_syncing_every(&server, "latelease", rule, "10s");
    introduce(&fleet).await;
    let clock = FakeClock::new();
    for limits in &fleet {
        limits.store().use_caller_time(true);
    }
    let instance = &fleet[0];
    connect(instance).await;
    hold_replies(&server, 800);
    let at = clock.now();
    let decision = instance.check_at("api/198.51.100.9", 1, at).await.unwrap();
    assert!(decision.allowed(), "on_backend_error = local admits");
    assert_eq!(
        instance.store().unsettled(),
        1,
        "to be charged, as far as it knows"
    );
    // The reply comes at 800 ms, within the second a late reply is waited for.
    let deadline = Instant::now() + Duration::from_secs(3);
    while instance.store().unsettled() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        instance.store().unsettled(),
        0,
        "Redis charged the request: nothing more to charge"
    );
    let shared = newcomer(&server, "latelease", rule);
    if let Some(store) = shared.store().redis() {
        store.use_caller_time(true);
    }
    let seen = shared.check_at("api/198.51.100.9", 0, at).await.unwrap();
    assert_eq!(
        seen.remaining(),
        97,
        "one request and a lease of two charged in Redis, the request once"
    );
    // The lease is spent here without Redis.
    let calls = server.command_calls("evalsha");
    for _ in 0..2 {
        let decision = instance.check_at("api/198.51.100.9", 1, at).await.unwrap();
        assert!(decision.allowed());
    }
    assert_eq!(
        server.command_calls("evalsha"),
        calls,
        "spent from the lease"
    );
}

/// An instance that joins leases nothing until the others count it: until its second
/// heartbeat, two seconds after its first (the others announce themselves every two
/// seconds, and count it then). Meanwhile Redis decides its requests one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_leases_only_once_the_others_count_it() {
    let Some(server) = RedisServer::start("hybrid join") else {
        return;
    };
    let fleet = fleet(&server, "join", "\"api\" = \"100/s\"\n");
    let (first, joiner) = (&fleet[0], &fleet[1]);
    let start = SystemClock::new().now();
    let at = |ms: u64| Timestamp::from_unix_nanos(start.as_unix_nanos() + ms * 1_000_000);
    for ms in [0, 2_000] {
        first.store().sync_at(at(ms)).await;
    }
    joiner.store().sync_at(at(2_100)).await;
    assert_eq!(
        joiner.store().instances(),
        2,
        "the joiner counts both at once"
    );
    assert_eq!(
        first.store().instances(),
        1,
        "the first does not know it yet"
    );
    let calls = server.command_calls("evalsha");
    for _ in 0..3 {
        assert!(joiner.check("api/192.0.2.1", 1).await.unwrap().allowed());
    }
    assert_eq!(
        server.command_calls("evalsha") - calls,
        3,
        "no lease yet: each request decided by Redis"
    );
    first.store().sync_at(at(4_000)).await;
    assert_eq!(first.store().instances(), 2, "the first counts the joiner");
    joiner.store().sync_at(at(4_100)).await;
    let calls = server.command_calls("evalsha");
    for _ in 0..3 {
        assert!(joiner.check("api/192.0.2.2", 1).await.unwrap().allowed());
    }
    assert_eq!(
        server.command_calls("evalsha") - calls,
        1,
        "one lease call, then spent locally"
    );
}

/// A rule and a global `also` limit in hybrid mode: each bucket decided through its lease,
/// the pair together; over the fleet, the global budget holds within hybrid mode's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_and_its_also_limits_each_go_through_their_leases() {
    let Some(server) = RedisServer::start("hybrid also") else {
        return;
    };
    // Each client 100 a minute; everyone together 200 a minute (one lease at most
    // 100 ms × 200/min ÷ 4 — a fraction of a token: leases are small, Redis decides most).
    let fleet = Arc::new(fleet(
        &server,
        "stack",
        "\"/\" = { rate = \"100/min\", also = { all = { rate = \"200/min\", per = \"global\" } } }\n",
    ));
    introduce(&fleet).await;
    let mut admitted = 0;
    let mut by_client = [0u32; 8];
    for n in 0..600 {
        let client = n % 8;
        let limits = &fleet[n % 4];
        if limits
            .check(&format!("c{client}"), 1)
            .await
            .unwrap()
            .allowed()
        {
            admitted += 1;
            by_client[client] += 1;
        }
    }
    // The global budget (200, within the bound of one interval over four instances).
    assert!(
        (190..=210).contains(&admitted),
        "{admitted} admitted of 200"
    );
    assert!(by_client.iter().all(|&n| n <= 100), "{by_client:?}");
    for limits in fleet.iter() {
        assert!(limits.store().local().is_empty(), "no decision fell back");
    }
}
