//! Live configuration with real files and the real watcher.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::clock::FakeClock;
use tollgate::config::Limit;
use tollgate::reload::Reloaded;

use crate::support::now_or_never;

/// Waits (bounded) until `condition` holds; the watcher works in the background.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The root rule's first rate, as text (`"5/1m"`).
fn root_rate(limits: &Limits) -> String {
    match limits.rules().get("").map(|rule| rule.limit().clone()) {
        Some(Limit::Limited { quotas, .. }) => quotas[0].rate().to_string(),
        other => format!("{other:?}"),
    }
}

fn root(rate: &str) -> String {
    format!("[limits]\n\"/\" = \"{rate}\"\n")
}

fn allowed(limits: &Limits, key: &str) -> bool {
    now_or_never(limits.check(key, 1)).unwrap().allowed()
}

struct Setup {
    _dir: tempfile::TempDir,
    file: PathBuf,
    limits: Limits,
}

fn watched(text: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    std::fs::write(&file, text).unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .watch([&file])
        .unwrap();
    Setup {
        _dir: dir,
        file,
        limits,
    }
}

fn applies_within_bounds(setup: &Setup, expected: &str) {
    wait_until(&format!("the root rule is {expected}"), || {
        root_rate(&setup.limits) == expected
    });
    assert_eq!(setup.limits.status().generation, 2);
    assert_eq!(setup.limits.status().last_error, None);
}

#[test]
fn an_in_place_write_applies() {
    let setup = watched(&root("1/min"));
    std::fs::write(&setup.file, root("5/min")).unwrap();
    applies_within_bounds(&setup, "5/1m");
}

#[test]
fn an_editor_save_by_rename_applies() {
    let setup = watched(&root("1/min"));
    // What vim and VS Code do: write a new file beside it, rename it over the old one.
    let temporary = setup.file.with_file_name(".limits.toml.swp");
    std::fs::write(&temporary, root("6/min")).unwrap();
    std::fs::rename(&temporary, &setup.file).unwrap();
    applies_within_bounds(&setup, "6/1m");
}

#[test]
fn a_file_deleted_then_recreated_is_reported_then_applied() {
    let setup = watched(&root("1/min"));
    std::fs::remove_file(&setup.file).unwrap();
    wait_until("the deletion is reported", || {
        setup.limits.status().last_error.is_some()
    });
    let status = setup.limits.status();
    assert!(
        status
            .last_error
            .unwrap()
            .contains("cannot read config file")
    );
    assert_eq!(
        status.generation, 1,
        "a deleted file is an error, not an empty config"
    );
    assert_eq!(
        root_rate(&setup.limits),
        "1/1m",
        "the old rules keep serving"
    );
    std::fs::write(&setup.file, root("7/min")).unwrap();
    applies_within_bounds(&setup, "7/1m");
}

#[test]
fn a_kubernetes_configmap_symlink_swap_applies() {
    // The layout kubelet writes: limits.toml -> ..data/limits.toml, ..data -> ..<stamp>.
    let dir = tempfile::tempdir().unwrap();
    let stamp = |name: &str| dir.path().join(name);
    std::fs::create_dir(stamp("..2026_01")).unwrap();
    std::fs::write(stamp("..2026_01/limits.toml"), root("1/min")).unwrap();
    std::os::unix::fs::symlink("..2026_01", stamp("..data")).unwrap();
    std::os::unix::fs::symlink("..data/limits.toml", stamp("limits.toml")).unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .watch([stamp("limits.toml")])
        .unwrap();
    assert_eq!(root_rate(&limits), "1/1m");

    // An update: a new timestamped directory, a new link renamed over ..data, the old removed.
    std::fs::create_dir(stamp("..2026_02")).unwrap();
    std::fs::write(stamp("..2026_02/limits.toml"), root("8/min")).unwrap();
    std::os::unix::fs::symlink("..2026_02", stamp("..data_tmp")).unwrap();
    std::fs::rename(stamp("..data_tmp"), stamp("..data")).unwrap();
    std::fs::remove_dir_all(stamp("..2026_01")).unwrap();
    wait_until("the new ConfigMap is active", || {
        root_rate(&limits) == "8/1m"
    });
}

