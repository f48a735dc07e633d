//! Configuration from a shared repository: URLs layered with files, polled with
//! conditional requests, kept through failures, cached for start-ups while the repository
//! is down — against a real HTTP server on a loopback port.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tollgate::Limits;
use tollgate::config::{Limit, Validator};

use crate::support::repository::{PrivateFleet, Repository};

const POLL: Duration = Duration::from_millis(200);

/// Waits until `condition` holds, at most `bound`.
fn wait_until(what: &str, bound: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A rule's first rate, as text (`"10/1s"`), or what is there instead.
fn rate(limits: &Limits, rule: &str) -> String {
    match limits.rules().get(rule).map(|rule| rule.limit().clone()) {
        Some(Limit::Limited { quotas, .. }) => quotas[0].rate().to_string(),
        other => format!("{other:?}"),
    }
}

/// The fleet's document: a root rule and an api rule.
fn global(root: &str) -> String {
    format!("[limits]\n\"/\" = \"{root}\"\napi = \"100/min\"\n")
}

/// A per-server file polling every [`POLL`], caching in `cache` if given, and overriding api.
fn local(dir: &Path, cache: Option<&Path>) -> PathBuf {
    let cache = cache.map_or(String::new(), |dir| {
        format!("cache_dir = \"{}\"\n", dir.display())
    });
    let file = dir.join("local.toml");
    std::fs::write(
        &file,
        format!("[reload]\npoll_interval = \"200ms\"\n{cache}\n[limits]\napi = \"5/min\"\n"),
    )
    .unwrap();
    file
}

/// A repository serving the fleet's document (root rule 10/s), and a limiter watching it
/// under a local file that polls every [`POLL`].
fn fleet_member() -> (Repository, tempfile::TempDir, Limits) {
    let repository = Repository::start(&global("10/s"));
    let dir = tempfile::tempdir().unwrap();
    let file = local(dir.path(), None).display().to_string();
    let limits = Limits::watch([repository.url(), file]).unwrap();
    (repository, dir, limits)
}

#[test]
fn a_repository_document_layers_under_a_local_file_and_a_change_applies_within_a_poll() {
    let (repository, _dir, limits) = fleet_member();
    assert_eq!(
        rate(&limits, ""),
        "10/1s",
        "the root rule comes from the repository"
    );
    assert_eq!(
        rate(&limits, "api"),
        "5/1m",
        "the later, local file wins rule by rule"
    );
    let status = limits.status();
    assert_eq!(status.sources[0].name, PathBuf::from(repository.url()));
    assert!(status.sources[0].remote);
    assert_eq!(
        status.sources[0].validator,
        Some(Validator::ETag("\"v1\"".into()))
    );

    let published = Instant::now();
    repository.publish(&global("20/s"));
    // One poll interval, jittered by at most 20%, plus a second.
    wait_until(
        "the new document is active",
        POLL.mul_f64(1.2) + Duration::from_secs(1),
        || rate(&limits, "") == "20/1s",
    );
    assert!(published.elapsed() < POLL.mul_f64(1.2) + Duration::from_secs(1));
    assert_eq!(limits.status().generation, 2);
    assert_eq!(rate(&limits, "api"), "5/1m");

    // Polls after the first ask "has it changed?" and are told it has not: nothing reloads.
    let seen = repository.served().requests;
    wait_until("three more polls", Duration::from_secs(5), || {
        repository.served().requests >= seen + 3
    });
    let served = repository.served();
    assert_eq!(
        served.conditional,
        served.requests - 1,
        "every poll but the first is conditional"
    );
    assert!(served.not_modified >= 3, "{served:?}");
    assert_eq!(limits.status().generation, 2, "a 304 changes nothing");
    assert_eq!(limits.status().failures, 0);
}

#[test]
fn a_failing_or_invalid_repository_keeps_the_last_good_rules_and_is_reported_once() {
    let (repository, _dir, limits) = fleet_member();
    let source_error = |limits: &Limits| limits.status().sources[0].last_error.clone();

    repository.fail_with(Some(503));
    wait_until("the outage is reported", Duration::from_secs(5), || {
        source_error(&limits).is_some()
    });
    let error = source_error(&limits).unwrap();
    assert!(
        error.contains(&repository.url()) && error.contains("HTTP 503"),
        "{error}"
    );
    let seen = repository.served().requests;
    wait_until("two more failed polls", Duration::from_secs(10), || {
        repository.served().requests >= seen + 2
    });
    let status = limits.status();
    assert_eq!(status.failures, 1, "reported once, not once per poll");
    assert_eq!((status.generation, rate(&limits, "")), (1, "10/1s".into()));

    // Back, but serving a document that does not validate.
    repository.fail_with(None);
    repository.publish("[limits]\n\"/\" = \"fast\"\n");
    wait_until(
        "the invalid document is reported",
        Duration::from_secs(10),
        || limits.status().last_error.is_some(),
    );
    let status = limits.status();
    let error = status.last_error.clone().unwrap();
    assert!(
        error.starts_with(&format!("{}:2:7: ", repository.url())),
        "{error}"
    );
    assert_eq!(
        status.sources[0].last_error, None,
        "the fetch itself worked"
    );
    assert_eq!((status.generation, rate(&limits, "")), (1, "10/1s".into()));
    let failures = status.failures;
    let seen = repository.served().requests;
    wait_until("two more polls", Duration::from_secs(5), || {
        repository.served().requests >= seen + 2
    });
    assert_eq!(
        limits.status().failures,
        failures,
        "the same document is not reported again"
    );

    repository.publish(&global("30/s"));
    wait_until("the fix applies", Duration::from_secs(5), || {
        rate(&limits, "") == "30/1s"
    });
    let status = limits.status();
    assert_eq!((status.generation, status.last_error), (2, None));
}

#[test]
fn a_repository_that_hangs_does_not_hold_up_a_local_save() {
    let repository = Repository::start(&global("10/s"));
    let dir = tempfile::tempdir().unwrap();
    let file = local(dir.path(), None);
    let limits = Limits::watch([repository.url(), file.display().to_string()]).unwrap();
    repository.hang_for(Some(Duration::from_secs(4)));
    let seen = repository.served().requests;
    wait_until("a poll is hanging", Duration::from_secs(5), || {
        repository.served().requests > seen
    });
    let saved = Instant::now();
    std::fs::write(
        &file,
        "[reload]\npoll_interval = \"200ms\"\n[limits]\napi = \"7/min\"\n",
    )
    .unwrap();
    wait_until("the local save applies", Duration::from_secs(1), || {
        rate(&limits, "api") == "7/1m"
    });
    assert!(saved.elapsed() < Duration::from_secs(1));
    assert_eq!(rate(&limits, ""), "10/1s", "the repository's rules stay");
    repository.hang_for(None);
}

#[test]
fn a_start_while_the_repository_is_down_uses_the_last_good_copy() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let file = local(dir.path(), Some(&cache));
    let repository = Repository::start(&global("10/s"));
    let url = repository.url();
    {
        let limits = Limits::load([url.clone(), file.display().to_string()]).unwrap();
        assert_eq!(rate(&limits, ""), "10/1s");
    }
    let cached: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(cached.len(), 1, "one copy per URL");
    drop(repository);

    let limits = Limits::load([url.clone(), file.display().to_string()]).unwrap();
    assert_eq!(rate(&limits, ""), "10/1s", "the cached copy's rules");
    let source = &limits.status().sources[0];
    assert!(source.from_cache);
    let error = source.last_error.clone().unwrap();
    assert!(
        error.contains(&format!("cannot fetch {url}")) && error.contains("cached"),
        "{error}"
    );
}

