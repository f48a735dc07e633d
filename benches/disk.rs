//! The disk backend beside memory and Redis: `cargo bench --bench disk [-- BUCKETS]`.
//!
//! 1. Decisions per second and p99 latency for memory, disk (`sync_interval` 10 ms and
//!    `"always"`) and Redis (a `redis-server` started on a free loopback port, if
//!    installed), at 1, 4 and 16 concurrent callers (tokio tasks on a 2-worker runtime),
//!    each over 100,000 clients for 2 s.
//! 2. BUCKETS buckets (default 50,000,000; a rule of 100 a day, so none refills meanwhile)
//!    written to a disk store with `cache_buckets` at 1,000,000: bytes on disk per bucket,
//!    the process's resident memory, and the time to open the store again (a restart).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tollgate::Limits;
use tollgate::store::BackendStore;
use tollgate_testkit::{now_or_never, redis::RedisServer, rss_bytes};

const CLIENTS: u32 = 100_000;
const SECONDS: u64 = 2;

fn limits(store: &str) -> Limits<BackendStore> {
    limits_at(store, "{ rate = \"1000000/s\", burst = 1000000 }")
}

fn limits_at(store: &str, rule: &str) -> Limits<BackendStore> {
    Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!("{store}\n[limits]\n\"/\" = {rule}\n"))
        .unwrap()
}

/// Decisions/s and p99 for `callers` tasks on `limits`.
async fn run(limits: &Limits<BackendStore>, callers: usize) -> (f64, Duration) {
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let until = started + Duration::from_secs(SECONDS);
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let (limits, latencies) = (limits.clone(), Arc::clone(&latencies));
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let mut i = caller as u32 * 7_919;
            while Instant::now() < until && mine.len() < 5_000_000 {
                let client = i % CLIENTS;
                let key = format!(
                    "10.{}.{}.{}",
                    client >> 16,
                    (client >> 8) & 255,
                    client & 255
                );
                let at = Instant::now();
                limits.check(&key, 1).await.unwrap();
                mine.push(at.elapsed());
                i = i.wrapping_add(1);
            }
            latencies.lock().extend(mine);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut all = std::mem::take(&mut *latencies.lock());
    all.sort();
    let p99 = all.get(all.len() * 99 / 100).copied().unwrap_or_default();
    (all.len() as f64 / elapsed.as_secs_f64(), p99)
}

fn main() {
    let buckets: u64 = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(50_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start("bench_disk");
    let mut stores: Vec<(&str, String)> = vec![
        ("memory", String::new()),
        (
            "disk, sync_interval 10ms",
            format!(
                "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
                dir.path().join("every").display()
            ),
        ),
        (
            "disk, sync_interval \"always\"",
            format!(
                "[store]\nbackend = \"disk\"\npath = \"{}\"\nsync_interval = \"always\"\n",
                dir.path().join("always").display()
            ),
        ),
    ];
    if let Some(server) = &redis {
        stores.push((
            "redis",
            format!(
                "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                server.url()
            ),
        ));
    } else {
        println!("redis-server is not installed: Redis left out");
    }
    if std::env::var_os("ONLY_MANY").is_some() {
        stores.clear();
    }
    println!("| store | callers | decisions/s | p99 |");
    println!("|---|---|---|---|");
    for (name, table) in &stores {
        let limits = runtime.block_on(async { limits(table) });
        for callers in [1, 4, 16] {
            let (rate, p99) = runtime.block_on(run(&limits, callers));
            println!("| {name} | {callers} | {rate:.0} | {p99:?} |");
        }
    }
    drop(redis);

    // Many buckets on disk, few in memory.
    let path = dir.path().join("many");
    let table = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\ncache_buckets = 1000000\n",
        path.display()
    );
    let before = rss_bytes();
    let started = Instant::now();
    {
        // A day to refill: every bucket written stays spent through the restart.
        let limits = limits_at(&table, "\"100/day\"");
        for i in 0..buckets {
            let key = format!("client-{i:011}");
            now_or_never(limits.check(&key, 1)).unwrap();
        }
        let disk = limits.store().disk().unwrap();
        disk.sync().unwrap();
        let rss = rss_bytes().saturating_sub(before);
        println!(
            "{buckets} buckets written in {:?}; resident {} MiB with cache_buckets 1,000,000; on disk {} MiB ({:.1} B/bucket, before compaction)",
            started.elapsed(),
            rss >> 20,
            disk.disk_space() >> 20,
            disk.disk_space() as f64 / buckets as f64
        );
    }
    let reopened = Instant::now();
    let limits = limits_at(&table, "\"100/day\"");
    let opened = reopened.elapsed();
    let first = now_or_never(limits.check("client-00000000007", 1)).unwrap();
    println!(
        "opened again (a restart) in {opened:?}; a bucket from before read back: {} left of 100 (98 if it was)",
        first.remaining()
    );
}