#[test]
fn an_invalid_edit_keeps_the_old_rules_and_says_why_until_fixed() {
    let setup = watched(&root("1/min"));
    let updates = setup.limits.subscribe();
    std::fs::write(
        &setup.file,
        "[limits]\n\"/\" = \"1/min\"\napi = { rate = \"5/s\", burst = 0 }\n",
    )
    .unwrap();
    // A slow writer may be caught mid-save more than once: each partial read is refused too.
    wait_until("the failure is reported", || {
        setup.limits.status().failures >= 1
    });
    wait_until("the whole save is judged", || {
        setup
            .limits
            .status()
            .last_error
            .is_some_and(|e| e.contains("burst"))
    });
    let status = setup.limits.status();
    let error = status.last_error.clone().unwrap();
    assert_eq!(
        error,
        format!(
            "{}:3:31: burst must be between 1 and 4294967295, found 0",
            setup.file.display()
        )
    );
    assert_eq!(status.generation, 1);
    assert!(
        setup.limits.rules().get("api").is_none(),
        "nothing was half-applied"
    );
    assert!(
        updates.has_changed().unwrap(),
        "subscribers saw the failure"
    );

    std::fs::write(
        &setup.file,
        "[limits]\n\"/\" = \"1/min\"\napi = { rate = \"5/s\", burst = 5 }\n",
    )
    .unwrap();
    wait_until("the fix is applied", || {
        setup.limits.rules().get("api").is_some()
    });
    let status = setup.limits.status();
    assert_eq!((status.generation, status.last_error), (2, None));
}

/// How often the setup's one file has been read.
fn reads(setup: &Setup) -> u64 {
    setup.limits.status().sources[0].reads
}

/// Waits `quiet` and checks that nothing was read meanwhile. Idleness can only be seen over
/// time: the watcher that re-read its own reads did so every 50 ms, so half a second of
/// quiet catches it many times over.
fn stays_unread(setup: &Setup, quiet: Duration, why: &str) {
    let before = reads(setup);
    std::thread::sleep(quiet);
    assert_eq!(reads(setup), before, "{why}");
}

#[test]
fn an_idle_watcher_reads_nothing_and_one_save_is_one_read_and_one_reload() {
    let setup = watched(&root("1/min"));
    assert_eq!(reads(&setup), 1, "the initial load");
    stays_unread(
        &setup,
        Duration::from_millis(1_500),
        "an idle process reads nothing",
    );

    std::fs::write(&setup.file, root("5/min")).unwrap();
    wait_until("the save applies", || setup.limits.status().generation == 2);
    stays_unread(
        &setup,
        Duration::from_millis(500),
        "its own read is no change",
    );
    assert_eq!(reads(&setup), 2, "one save, one read");
    assert_eq!(setup.limits.status().generation, 2, "one save, one reload");
    assert_eq!(root_rate(&setup.limits), "5/1m");
}

#[test]
fn an_invalid_save_is_reported_once_until_it_changes_or_a_reload_is_forced() {
    let setup = watched(&root("1/min"));
    let failures = || setup.limits.status().failures;
    std::fs::write(&setup.file, root("twenty")).unwrap();
    wait_until("the failure is reported", || failures() == 1);
    stays_unread(
        &setup,
        Duration::from_millis(1_000),
        "a refused save is not retried",
    );
    assert_eq!((reads(&setup), failures()), (2, 1));

    // A change of metadata alone (a touch) is looked at, but the same refusal is not
    // reported again.
    let file = std::fs::File::options()
        .write(true)
        .open(&setup.file)
        .unwrap();
    file.set_modified(std::time::SystemTime::now()).unwrap();
    drop(file);
    wait_until("the touch is looked at", || reads(&setup) == 3);
    stays_unread(&setup, Duration::from_millis(300), "one look");
    assert_eq!(failures(), 1, "the same refusal is reported once");

    // Asked explicitly (SIGHUP in the gateway), it is tried and reported again.
    assert!(setup.limits.reload().is_err());
    assert_eq!((reads(&setup), failures()), (4, 2));

    std::fs::write(&setup.file, root("9/min")).unwrap();
    wait_until("the fix applies", || root_rate(&setup.limits) == "9/1m");
    let status = setup.limits.status();
    assert_eq!(
        (status.generation, status.last_error, status.failures),
        (2, None, 2)
    );
}