#[test]
fn a_start_with_the_repository_down_and_no_copy_fails_naming_the_url() {
    let url = format!("http://{}/fleet/limits.toml", closed_port());
    let error = Limits::load([url.as_str()]).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("cannot fetch config {url}: ")),
        "{error}"
    );
    assert!(
        error.ends_with("(and no [reload] cache_dir to start from)"),
        "{error}"
    );
}

#[test]
fn a_credential_named_in_the_config_but_missing_from_the_environment_is_named_not_guessed() {
    let fleet = PrivateFleet::start(
        &global("10/s"),
        "Bearer s3cret",
        "TOLLGATE_TEST_CONFIG_AUTH",
    );
    // Without the variable: refused, naming the variable and not any value. (With it, in a
    // real service process, the credential reaches the host and is shown nowhere: the
    // service's `remote_config` tests.)
    let error = Limits::load([fleet.repository.url(), fleet.local.display().to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("environment variable TOLLGATE_TEST_CONFIG_AUTH (for the authorization header) is not set"),
        "{error}"
    );
}

/// A loopback port nothing listens on.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn plan_membership_from_a_url_is_polled_and_a_failed_fetch_keeps_the_last_good_table() {
    let repository = Repository::start("\"user-42\" = \"pro\"\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.toml");
    std::fs::write(
        &file,
        format!(
            "[reload]\npoll_interval = \"200ms\"\n[plans]\nmembers = [\"{}\"]\n\
             [limits.api]\nrate = \"10/min\"\nplans.pro = \"1000/min\"\n",
            repository.url()
        ),
    )
    .unwrap();
    let limits = Limits::watch([&file]).unwrap();
    let plan = |limits: &Limits| {
        limits
            .rules()
            .plans()
            .member_plan("user-42")
            .map(str::to_owned)
    };
    assert_eq!(plan(&limits).as_deref(), Some("pro"));
    repository.publish("\"user-42\" = \"enterprise\"\n");
    wait_until("the new table is polled", 5 * POLL, || {
        plan(&limits).as_deref() == Some("enterprise")
    });
    repository.fail_with(Some(503));
    std::thread::sleep(3 * POLL);
    assert_eq!(
        plan(&limits).as_deref(),
        Some("enterprise"),
        "the last good table serves"
    );
    assert!(
        limits
            .status()
            .sources
            .iter()
            .any(|s| s.remote && s.last_error.is_some()),
        "{:?}",
        limits.status().sources
    );
}
