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
