//! The Redis backend against a real `redis-server` (started per test, stopped by PID).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::clock::FakeClock;
use tollgate::store::{BackendStore, BucketQuery, BucketSort, Inspection, MemoryStore, Store};
use tollgate::{Decision, Limits};

use crate::support::redis::RedisServer;

/// A `[store]` table putting buckets in `server` under their own prefix.
fn store_table(server: &RedisServer, prefix: &str, extra: &str) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{prefix}:\"\n{extra}\n",
        server.url()
    )
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// One step of a scenario.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// Let this many milliseconds pass.
    Wait(u64),
    /// `check(key, cost)`.
    Check(&'static str, u64),
    /// `peek(key)`.
    Peek(&'static str),
    /// Replace the `[limits]` table and reload.
    Reload(&'static str),
    /// `check_plan(key, cost, plan)`: as if the client were on that plan.
    OnPlan(&'static str, u64, &'static str),
    /// `charge(key, n)`: taken even past empty.
    Charge(&'static str, u64),
    /// `refund(key, n)`: given back, never past full.
    Refund(&'static str, u64),
}

use Step::{Charge, Check, OnPlan, Peek, Refund, Reload, Wait};

/// The shared test matrix: each scenario is a `[limits]` table and a sequence of steps.
pub(crate) fn scenarios() -> Vec<(&'static str, &'static str, Vec<Step>)> {
    let knock = |key: &'static str, times: usize, every: u64| {
        (0..times)
            .flat_map(move |_| [Check(key, 1), Wait(every)])
            .collect::<Vec<_>>()
    };
    vec![
        (
            "gcra: burst, refill, separate clients",
            "\"/\" = \"5/s\"\n",
            [
                knock("10.0.0.1", 7, 0),
                vec![Wait(200), Check("10.0.0.1", 1), Check("10.0.0.1", 1)],
                vec![Check("10.0.0.2", 1), Wait(1_000), Peek("10.0.0.1")],
                knock("10.0.0.1", 8, 90),
            ]
            .concat(),
        ),
        (
            "gcra: a burst smaller than the rate, and costs",
            "\"/\" = { rate = \"10/min\", burst = 3 }\n",
            vec![
                Check("a", 2),
                Check("a", 2),
                Check("a", 1),
                Wait(6_000),
                Check("a", 1),
                Check("a", 3),
                Wait(18_000),
                Check("a", 3),
                Peek("a"),
            ],
        ),
        (
            "gcra: strict holds the refill back",
            "\"/\" = { rate = \"2/s\", strict = true }\n",
            [knock("s", 12, 100), vec![Wait(600)], knock("s", 3, 500)].concat(),
        ),
        (
            "gcra: several quotas, all or nothing",
            "\"/\" = { rate = [\"4/s\", \"10/min\"] }\n",
            [knock("m", 5, 0), vec![Wait(1_000)], knock("m", 12, 400)].concat(),
        ),
        (
            "gcra: intervals that are not whole microseconds (3/2s, 7/s)",
            "\"/\" = { rate = [\"3/2s\", \"10/min\"] }\nodd = { rate = \"7/s\", strict = true }\n",
            [
                knock("t", 4, 0),
                vec![Wait(700), Check("t", 1), Peek("t")],
                knock("odd/o", 9, 0),
                vec![Wait(143), Check("odd/o", 1), Wait(1_000)],
                knock("t", 6, 333),
            ]
            .concat(),
        ),
        (
            "sliding window",
            "\"/\" = { rate = \"4/s\", algorithm = \"sliding-window\" }\n",
            [knock("w", 6, 0), knock("w", 12, 125), vec![Peek("w")]].concat(),
        ),
        (
            "fixed window",
            "\"/\" = { rate = \"3/s\", algorithm = \"fixed-window\" }\n",
            [knock("f", 5, 0), vec![Wait(700)], knock("f", 5, 150)].concat(),
        ),
        (
            "global bucket, and a window rule with cost",
            "\"/\" = { rate = \"4/s\", per = \"global\" }\n\
             bulk = { rate = \"10/min\", algorithm = \"sliding-window\" }\n",
            vec![
                Check("x", 1),
                Check("y", 1),
                Check("z", 1),
                Check("x", 1),
                Check("y", 1),
                Check("bulk/x", 4),
                Check("bulk/x", 4),
                Check("bulk/x", 4),
                Wait(30_000),
                Check("bulk/x", 4),
                Peek("bulk/x"),
            ],
        ),
        (
            "delay: held one interval apart, beyond max_delay refused",
            "\"/\" = { rate = \"5/s\", burst = 2, on_limit = \"delay\", max_delay = \"1s\" }\n\
             after = { rate = \"10/s\", burst = 4, on_limit = \"delay\", max_delay = \"500ms\", delay_after = 1 }\n",
            [
                knock("d", 9, 0),
                vec![Wait(300)],
                knock("d", 3, 100),
                knock("after/a", 10, 0),
                vec![Peek("d")],
            ]
            .concat(),
        ),
        (
            "sliding log: exact, several quotas, strict logs refusals",
            "\"/\" = { rate = [\"3/s\", \"10/min\"], algorithm = \"sliding-log\" }\n\
             strict = { rate = \"2/s\", algorithm = \"sliding-log\", strict = true }\n",
            [
                knock("l", 5, 0),
                vec![Wait(400)],
                knock("l", 8, 150),
                vec![Check("l", 2), Wait(1_000), Check("l", 3), Peek("l")],
                knock("strict/s", 8, 300),
                vec![Wait(1_000), Check("strict/s", 1)],
            ]
            .concat(),
        ),
        (
            "warm-up: cold start, ramp, cooling down; with strict and with a delay",
            "\"/\" = { rate = \"10/s\", burst = 2, warmup = \"2s\" }\n\
             strict = { rate = \"4/s\", warmup = \"1s\", strict = true }\n\
             held = { rate = \"5/s\", burst = 1, warmup = \"1s\", on_limit = \"delay\", max_delay = \"2s\" }\n",
            [
                knock("w", 30, 50),
                vec![Wait(1_500), Peek("w")],
                knock("w", 10, 30),
                knock("strict/s", 8, 120),
                knock("held/h", 8, 0),
                vec![Wait(3_000)],
                knock("held/h", 3, 0),
            ]
            .concat(),
        ),
        (
            "reloads carry consumption over: rate, quotas, algorithm",
            "\"/\" = \"10/min\"\n",
            vec![
                Check("r", 6),
                Reload("\"/\" = \"5/min\"\n"),
                Check("r", 1),
                Peek("r"),
                Reload("\"/\" = { rate = [\"10/min\", \"100/h\"] }\n"),
                Check("r", 1),
                Reload("\"/\" = { rate = \"10/min\", algorithm = \"fixed-window\" }\n"),
                Check("r", 1),
                Peek("r"),
                Reload("\"/\" = { rate = \"10/min\", algorithm = \"sliding-log\" }\n"),
                Check("r", 1),
                Check("r", 2),
                Peek("r"),
                Check("g", 3),
                Reload("\"/\" = { rate = \"5/min\", algorithm = \"sliding-log\" }\n"),
                Check("g", 2),
                Check("g", 1),
            ],
        ),
        (
            "calendar windows: a local day, a month across its end",
            "\"/\" = { rate = \"3/day\", calendar = \"Europe/Berlin\" }\n             m = { rate = [\"4/month\", \"2/min\"], calendar = \"America/New_York\" }\n",
            [
                knock("d", 4, 1_000),
                // From 01:00 in Berlin on 1 January to 00:00 on the 2nd: a new day.
                vec![Wait(82_800_000 - 4_000), Check("d", 1), Peek("d")],
                knock("m/c", 5, 31_000),
                vec![Wait(31 * 86_400_000), Check("m/c", 1), Peek("m/c")],
            ]
            .concat(),
        ),
        (
            "sliding windows in sub-windows, and reloads onto and off them",
            "\"/\" = { rate = \"6/min\", algorithm = \"sliding-window\", resolution = \"10s\" }\n\
             multi = { rate = [\"4/10s\", \"10/min\"], algorithm = \"sliding-window\", resolution = \"2s\" }\n",
            [
                knock("w", 8, 9_000),
                vec![Wait(25_000)],
                knock("w", 4, 4_000),
                vec![Peek("w")],
                knock("multi/m", 14, 1_500),
                vec![Wait(61_000), Check("multi/m", 3), Peek("multi/m")],
                vec![
                    Reload("\"/\" = { rate = \"6/min\", algorithm = \"sliding-window\" }\n"),
                    Check("w", 1),
                    Reload("\"/\" = { rate = \"6/min\", algorithm = \"sliding-window\", resolution = \"20s\" }\n"),
                    Check("w", 1),
                    Check("w", 1),
                    Peek("w"),
                ],
            ]
            .concat(),
        ),
        (
            "costs settled afterwards: charges into debt, refunds never past full, every algorithm",
            "\"/\" = \"10/min\"\n\
             two = { rate = [\"10/min\", \"50/h\"] }\n\
             fixed = { rate = \"10/min\", algorithm = \"fixed-window\" }\n\
             sliding = { rate = \"10/min\", algorithm = \"sliding-window\" }\n\
             fine = { rate = \"10/min\", algorithm = \"sliding-window\", resolution = \"10s\" }\n\
             log = { rate = \"10/min\", algorithm = \"sliding-log\" }\n",
            ["t", "two/t", "fixed/t", "sliding/t", "fine/t", "log/t"]
                .into_iter()
                .flat_map(|key| {
                    [
                        Check(key, 4),
                        Charge(key, 9),
                        Check(key, 1),
                        Wait(12_000),
                        Refund(key, 5),
                        Check(key, 2),
                        Refund(key, 100),
                        Peek(key),
                        Refund(key, 1),
                        Check(key, 10),
                    ]
                })
                .chain([Refund("never-seen", 3), Peek("never-seen")])
                .collect(),
        ),
        (
            "requests counted beside a settled cost: one per admission, never settled",
            "\"/\" = { rate = [\"60/min\", \"1000/d\"], requests = \"5/min\", cost = { reserve = 10, from = \"header:x-usage\" } }\n\
             fixed = { rate = \"60/min\", requests = [\"3/min\", \"20/h\"], algorithm = \"fixed-window\" }\n\
             fine = { rate = \"60/min\", requests = \"4/min\", algorithm = \"sliding-window\", resolution = \"10s\" }\n",
            ["t", "fixed/t", "fine/t"]
                .into_iter()
                .flat_map(|key| {
                    [
                        Check(key, 10),
                        Refund(key, 8),
                        Check(key, 10),
                        Charge(key, 30),
                        Check(key, 1),
                        Check(key, 1),
                        Check(key, 1),
                        Peek(key),
                        Wait(15_000),
                        Refund(key, 40),
                        Check(key, 5),
                        Peek(key),
                    ]
                })
                .collect(),
        ),
        (
            "plans share one bucket: a move keeps what was spent, capped at the new burst",
            "api = { rate = \"10/min\", plans = { pro = \"100/min\", tiny = \"3/min\" } }\n",
            vec![
                OnPlan("api/p", 40, "pro"),
                OnPlan("api/p", 1, "pro"),
                Check("api/p", 1),
                Wait(6_000),
                Check("api/p", 1),
                OnPlan("api/p", 1, "pro"),
                OnPlan("api/p", 1, "tiny"),
                Wait(20_000),
                OnPlan("api/p", 1, "tiny"),
                OnPlan("api/p", 2, "tiny"),
                Peek("api/p"),
            ],
        ),
        (
            "stacked: per client and one global budget, all or nothing",
            "\"/\" = { rate = \"3/s\", also = { all = { rate = \"5/s\", per = \"global\" } } }\n\
             api = { rate = \"10/min\", algorithm = \"fixed-window\", also = { slow = { rate = \"4/min\", algorithm = \"sliding-window\", per = \"global\" } } }\n",
            [
                knock("a", 4, 0),
                knock("b", 3, 0),
                vec![Peek("a"), Peek("c"), Wait(400)],
                knock("c", 3, 100),
                knock("api/x", 3, 0),
                knock("api/y", 3, 1_000),
                vec![Charge("api/x", 2), Peek("api/y"), Wait(20_000), Refund("api/x", 1)],
                knock("api/z", 3, 5_000),
            ]
            .concat(),
        ),
        (
            "stacked: a sliding log and a strict rule beside a global window, with costs",
            "\"/\" = { rate = \"4/s\", strict = true, also = { all = { rate = \"6/s\", per = \"global\", algorithm = \"sliding-log\" } } }\n",
            [
                vec![Check("p", 2), Check("q", 3), Check("p", 2), Check("r", 1)],
                knock("q", 3, 200),
                vec![Wait(1_000), Peek("p")],
                knock("p", 6, 150),
            ]
            .concat(),
        ),
    ]
}

/// Runs `steps` against `limits`, stepping `clock`; every decision in order.
pub(crate) async fn run<St: Store>(
    limits: &Limits<St>,
    clock: &FakeClock,
    config: &Path,
    store: &str,
    steps: &[Step],
) -> Vec<(String, Decision)> {
    let mut decisions = Vec::new();
    for step in steps {
        match *step {
            Wait(ms) => clock.advance(Duration::from_millis(ms)),
            Check(key, cost) => {
                let decision = limits.check(key, cost).await.unwrap();
                decisions.push((format!("{step:?}"), decision));
            }
            Peek(key) => decisions.push((format!("{step:?}"), limits.peek(key).await.unwrap())),
            Charge(key, n) => {
                decisions.push((format!("{step:?}"), limits.charge(key, n).await.unwrap()))
            }
            Refund(key, n) => {
                decisions.push((format!("{step:?}"), limits.refund(key, n).await.unwrap()))
            }
            OnPlan(key, cost, plan) => {
                let decision = limits
                    .check_plan(key, Some(cost), Some(plan))
                    .await
                    .unwrap();
                decisions.push((format!("{step:?}"), decision));
            }
            Reload(rules) => {
                write(config, &format!("{store}[limits]\n{rules}"));
                limits.reload().unwrap();
            }
        }
    }
    decisions
}

/// Runs every scenario of the shared matrix in memory and on the Redis `[store]` table
/// `store(index)` names (one server or a cluster), at the same instants, and asserts the
/// decisions are equal and all came from Redis.
pub(crate) async fn assert_decides_as_memory(store: impl Fn(usize) -> String) {
    let dir = tempfile::tempdir().unwrap();
    for (index, (name, rules, steps)) in scenarios().into_iter().enumerate() {
        let store = store(index);

        let memory_config = dir.path().join(format!("memory{index}.toml"));
        write(&memory_config, &format!("[limits]\n{rules}"));
        let memory_clock = FakeClock::new();
        let memory = Limits::builder()
            .store(MemoryStore::new())
            .clock(memory_clock.clone())
            .load([&memory_config])
            .unwrap();

        let redis_config = dir.path().join(format!("redis{index}.toml"));
        write(&redis_config, &format!("{store}[limits]\n{rules}"));
        let redis_clock = FakeClock::new();
        let redis = Limits::builder()
            .store(BackendStore::new())
            .clock(redis_clock.clone())
            .load([&redis_config])
            .unwrap();
        let backend = redis.store().redis().expect("the config names Redis");
        // The stepped clock's time, not the server's, so both stores see the same instants.
        backend.use_caller_time(true);

        let expected = run(&memory, &memory_clock, &memory_config, "", &steps).await;
        let actual = run(&redis, &redis_clock, &redis_config, &store, &steps).await;
        assert!(
            !backend.breaker_open() && backend.local().is_empty(),
            "{name}: every decision came from Redis"
        );
        assert!(
            expected.iter().any(|(_, d)| !d.allowed()),
            "{name}: the scenario reaches a denial"
        );
        for ((step, want), (_, got)) in expected.iter().zip(&actual) {
            assert_eq!(want, got, "{name}: {step}");
        }
        assert_eq!(expected.len(), actual.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_decide_alike() {
    let Some(server) = RedisServer::start("memory_and_redis_decide_alike") else {
        return;
    };
    assert_decides_as_memory(|index| {
        store_table(&server, &format!("matrix{index}"), "timeout = \"2s\"")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_budget_under_concurrent_load_in_one_round_trip_each() {
    let Some(server) = RedisServer::start("two_instances_share_one_budget") else {
        return;
    };
    let config = format!(
        "{}[limits]\n\"/\" = {{ rate = \"100/h\", burst = 50 }}\n",
        store_table(&server, "shared", "timeout = \"2s\"")
    );
    let instance = || {
        Limits::builder()
            .store(BackendStore::new())
            .from_toml(&config)
            .unwrap()
    };
    let (a, b) = (instance(), instance());
    let evalsha_before = server.command_calls("evalsha");
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for limits in [a.clone(), b.clone(), a.clone(), b.clone(), a, b] {
        let admitted = Arc::clone(&admitted);
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let decision = limits.check("203.0.113.7", 1).await.unwrap();
                if decision.allowed() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
            limits
        }));
    }
    let mut instances = Vec::new();
    for task in tasks {
        instances.push(task.await.unwrap());
    }
    for limits in &instances {
        let redis = limits.store().redis().unwrap();
        assert!(
            !redis.breaker_open() && redis.local().is_empty(),
            "no fallback"
        );
    }
    assert_eq!(
        admitted.load(Ordering::Relaxed),
        50,
        "240 requests through two instances, one budget of 50"
    );
    // One round trip per decision: the script is loaded once per store, then called by hash.
    let calls = server.command_calls("evalsha") - evalsha_before;
    assert_eq!(calls, 240, "EVALSHA calls for 240 decisions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_skewed_clocks_agree_on_the_servers_time() {
    let Some(server) = RedisServer::start("instances_with_skewed_clocks_agree") else {
        return;
    };
    let config = format!(
        "{}[limits]\n\"/\" = \"3/min\"\n",
        store_table(&server, "skew", "")
    );
    let behind = FakeClock::new();
    let ahead = FakeClock::new();
    ahead.advance(Duration::from_secs(365 * 86_400));
    let make = |clock: &FakeClock| {
        Limits::builder()
            .store(BackendStore::new())
            .clock(clock.clone())
            .from_toml(&config)
            .unwrap()
    };
    let (a, b) = (make(&behind), make(&ahead));
    assert!(a.check("c", 2).await.unwrap().allowed());
    assert!(b.check("c", 1).await.unwrap().allowed());
    assert!(
        !b.check("c", 1).await.unwrap().allowed(),
        "a year of clock skew does not hand out a fresh budget"
    );
    assert!(!a.check("c", 1).await.unwrap().allowed());
}

/// Kills Redis under load and checks `mode`'s promise, then restarts it and waits for
/// decisions to come from Redis again.
async fn outage(mode: &str) -> Option<(Vec<bool>, Duration)> {
    let mut server = RedisServer::start(&format!("outage_{mode}"))?;
    let config = format!(
        "{}[limits]\n\"/\" = \"2/min\"\n",
        store_table(
            &server,
            "outage",
            &format!(
                "timeout = \"100ms\"\nbreaker_failures = 2\nbreaker_cooldown = \"200ms\"\n\
                 on_backend_error = \"{mode}\""
            ),
        )
    );
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    let redis = limits.store().redis().unwrap().clone();
    assert!(limits.check("before", 2).await.unwrap().allowed());
    assert!(!limits.check("before", 1).await.unwrap().allowed());

    server.kill();
    let mut during = Vec::new();
    for _ in 0..20 {
        // Never an error: a client never sees a 500 because of Redis.
        during.push(limits.check("during", 1).await.unwrap().allowed());
    }
    assert!(redis.breaker_open(), "{mode}: the breaker opened");

    server.restart();
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(10);
    loop {
        let decision = limits.check("after", 1).await.unwrap();
        if !redis.breaker_open() && server.command_calls("evalsha") > 0 {
            assert!(decision.allowed());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{mode}: Redis was not used again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some((during, restarted.elapsed()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_with_allow_admits_and_recovers() {
    let Some((during, resumed)) = outage("allow").await else {
        return;
    };
    assert!(during.iter().all(|&a| a), "{during:?}");
    eprintln!("allow: decisions came from Redis again {resumed:?} after its restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_with_deny_refuses_and_recovers() {
    let Some((during, resumed)) = outage("deny").await else {
        return;
    };
    assert!(during.iter().all(|&a| !a), "{during:?}");
    eprintln!("deny: decisions came from Redis again {resumed:?} after its restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_with_local_limits_each_instance_and_recovers() {
    let Some((during, resumed)) = outage("local").await else {
        return;
    };
    let admitted = during.iter().filter(|&&a| a).count();
    assert_eq!(admitted, 2, "the local buckets enforce 2/min: {during:?}");
    eprintln!("local: decisions came from Redis again {resumed:?} after its restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_cache_is_reloaded_transparently() {
    let Some(server) = RedisServer::start("a_flushed_script_cache_is_reloaded") else {
        return;
    };
    let config = format!(
        "{}[limits]\n\"/\" = \"5/min\"\n",
        store_table(&server, "flush", "")
    );
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    let mut admitted = 0;
    for round in 0..3 {
        for _ in 0..2 {
            if limits.check("k", 1).await.unwrap().allowed() {
                admitted += 1;
            }
        }
        if round == 0 {
            assert_eq!(server.command("SCRIPT FLUSH").as_deref(), Some("+OK"));
        }
    }
    let redis = limits.store().redis().unwrap();
    assert!(
        redis.local().is_empty(),
        "nothing fell back to local buckets"
    );
    assert_eq!(
        admitted, 5,
        "six requests, one budget of five, kept in Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bucket_listing_and_forgiving_work_on_redis() {
    let Some(server) = RedisServer::start("the_bucket_listing_works_on_redis") else {
        return;
    };
    let config = format!(
        "{}[limits]\n\"/\" = \"10/min\"\nlogin = \"4/min\"\nexport = {{ rate = \"5/s\", per = \"global\" }}\n",
        store_table(&server, "listing", "")
    );
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    for (key, cost) in [
        ("login/10.0.0.1", 3),
        ("login/10.0.0.2", 1),
        ("login/10.0.0.3", 2),
        ("other/10.0.0.1", 1),
        ("export/anyone", 1),
    ] {
        assert!(limits.check(key, cost).await.unwrap().allowed());
    }
    let query = |prefix: &str, max: Option<f64>| {
        let mut query = BucketQuery::new(limits.rules().clone(), limits.now());
        query.prefix = prefix.into();
        query.max_fraction = max;
        query.sort = BucketSort::Key;
        query
    };
    let keys = |rows: Vec<tollgate::store::BucketRow>| {
        rows.into_iter().map(|row| row.key).collect::<Vec<_>>()
    };
    let below_half = limits
        .store()
        .buckets(query("login/", Some(0.5)))
        .await
        .unwrap();
    assert_eq!(keys(below_half), ["login/10.0.0.1", "login/10.0.0.3"]);
    let all = limits.store().buckets(query("", None)).await.unwrap();
    assert_eq!(
        keys(all),
        [
            "10.0.0.1",
            "export",
            "login/10.0.0.1",
            "login/10.0.0.2",
            "login/10.0.0.3"
        ]
    );

    let rules = limits.rules();
    let client = tollgate::key::Client::from_segment("10.0.0.1");
    let bucket = tollgate::store::BucketRef {
        rule: rules.get("login").unwrap().id(),
        client: Some(&client),
    };
    assert!(limits.store().remove(bucket).await.unwrap());
    assert!(!limits.store().remove(bucket).await.unwrap());
    assert_eq!(
        limits.peek("login/10.0.0.1").await.unwrap().remaining(),
        4,
        "forgiven"
    );
}

/// What `INFO commandstats` says of the decision script: how many times it ran.
pub(crate) fn script_calls(server: &RedisServer) -> u64 {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection)
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_request_costs_one_round_trip_to_admit_and_one_to_settle() {
    use tower::{Layer as _, ServiceExt as _};
    let Some(server) = RedisServer::start("settled round trips") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    write(
        &config,
        &format!(
            "{}[limits]\nllm = {{ rate = \"100000/min\", cost = {{ reserve = 100, from = \"header:x-usage\" }} }}\n",
            store_table(&server, "settle", "timeout = \"2s\"")
        ),
    );
    let limits = Limits::builder()
        .store(BackendStore::new())
        .load([&config])
        .unwrap();
    let service = tower::service_fn(|request: http::Request<()>| async move {
        let used = request.uri().query().unwrap_or("100").to_owned();
        Ok::<_, std::convert::Infallible>(
            http::Response::builder()
                .header("x-usage", used)
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
    });
    let layered = tollgate::RateLimitLayer::new(limits.clone()).layer(service);
    let before = script_calls(&server);
    for used in ["30", "250", "100", "7", "1000"] {
        let mut request = http::Request::get(format!("/llm?{used}")).body(()).unwrap();
        request
            .extensions_mut()
            .insert(tollgate::key::PeerAddr("192.0.2.9:1".parse().unwrap()));
        let response = layered.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
    }
    // Five admissions, and four settlements (the one that used exactly its reservation
    // needs none).
    assert_eq!(script_calls(&server) - before, 9);
    let left = limits.peek("llm/192.0.2.9").await.unwrap().remaining();
    // 30 + 250 + 100 + 7 + 1000 used (and a few refilled at 1,667 a second meanwhile).
    assert!(
        (100_000 - 1_387..=100_000 - 1_387 + 500).contains(&left),
        "{left}"
    );
}

/// A request meeting three limits (its rule and two `also` limits) is decided in one round
/// trip to one Redis server: one call of the script for all three buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_limits_on_one_request_are_one_round_trip() {
    let Some(server) = RedisServer::start("three_limits_on_one_request") else {
        return;
    };
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"three:\"\ntimeout = \"2s\"\n\
             [limits.\"/\"]\nrate = \"10/min\"\n\
             also = {{ all = {{ rate = \"15/min\", per = \"global\" }}, mine = {{ rate = \"100/h\" }} }}\n",
            server.url()
        ))
        .unwrap();
    // Connected, the script loaded.
    limits.check("warm", 1).await.unwrap();
    let before = server.command_calls("evalsha") + server.command_calls("eval");
    let mut admitted = 0;
    for n in 0..20 {
        if limits
            .check(&format!("c{}", n % 2), 1)
            .await
            .unwrap()
            .allowed()
        {
            admitted += 1;
        }
    }
    let calls = server.command_calls("evalsha") + server.command_calls("eval") - before;
    assert_eq!(calls, 20, "one script call a request, three buckets each");
    assert_eq!(admitted, 14, "15 a minute in all, one taken to warm up");
    assert!(!limits.store().redis().unwrap().breaker_open());
}
