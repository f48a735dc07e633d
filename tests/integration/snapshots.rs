//! Snapshots: a restart must not hand everyone a fresh daily budget.

use std::path::Path;
use std::time::Duration;

use tollgate::Limits;
use tollgate::clock::FakeClock;

use crate::support::now_or_never;

fn config(snapshot: &Path, extra: &str) -> String {
    format!(
        "[store]\nsnapshot = \"{}\"\n[limits]\n\"reports\" = \"3/d\"\nlogin = \"2/min\"\n{extra}",
        snapshot.display()
    )
}

fn start(config: &str, clock: &FakeClock) -> Limits {
    Limits::builder()
        .clock(clock.clone())
        .from_toml(config)
        .unwrap()
}

fn allowed(limits: &Limits, key: &str) -> bool {
    now_or_never(limits.check(key, 1)).unwrap().allowed()
}

#[test]
fn an_exhausted_client_is_still_exhausted_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = config(&snapshot, "");
    let clock = FakeClock::new();
    let before = start(&config, &clock);
    // An API key (the general bucket layout) and an IPv4 client (the compact one).
    for client in ["tenant-7", "203.0.113.7"] {
        for _ in 0..3 {
            assert!(allowed(&before, &format!("reports/{client}")));
        }
        assert!(!allowed(&before, &format!("reports/{client}")));
    }
    assert!(allowed(&before, "login/alice"));
    assert_eq!(before.save_snapshot().unwrap(), 3);
    drop(before);

    // Down for a minute: the daily budget is still spent; login (2/min) has refilled.
    let after_clock = FakeClock::new();
    after_clock.advance(Duration::from_secs(60));
    let after = start(&config, &after_clock);
    for client in ["tenant-7", "203.0.113.7"] {
        assert!(
            !allowed(&after, &format!("reports/{client}")),
            "a restart handed out a fresh daily budget to {client}"
        );
        let state = now_or_never(after.peek(&format!("reports/{client}"))).unwrap();
        // 3/d: one token every 8 h; 8 h from the first report, minus the minute spent down.
        assert_eq!(state.retry_after(), Duration::from_secs(8 * 3600 - 60));
    }
    assert_eq!(
        after.store().len(),
        2,
        "login/alice had refilled and was not restored"
    );
}

#[test]
fn a_damaged_or_missing_snapshot_is_ignored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = config(&snapshot, "");
    let clock = FakeClock::new();
    // Missing: a fresh start.
    let limits = start(&config, &clock);
    assert!(allowed(&limits, "reports/a"));
    assert!(allowed(&limits, "reports/b"));
    limits.save_snapshot().unwrap();
    let whole = std::fs::read_to_string(&snapshot).unwrap();
    for damaged in [
        &whole[..whole.len() - 8],
        "tollgate-snapshot 9 0 0\nend 0\n",
        "\u{0}\u{1}garbage",
    ] {
        std::fs::write(&snapshot, damaged).unwrap();
        let restarted = start(&config, &clock);
        assert!(
            restarted.store().is_empty(),
            "nothing half-loaded from {damaged:?}"
        );
        assert!(allowed(&restarted, "reports/a"));
    }
}

#[test]
fn buckets_of_rules_that_are_gone_are_not_restored() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let clock = FakeClock::new();
    let with_extra = start(&config(&snapshot, "legacy = \"1/d\"\n"), &clock);
    assert!(allowed(&with_extra, "legacy/x"));
    assert!(allowed(&with_extra, "reports/x"));
    assert_eq!(with_extra.save_snapshot().unwrap(), 2);
    let without = start(&config(&snapshot, ""), &clock);
    assert_eq!(without.store().len(), 1);
}

#[test]
fn an_unwritable_snapshot_is_an_error_not_a_crash() {
    let config = config(Path::new("/nonexistent-dir/buckets.snapshot"), "");
    let limits = start(&config, &FakeClock::new());
    assert!(allowed(&limits, "reports/a"));
    let error = limits.save_snapshot().unwrap_err().to_string();
    assert!(
        error.contains("/nonexistent-dir/buckets.snapshot"),
        "{error}"
    );
    assert!(allowed(&limits, "reports/a"), "the limiter carries on");
}

#[test]
fn a_full_disk_keeps_the_last_good_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = config(&snapshot, "");
    let clock = FakeClock::new();
    let limits = start(&config, &clock);
    for _ in 0..3 {
        assert!(allowed(&limits, "reports/tenant-7"));
    }
    assert_eq!(limits.save_snapshot().unwrap(), 1);
    let good = std::fs::read(&snapshot).unwrap();

    // The next write lands on a full disk: the kernel's /dev/full answers every write with
    // ENOSPC, reached through the temporary file's name (no mount needed).
    let temporary = dir.path().join("buckets.snapshot.tmp");
    std::os::unix::fs::symlink("/dev/full", &temporary).unwrap();
    assert!(allowed(&limits, "reports/someone-else"));
    let error = limits.save_snapshot().unwrap_err().to_string();
    assert!(
        error.contains("buckets.snapshot") && error.contains("No space left on device"),
        "{error}"
    );
    assert_eq!(
        std::fs::read(&snapshot).unwrap(),
        good,
        "the last good snapshot was damaged"
    );
    assert!(
        std::fs::symlink_metadata(&temporary).is_err(),
        "the partial temporary file was left behind"
    );
    assert!(
        allowed(&limits, "reports/a-third"),
        "the limiter carries on"
    );

    // A restart reads the last good snapshot: tenant-7's daily budget is still spent.
    drop(limits);
    let restarted = start(&config, &clock);
    assert!(!allowed(&restarted, "reports/tenant-7"));
}

#[test]
fn sub_window_counts_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = config(
        &snapshot,
        "fine = { rate = \"6/h\", algorithm = \"sliding-window\", resolution = \"10m\" }\n",
    );
    let clock = FakeClock::new();
    let before = start(&config, &clock);
    for _ in 0..4 {
        assert!(allowed(&before, "fine/c"));
    }
    assert_eq!(before.save_snapshot().unwrap(), 1);
    drop(before);
    let after = start(&config, &clock);
    let state = now_or_never(after.peek("fine/c")).unwrap();
    assert_eq!(
        state.remaining(),
        2,
        "the four counted in the ring are still counted"
    );
}
