//! What operators watch: every metric the service exports is in its catalogue (and so in
//! the README's table), the shipped alerts and dashboard query only those, promtool checks
//! and unit-tests the rules, and a real Prometheus scraping a running service fires an
//! alert when a config change is refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_server::metrics::CATALOGUE;

use crate::support::{free_port, get, start_gateway, try_get};

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The metric a series name belongs to: a histogram's `_bucket`, `_sum` and `_count` are
/// its own.
fn metric_of(series: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| {
            let base = series.strip_suffix(suffix)?;
            CATALOGUE.iter().any(|m| m.name == base).then_some(base)
        })
        .unwrap_or(series)
}

/// Every `tollgate_…` metric `text` names (recording rules, `tollgate:…`, are not metrics).
fn named_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("tollgate_") {
        if text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        names.insert(metric_of(&name).to_owned());
    }
    names
}

fn catalogued() -> BTreeSet<&'static str> {
    CATALOGUE.iter().map(|m| m.name).collect()
}

#[test]
fn the_alerts_and_the_dashboard_query_only_metrics_the_service_exports() {
    let known = catalogued();
    for file in [
        "prometheus/tollgate.rules.yml",
        "grafana/tollgate.dashboard.json",
    ] {
        let named = named_in(&deploy(file));
        assert!(named.len() >= 5, "{file} names metrics: {named:?}");
        let unknown: Vec<&String> = named
            .iter()
            .filter(|n| !known.contains(n.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} queries metrics nobody exports: {unknown:?}"
        );
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy("grafana/tollgate.dashboard.json")).unwrap();
    let queried = named_in(&dashboard.to_string());
    let missing: Vec<&&str> = known.iter().filter(|m| !queried.contains(**m)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard shows every metric; not: {missing:?}"
    );
}