#[test]
fn exhausted_clients_stay_exhausted_across_unrelated_and_own_edits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    write("[limits]\n\"/\" = \"100/s\"\nlogin = \"2/min\"\n");
    let clock = FakeClock::new();
    let limits = Limits::builder()
        .clock(clock.clone())
        .load([&file])
        .unwrap();
    assert!(allowed(&limits, "login/mallory"));
    assert!(allowed(&limits, "login/mallory"));
    assert!(!allowed(&limits, "login/mallory"));

    // Someone edits another rule: mallory gets no fresh burst.
    write("[limits]\n\"/\" = \"100/s\"\nlogin = \"2/min\"\napi = \"10/s\"\n");
    assert_eq!(
        limits.reload().unwrap(),
        Reloaded::Applied { generation: 2 }
    );
    assert!(!allowed(&limits, "login/mallory"));

    // Someone slows login down: mallory's two used tokens are still used, now refilling
    // one per minute instead of one per 30 s; a new client gets the new burst.
    write("[limits]\n\"/\" = \"100/s\"\nlogin = \"2/2min\"\napi = \"10/s\"\n");
    limits.reload().unwrap();
    let denied = now_or_never(limits.check("login/mallory", 1)).unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), Duration::from_secs(60));
    assert!(allowed(&limits, "login/alice"));
    clock.advance(Duration::from_secs(60));
    assert!(allowed(&limits, "login/mallory"));
    assert!(!allowed(&limits, "login/mallory"));

    // Touching the file without changing it is not a reload.
    write("[limits]\n\"/\" = \"100/s\"\nlogin = \"2/2min\"\napi = \"10/s\"\n");
    assert_eq!(limits.reload().unwrap(), Reloaded::Unchanged);
}

#[test]
fn a_removed_then_restored_rule_starts_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    std::fs::write(&file, "[limits]\n\"/\" = \"100/s\"\nlogin = \"1/h\"\n").unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .load([&file])
        .unwrap();
    assert!(allowed(&limits, "login/mallory"));
    assert!(!allowed(&limits, "login/mallory"));
    let buckets_before = limits.store().len();

    std::fs::write(&file, "[limits]\n\"/\" = \"100/s\"\n").unwrap();
    limits.reload().unwrap();
    assert_eq!(
        limits.store().len(),
        buckets_before - 1,
        "the removed rule's buckets are dropped"
    );
    assert!(
        allowed(&limits, "login/mallory"),
        "the root rule applies now"
    );

    std::fs::write(&file, "[limits]\n\"/\" = \"100/s\"\nlogin = \"1/h\"\n").unwrap();
    limits.reload().unwrap();
    assert!(
        allowed(&limits, "login/mallory"),
        "a restored rule starts fresh"
    );
    assert!(!allowed(&limits, "login/mallory"));
}

#[test]
fn layered_files_apply_edits_to_either() {
    let dir = tempfile::tempdir().unwrap();
    let global = dir.path().join("global.toml");
    let local: PathBuf = dir.path().join("local.toml");
    std::fs::write(&global, "[limits]\n\"/\" = \"10/s\"\napi = \"100/min\"\n").unwrap();
    std::fs::write(&local, "[limits]\napi = \"5/min\"\n").unwrap();
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .watch([&global, &local])
        .unwrap();
    let rate_of = |key: &str| match limits.rules().get(key).map(|r| r.limit().clone()) {
        Some(Limit::Limited { quotas, .. }) => quotas[0].rate().to_string(),
        other => format!("{other:?}"),
    };
    assert_eq!(
        rate_of("api"),
        "5/1m",
        "the second file overrides the first"
    );

    std::fs::write(&local, "[limits]\napi = \"6/min\"\n").unwrap();
    wait_until("the local edit applies", || rate_of("api") == "6/1m");
    std::fs::write(&global, "[limits]\n\"/\" = \"11/s\"\napi = \"100/min\"\n").unwrap();
    wait_until("the global edit applies", || rate_of("") == "11/1s");
    assert_eq!(rate_of("api"), "6/1m", "the override still stands");
    assert_eq!(limits.status().files, [global, local]);
}

