//! The disk backend: the shared matrix decided on disk exactly as in memory (the third
//! column beside memory and Redis), caller-defined (`RL.*`) buckets surviving a reopen,
//! and damaged or contested store directories refused or repaired, never a crash.

use std::path::Path;
use std::time::Duration;

use tollgate::clock::FakeClock;
use tollgate::store::{BackendStore, Inspection, MemoryStore};
use tollgate::{CallerBucket, Limits, TakeOptions};

use crate::redis_backend::{Step, run, scenarios};
use crate::support::now_or_never;

fn disk_table(dir: &Path, extra: &str) -> String {
    format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n{extra}\n",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_disk_decide_alike() {
    let dir = tempfile::tempdir().unwrap();
    for (index, (name, rules, steps)) in scenarios().into_iter().enumerate() {
        let memory_config = dir.path().join(format!("memory{index}.toml"));
        std::fs::write(&memory_config, format!("[limits]\n{rules}")).unwrap();
        let memory_clock = FakeClock::new();
        let memory = Limits::builder()
            .store(MemoryStore::new())
            .clock(memory_clock.clone())
            .load([&memory_config])
            .unwrap();

        // Scenarios that reload with other numbers need their buckets in memory to carry
        // spending over (on disk alone a bucket is keyed by its rule's numbers); the others
        // run with a cache of one, so that buckets are read back from disk along the way.
        let cache = if steps.iter().any(|step| matches!(step, Step::Reload(_))) {
            ""
        } else {
            "cache_buckets = 1"
        };
        let store = disk_table(&dir.path().join(format!("store{index}")), cache);
        let disk_config = dir.path().join(format!("disk{index}.toml"));
        std::fs::write(&disk_config, format!("{store}[limits]\n{rules}")).unwrap();
        let disk_clock = FakeClock::new();
        let disk = Limits::builder()
            .store(BackendStore::new())
            .clock(disk_clock.clone())
            .load([&disk_config])
            .unwrap();
        let backend = disk.store().disk().expect("the config names the disk");

        let expected = run(&memory, &memory_clock, &memory_config, "", &steps).await;
        let actual = run(&disk, &disk_clock, &disk_config, &store, &steps).await;
        assert!(!backend.failing(), "{name}: every write succeeded");
        for ((step, want), (_, got)) in expected.iter().zip(&actual) {
            assert_eq!(want, got, "{name}: {step}");
        }
        assert_eq!(expected.len(), actual.len());
    }
}

#[test]
fn caller_defined_buckets_and_rule_buckets_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        disk_table(dir.path(), "sync_interval = \"always\"") + "[limits]\nlogin = \"5/h\"\n";
    let clock = FakeClock::new();
    let open = || {
        Limits::builder()
            .store(BackendStore::new())
            .clock(clock.clone())
            .from_toml(&config)
            .unwrap()
    };
    let bucket =
        CallerBucket::new("accounts:203.0.113.7", 20, 20, Duration::from_secs(86_400)).unwrap();
    let limits = open();
    for _ in 0..3 {
        now_or_never(limits.take_from(&bucket, 1, TakeOptions::default())).unwrap();
        now_or_never(limits.check("login/me", 1)).unwrap();
    }
    drop(limits);
    let limits = open();
    let taken = now_or_never(limits.take_from(&bucket, 1, TakeOptions::default())).unwrap();
    assert_eq!(
        taken.available_before(),
        Some(17),
        "20 a day, 3 spent before the restart"
    );
    assert_eq!(
        now_or_never(limits.check("login/me", 1))
            .unwrap()
            .remaining(),
        1
    );
}

#[test]
fn a_damaged_store_is_refused_or_repaired_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        disk_table(dir.path(), "sync_interval = \"always\"") + "[limits]\napi = \"5/min\"\n";
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    for i in 0..50 {
        now_or_never(limits.check(&format!("api/c{i}"), 1)).unwrap();
    }
    drop(limits);
    // Every file of the store cut to half, then garbage written over the first bytes of
    // what is left: the journal, the tables, the manifest alike.
    let mut files = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty());
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let mut damaged = bytes[..bytes.len() / 2].to_vec();
        for byte in damaged.iter_mut().take(16) {
            *byte ^= 0x5a;
        }
        std::fs::write(file, damaged).unwrap();
    }
    let reopened = std::panic::catch_unwind(|| {
        Limits::builder()
            .store(BackendStore::new())
            .from_toml(&config)
            .map(|limits| limits.store().unusable().map(str::to_owned))
    });
    match reopened {
        Ok(Ok(Some(reason))) => assert!(reason.contains("cannot open the disk store"), "{reason}"),
        Ok(Ok(None)) => {} // repaired: recovery kept what it could read
        Ok(Err(error)) => panic!("the config itself is fine: {error}"),
        Err(_) => panic!("opening a damaged store panicked"),
    }
}