#[test]
fn the_readme_documents_every_metric_with_its_labels() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for metric in CATALOGUE {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{}`", metric.name)))
            .unwrap_or_else(|| panic!("README.md's metrics table lacks {}", metric.name));
        for label in metric.labels {
            assert!(
                row.contains(&format!("`{label}`")),
                "{}: label {label} undocumented",
                metric.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_service_exports_only_catalogued_metrics_each_described() {
    let running = start_gateway(
        "[limits]\n\"/\" = \"1/min\"\n\"held\" = { rate = \"1/s\", burst = 1, on_limit = \"delay\", max_delay = \"2s\" }\n",
        |options| options.resp = Some("127.0.0.1:0".parse().unwrap()),
    )
    .await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    for path in ["/x", "/x", "/held", "/held"] {
        get(proxy, path, &[]).await;
    }
    std::fs::write(running.config_file(), "[limits]\n\"/\" = \"ten\"\n").unwrap();
    let _ = running.gateway.limits().reload();
    let metrics = get(admin, "/metrics", &[]).await.body;
    let known = catalogued();
    let exported: BTreeSet<String> = metrics
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(|series| metric_of(series).to_owned())
        .collect();
    assert!(exported.len() >= 8, "{exported:?}");
    let unknown: Vec<&String> = exported
        .iter()
        .filter(|n| !known.contains(n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "exported but not in the catalogue: {unknown:?}"
    );
    for name in &exported {
        assert!(
            metrics.contains(&format!("# HELP {name} ")),
            "{name} is described on /metrics"
        );
    }
}

/// `promtool`, or a loud skip (a failure under `CI=true`).
fn promtool() -> Option<&'static str> {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return Some("promtool");
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "promtool is required under CI (apt-get install prometheus)"
    );
    eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
    None
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = promtool() else {
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    for args in [
        ["check", "rules", "tollgate.rules.yml"],
        ["test", "rules", "tollgate.rules.test.yml"],
    ] {
        let output = Command::new(promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A Prometheus process, killed by PID on drop.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_the_service_fires_an_alert_on_a_refused_config() {
    if promtool().is_none() {
        return;
    }
    let running = start_gateway("[limits]\n\"/\" = \"10/s\"\n", |_| {}).await;
    let admin = running.gateway.admin_addr();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/tollgate.rules.yml");
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: tollgate\n    static_configs:\n      - targets: [\"{admin}\"]\n",
            rules.display()
        ),
    )
    .unwrap();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let _prometheus = Prometheus(child);
    let api = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(60);
    // Scraping: a few samples of the healthy service first.
    loop {
        let up = try_get(api, "/api/v1/query?query=up").await;
        if up.is_some_and(|reply| reply.body.contains(",\"1\"]")) {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus scrapes the service");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A config change refused.
    std::fs::write(
        running.config_file(),
        "[limits]\n\"/\" = \"ten a second\"\n",
    )
    .unwrap();
    let _ = running.gateway.limits().reload();
    loop {
        if let Some(reply) = try_get(api, "/api/v1/alerts").await
            && reply.body.contains("TollgateConfigReloadFailing")
            && reply.body.contains("\"state\":\"firing\"")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "TollgateConfigReloadFailing fires within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Which catalogued metrics `text` (a `/metrics` page) has a series of, at any value.
fn present_in(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(|series| metric_of(series).to_owned())
        .collect()
}

/// `/metrics` of a `tollgate` process started with `args`, before anything is sent to it.
fn metrics_at_start(args: &[&str]) -> (String, crate::support::ServiceProcess) {
    let service = crate::support::ServiceProcess::start(args, &[]);
    let (status, body) = crate::support::blocking_get(service.admin, "/metrics");
    assert_eq!(status, 200, "{}", service.log());
    (body, service)
}

/// A dashboard's `increase()` cannot see a series' first sample: every metric the shipped
/// alerts and dashboard name exists (at 0) on a service configured with its feature before
/// the first event. Each process has a recorder of its own, so nothing another test counted
/// can stand in for a missing series.
#[test]
fn every_metric_the_alerts_and_dashboard_name_is_exported_before_any_event() {
    let dir = tempfile::tempdir().unwrap();
    let pki = tollgate_testkit::certs::Pki::new("zero");
    let pair = pki.server("zero");
    let repository =
        tollgate_testkit::repository::Repository::start("[limits.\"remote\"]\nrate = \"5/s\"\n");
    let main = dir.path().join("gateway.toml");
    std::fs::write(dir.path().join("keys.toml"), "# no keys issued yet\n").unwrap();
    std::fs::write(
        &main,
        format!(
            "[identity.api_keys]\nmembers = [\"keys.toml\"]\n\
             [limits.\"/\"]\nrate = \"100/min\"\n\
             [limits.\"llm\"]\nrate = \"1000/min\"\ncost = {{ reserve = 10, from = \"json:/usage/total_tokens\" }}\n\
             [limits.\"chat\"]\nrate = \"1000/min\"\ncost = {{ reserve = 10, from = \"usage\" }}\n\
             [limits.\"held\"]\nrate = \"1/s\"\non_limit = \"delay\"\nmax_delay = \"2s\"\n\
             [limits.\"capped\"]\nrate = \"100/s\"\nconcurrency = 4\n\
             [limits.\"tuned\"]\nrate = \"10/s\"\ncandidates = [\"5/s\"]\n\
             [gateway.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            pair.cert.display(),
            pair.key.display()
        ),
    )
    .unwrap();
    let main = main.display().to_string();
    let url = repository.url();
    let mut present = BTreeSet::new();
    let mut expected: BTreeSet<String> = named_in(&deploy("prometheus/tollgate.rules.yml"));
    expected.extend(named_in(&deploy("grafana/tollgate.dashboard.json")));

    // Everything but the stores: rules with every feature, TLS (on the admin listener too,
    // so /metrics is read with curl), RESP, gRPC, a URL source.
    let service = crate::support::ServiceProcess::start(
        &[
            "--config",
            &main,
            "--config",
            &url,
            "--resp",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
        ],
        &[],
    );
    let ca = pki.ca.display().to_string();
    let Ok(output) = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert", &ca])
        .arg(format!(
            "https://localhost:{}/metrics",
            service.admin.port()
        ))
        .output()
    else {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "curl under CI");
        eprintln!("SKIPPED: curl is not installed (apt-get install curl)");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.contains("# HELP"), "{text}\n{}", service.log());
    for series in [
        "tollgate_settle_faults_total{rule=\"llm\",reason=\"malformed JSON\"} 0",
        "tollgate_settled_total{rule=\"llm\",outcome=\"kept\"} 0",
        "tollgate_settled_tokens_total{rule=\"llm\"} 0",
        "tollgate_usage_tokens_total{rule=\"chat\",kind=\"output\"} 0",
        "tollgate_invalid_credentials_total{reason=\"unknown key\",action=\"anonymous\"} 0",
        "tollgate_config_reload_failures_total 0",
        "tollgate_config_fetch_errors_total 0",
        "tollgate_grpc_requests_total{domain=\"llm\",code=\"over_limit\"} 0",
    ] {
        assert!(text.contains(series), "{series} at start:\n{text}");
    }
    present.extend(present_in(&text));
    drop(service);

    // The Redis metrics, on hybrid mode over a real Redis.
    if let Some(redis) = crate::support::redis::RedisServer::start("metrics_at_start") {
        let file = dir.path().join("redis.toml");
        std::fs::write(
            &file,
            format!(
                "[store]\nbackend = \"redis\"\nurl = \"{}\"\nsync = \"local\"\n[limits]\n\"/\" = \"100/min\"\n",
                redis.url()
            ),
        )
        .unwrap();
        let (text, _service) = metrics_at_start(&["--config", &file.display().to_string()]);
        present.extend(present_in(&text));
    } else {
        expected.retain(|name| {
            !name.starts_with("tollgate_backend") && !name.starts_with("tollgate_hybrid")
        });
    }

    // The disk store's.
    let file = dir.path().join("disk.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\nbackend = \"disk\"\npath = \"{}\"\n[limits]\n\"/\" = \"100/min\"\n",
            dir.path().join("buckets").display()
        ),
    )
    .unwrap();
    let (text, _service) = metrics_at_start(&["--config", &file.display().to_string()]);
    present.extend(present_in(&text));

    let missing: Vec<&String> = expected.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "named by the alerts or the dashboard, absent before the first event: {missing:?}"
    );
}