#[test]
fn a_reload_storm_never_disturbs_decisions_and_ends_on_the_last_save() {
    let setup = watched(&root("1000/s"));
    let limits = setup.limits.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let deciders: Vec<_> = (0..2)
        .map(|t| {
            let (limits, stop, decisions) = (limits.clone(), stop.clone(), decisions.clone());
            std::thread::spawn(move || {
                let started = Instant::now();
                // Bounded in count and time.
                for i in 0..5_000_000u64 {
                    if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(30) {
                        break;
                    }
                    let decision = now_or_never(limits.check(&format!("api/{t}-{}", i % 64), 1));
                    decision.expect("a decision never fails during reloads");
                    decisions.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for i in 0..300 {
        // Valid and invalid saves, in place and by rename.
        let text = if i % 10 == 9 {
            "[limits\n".to_owned()
        } else {
            root(&format!("{}/s", 100 + i))
        };
        if i % 2 == 0 {
            std::fs::write(&setup.file, text).unwrap();
        } else {
            write_by_rename(&setup.file, &text);
        }
    }
    write_by_rename(&setup.file, &root("777/s"));
    wait_until("the last save is active", || root_rate(&limits) == "777/1s");
    stop.store(true, Ordering::Relaxed);
    for decider in deciders {
        decider.join().expect("no decider panicked");
    }
    assert!(decisions.load(Ordering::Relaxed) > 0);
    assert_eq!(limits.status().last_error, None);
}

fn write_by_rename(file: &Path, text: &str) {
    let temporary = file.with_extension("tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, file).unwrap();
}

#[test]
fn the_watcher_stops_with_the_last_clone() {
    let setup = watched(&root("1/min"));
    let weak_probe = setup.limits.subscribe();
    drop(setup.limits);
    // The status sender lived in the shared state: once it is gone, the watcher is too.
    assert!(
        weak_probe.has_changed().is_err(),
        "the shared state was dropped"
    );
}

/// Faults on the watched file: each is refused with an error naming the file and why, the
/// rules in force stay, and a good save afterwards applies.
#[test]
fn a_config_replaced_by_a_directory_garbage_or_a_huge_file_changes_nothing() {
    let setup = watched(&root("7/min"));
    let before = root_rate(&setup.limits);
    let mut failures = setup.limits.status().failures;
    let mut refused = |what: &str, expected: &str| {
        wait_until(&format!("{what} is refused"), || {
            setup.limits.status().failures > failures
                && setup
                    .limits
                    .status()
                    .last_error
                    .is_some_and(|error| error.contains(expected))
        });
        failures = setup.limits.status().failures;
        let error = setup.limits.status().last_error.unwrap();
        eprintln!("{what}: {error}");
        assert!(
            error.contains(&setup.file.display().to_string()),
            "{what}: the error names the file: {error}"
        );
        assert_eq!(root_rate(&setup.limits), before, "{what} changed the rules");
        assert!(allowed(&setup.limits, "api/198.51.100.1"), "still deciding");
    };

    std::fs::remove_file(&setup.file).unwrap();
    std::fs::create_dir(&setup.file).unwrap();
    refused(
        "a directory in the file's place",
        "not a regular file (a directory)",
    );
    std::fs::remove_dir(&setup.file).unwrap();

    // A named pipe would block the reader until someone writes to it: refused unopened, and
    // the good save at the end shows no reload is stuck behind it.
    let made = std::process::Command::new("mkfifo")
        .arg(&setup.file)
        .status()
        .unwrap();
    assert!(made.success());
    refused(
        "a named pipe in the file's place",
        "not a regular file (a named pipe)",
    );
    std::fs::remove_file(&setup.file).unwrap();

    // Unreadable by permission: a save whose new file has mode 000. Root reads whatever
    // the mode says, so where the tests run as root (CI containers do) this part cannot be
    // tried: it says so.
    let unreadable = setup.file.with_extension("new");
    std::fs::write(&unreadable, root("6/min")).unwrap();
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::File::open(&unreadable).is_ok() {
        eprintln!(
            "NOT TRIED: a config without read permission (running as root, which reads it anyway)"
        );
        std::fs::remove_file(&unreadable).unwrap();
    } else {
        std::fs::rename(&unreadable, &setup.file).unwrap();
        refused("a file without read permission", "Permission denied");
        std::fs::remove_file(&setup.file).unwrap();
    }

    // 100 MB of bytes that are neither UTF-8 nor TOML.
    let mut garbage = vec![0u8; 100 * 1024 * 1024];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for chunk in garbage.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    write_by_rename(&setup.file, &String::from_utf8_lossy(&garbage[..1024]));
    refused("1 KiB of binary garbage", "expected");
    std::fs::write(&setup.file, &garbage).unwrap();
    refused("100 MB of binary garbage", "larger than");
    std::fs::write(&setup.file, [0xff, 0xfe, b'[', b'l']).unwrap();
    refused("bytes that are not UTF-8", "not UTF-8");

    write_by_rename(&setup.file, &root("9/min"));
    wait_until("a good save applies again", || {
        root_rate(&setup.limits) != before
    });
    assert_eq!(root_rate(&setup.limits), "9/1m");
    assert_eq!(setup.limits.status().last_error, None);
}

/// Saves `text` as editors that write a temporary file and rename it do: the watcher never
/// sees half a file.
fn save(file: &Path, text: &str) {
    let temporary = file.with_extension("toml.partial");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, file).unwrap();
}

#[test]
fn the_reload_history_says_what_each_save_changed_and_why_one_was_refused() {
    let setup = watched("[limits]\n\"/\" = \"1/min\"\napi = \"5/s\"\nold = \"1/s\"\n");
    assert!(
        setup.limits.status().history.is_empty(),
        "the start is no reload"
    );
    save(
        &setup.file,
        "[limits]\n\"/\" = \"1/min\"\napi = \"10/s\"\nnew = \"2/s\"\n",
    );
    wait_until("the edit is applied", || {
        setup.limits.status().generation == 2
    });
    save(
        &setup.file,
        "[limits]\n\"/\" = \"1/min\"\napi = { rate = \"10/s\", burst = 0 }\n",
    );
    wait_until("the bad edit is refused", || {
        setup.limits.status().last_error.is_some()
    });
    let history = setup.limits.status().history;
    assert_eq!(history.len(), 2, "{history:?}");
    let applied = &history[0];
    assert_eq!(
        (
            applied.trigger,
            applied.generation,
            applied.error.as_deref()
        ),
        ("file", 2, None)
    );
    assert_eq!(
        applied.sources,
        std::slice::from_ref(&setup.file),
        "the file that changed"
    );
    let said: Vec<(&str, Option<&str>, Option<&str>)> = applied
        .changes
        .iter()
        .map(|c| (c.rule.as_str(), c.before.as_deref(), c.after.as_deref()))
        .collect();
    assert_eq!(
        said,
        [
            (
                "api",
                Some("5/1s burst 5 · gcra · cost 1 · per client"),
                Some("10/1s burst 10 · gcra · cost 1 · per client")
            ),
            (
                "new",
                None,
                Some("2/1s burst 2 · gcra · cost 1 · per client")
            ),
            (
                "old",
                Some("1/1s burst 1 · gcra · cost 1 · per client"),
                None
            ),
        ]
    );
    let refused = &history[1];
    assert_eq!(refused.generation, 2, "the rules in force stayed");
    let error = refused.error.as_deref().unwrap_or_default();
    assert!(
        error.contains(":3:") && error.contains("burst must be between 1"),
        "{error}"
    );
    assert!(refused.changes.is_empty());
    assert!(applied.at <= refused.at);
    // A forced reload of the same bad file is recorded again; the history stays bounded.
    for _ in 0..40 {
        let _ = setup.limits.reload();
    }
    let history = setup.limits.status().history;
    assert_eq!(history.len(), tollgate::reload::ReloadStatus::HISTORY);
    assert!(
        history
            .iter()
            .skip(1)
            .all(|event| event.trigger == "forced")
    );
}