#[test]
fn a_second_limiter_on_the_same_directory_cannot_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = disk_table(dir.path(), "") + "[limits]\napi = \"5/min\"\n";
    let open = || {
        Limits::builder()
            .store(BackendStore::new())
            .from_toml(&config)
            .unwrap()
    };
    let first = open();
    assert!(first.store().disk().is_some());
    let second = open();
    assert!(second.store().disk().is_none());
    let reason = second.store().unusable().unwrap();
    assert!(reason.contains("cannot open the disk store"), "{reason}");
}

/// A tmpfs of `size` mounted on `dir` for the life of the guard, when this process may
/// mount (root); `None` (said loudly) when it may not.
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(dir: &Path, size: &str) -> Option<Mounted> {
        std::fs::create_dir_all(dir).ok()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .ok()?;
        status.success().then(|| Mounted(dir.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_falls_back_to_on_backend_error_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mounted) = Mounted::tmpfs(&dir.path().join("small"), "4m") else {
        eprintln!("SKIPPED: a full disk needs a tmpfs this process may mount (root)");
        return;
    };
    let small = dir.path().join("small");
    let config = disk_table(&small.join("store"), "sync_interval = \"always\"")
        + "[limits]\napi = \"5/min\"\n";
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml(&config)
        .unwrap();
    let disk = limits.store().disk().expect("opened on the small disk");
    // Fill what is left with a file we can give back.
    let filler = small.join("filler");
    let mut chunk = 0;
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&filler).unwrap();
        while file.write_all(&[7u8; 64 * 1024]).is_ok() && chunk < 1_000 {
            chunk += 1;
        }
        let _ = file.sync_all();
    }
    let mut decided = 0;
    for i in 0..20_000 {
        let decision = now_or_never(limits.check(&format!("api/client-{i}"), 1)).unwrap();
        assert!(
            decision.allowed(),
            "local: the decision made in memory stands"
        );
        decided += 1;
        if disk.failing() {
            break;
        }
    }
    assert!(
        disk.failing(),
        "the disk filled up after {decided} decisions"
    );
    // Space returns: the next write succeeds and ends the fallback.
    std::fs::remove_file(&filler).unwrap();
    // The store is opened again at most every half second while failing: bounded wait.
    let mut recovered = false;
    for i in 0..250 {
        now_or_never(limits.check(&format!("api/again-{i}"), 1)).unwrap();
        if !disk.failing() {
            recovered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(recovered, "writes succeed again once there is room");
}

#[test]
fn the_bucket_listing_and_forgive_reach_buckets_only_on_disk() {
    use tollgate::store::{BucketQuery, BucketRef};
    let dir = tempfile::tempdir().unwrap();
    let config = disk_table(dir.path(), "cache_buckets = 2") + "[limits]\napi = \"5/min\"\n";
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .store(BackendStore::new())
        .clock(clock.clone())
        .from_toml(&config)
        .unwrap();
    for i in 0..20 {
        for _ in 0..=(i % 4) {
            now_or_never(limits.check(&format!("api/c{i:02}"), 1)).unwrap();
        }
    }
    let disk = limits.store().disk().unwrap();
    assert!(disk.memory().len() < 20, "most buckets are only on disk");
    let mut query = BucketQuery::new(limits.rules(), limits.now());
    query.limit = 100;
    let rows = now_or_never(limits.store().buckets(query)).unwrap();
    assert_eq!(rows.len(), 20, "every client, from disk");
    assert_eq!(rows[0].remaining, 1, "fewest left first: four spent");

    let api = limits.rules().get("api").unwrap().id();
    let client = tollgate::key::Client::from_segment("c03");
    let forgiven = now_or_never(limits.store().remove(BucketRef {
        rule: api,
        client: Some(&client),
    }))
    .unwrap();
    assert!(forgiven);
    assert_eq!(
        now_or_never(limits.peek("api/c03")).unwrap().remaining(),
        5,
        "forgiven on disk too"
    );
}
