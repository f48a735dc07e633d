//! A real Redis Cluster for tests: six `redis-server` processes (3 masters, 3 replicas) on
//! free loopback ports, joined with `redis-cli --cluster create`, `cluster-node-timeout`
//! 1 s. [`RedisCluster::shared`] starts one per test binary; a test that breaks its
//! cluster (failover) starts its own with [`RedisCluster::start`]. Each is stopped by PID:
//! on drop, and — since a shared fixture is never dropped — by a watchdog process that
//! waits for the test binary to exit. Without `redis-server` and `redis-cli` the tests say
//! so and skip, unless `CI=true`, where they fail.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub struct RedisCluster {
    nodes: Mutex<Vec<(u16, Option<Child>)>>,
    /// Each node's TLS port, by its plain port, for a cluster started with TLS.
    tls_ports: Vec<(u16, u16)>,
    _dir: tempfile::TempDir,
}

/// What a cluster started with [`RedisCluster::start_tls`] serves TLS with: every node the
/// same certificate (for `localhost` and `127.0.0.1`), its bus and replication over TLS
/// too; plain ports stay, for the fixture's own commands.
pub struct ClusterTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
}

fn installed() -> bool {
    ["redis-server", "redis-cli"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// A port `p` with `p + 10000` (its cluster bus) free too, never handed out before in
/// this test binary (two clusters starting at once must not pick the same ports before
/// either has bound them).
fn free_cluster_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    // Below Linux's ephemeral range (32768 and up), bus ports (+10000) included: a port
    // found free here cannot be taken by some test's outgoing connection before the node
    // binds it, which once left a node unable to start while other tests opened hundreds
    // of connections.
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 32_768 - 10_000 - FIRST;
    let offset = u16::try_from(std::process::id() % 397).unwrap_or(0) * 7;
    let port = (0..SPAN)
        .map(|i| FIRST + (offset + i) % SPAN)
        .find(|&port| {
            !handed_out.contains(&port)
                && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
                && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok()
        })
        .expect("free loopback ports for a cluster");
    handed_out.push(port);
    port
}

/// `redis-cli -p port args…`'s output.
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

impl RedisCluster {
    /// The cluster this test binary shares, started by the first test that asks.
    pub fn shared(test: &str) -> Option<&'static RedisCluster> {
        static SHARED: OnceLock<Option<RedisCluster>> = OnceLock::new();
        SHARED.get_or_init(|| RedisCluster::start(test)).as_ref()
    }

    /// Holds the shared cluster for one test at a time: its tests count commands in
    /// `INFO commandstats`, which would count each other's.
    pub async fn quiet(&self) -> tokio::sync::MutexGuard<'static, ()> {
        static QUIET: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
        QUIET
            .get_or_init(|| tokio::sync::Mutex::new(()))
            .lock()
            .await
    }

    /// A cluster of its own, or `None` after saying why the calling test skips.
    pub fn start(test: &str) -> Option<RedisCluster> {
        RedisCluster::start_with(test, None)
    }

    /// A cluster of its own serving TLS too (Redis answers a TLS client's `CLUSTER SLOTS`
    /// with the TLS ports), or `None` after saying why the calling test skips.
    pub fn start_tls(test: &str, tls: &ClusterTls) -> Option<RedisCluster> {
        RedisCluster::start_with(test, Some(tls))
    }

    fn start_with(test: &str, tls: Option<&ClusterTls>) -> Option<RedisCluster> {
        if !installed() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "redis-server and redis-cli are required under CI (apt-get install redis-server redis-tools)"
            );
            eprintln!(
                "SKIPPED {test}: redis-server or redis-cli is not installed (apt-get install redis-server redis-tools)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (0..6).map(|_| free_cluster_port()).collect();
        let tls_ports: Vec<(u16, u16)> = match tls {
            Some(_) => ports
                .iter()
                .map(|&port| (port, free_cluster_port()))
                .collect(),
            None => Vec::new(),
        };
        let nodes = ports
            .iter()
            .map(|&port| {
                let tls = tls.and_then(|tls| {
                    let (_, tls_port) = tls_ports.iter().find(|(p, _)| *p == port)?;
                    Some((tls, *tls_port))
                });
                (port, Some(spawn(dir.path(), port, tls)))
            })
            .collect::<Vec<_>>();
        let pids: Vec<String> = nodes
            .iter()
            .filter_map(|(_, child)| child.as_ref().map(|c| c.id().to_string()))
            .collect();
        watchdog(&pids, dir.path());
        let cluster = RedisCluster {
            nodes: Mutex::new(nodes),
            tls_ports,
            _dir: dir,
        };
        for &port in &ports {
            cluster.wait(&format!("node {port} answers"), || {
                cli(port, &["PING"]).trim() == "PONG"
            });
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        // Bounded: `--cluster create` waits for ever for nodes that cannot meet.
        let created = Command::new("timeout")
            .args(["60", "redis-cli", "--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        for &port in &ports {
            cluster.wait(&format!("node {port} sees the cluster ok"), || {
                let nodes = cluster_nodes(port);
                let slots: usize = nodes
                    .iter()
                    .flat_map(|n| n.slots.iter().map(|r| r.clone().count()))
                    .sum();
                cli(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && nodes.iter().filter(|n| n.master).count() == 3
                    && nodes.len() == 6
                    && slots == 16_384
            });
            cluster.wait(
                &format!("node {port} is a master or a synced replica"),
                || {
                    let info = cli(port, &["INFO", "replication"]);
                    info.contains("role:master") || info.contains("master_link_status:up")
                },
            );
        }
        Some(cluster)
    }

    fn wait(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the Redis Cluster did not come up: {what}");
    }

    /// Seed-node URLs: every node.
    pub fn urls(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// Seed-node URLs over TLS (`rediss://localhost:PORT`), for a cluster started with TLS.
    pub fn tls_urls(&self) -> Vec<String> {
        self.ports()
            .iter()
            .filter_map(|port| self.tls_ports.iter().find(|(p, _)| p == port))
            .map(|(_, tls)| format!("rediss://localhost:{tls}"))
            .collect()
    }

    /// The ports of the nodes still running.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, child)| child.is_some())
            .map(|(port, _)| *port)
            .collect()
    }

    /// A node still running.
    pub fn any_port(&self) -> u16 {
        self.ports()[0]
    }

    /// The master serving `slot`, as a running node sees the cluster.
    pub fn master_of(&self, slot: u16) -> Option<u16> {
        cluster_nodes(self.any_port())
            .into_iter()
            .find(|node| node.master && node.slots.iter().any(|r| r.contains(&slot)))
            .map(|node| node.port)
    }

    /// The masters' ports.
    pub fn masters(&self) -> Vec<u16> {
        cluster_nodes(self.any_port())
            .into_iter()
            .filter(|node| node.master && !node.slots.is_empty())
            .map(|node| node.port)
            .collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        cli(self.any_port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap()
    }

    /// Keys on the node at `port` matching `pattern`.
    pub fn keys_on(&self, port: u16, pattern: &str) -> Vec<String> {
        cli(port, &["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .filter(|line| !line.is_empty())
            .collect()
    }

    /// Kills the node at `port` (SIGKILL, by PID), as a crash would.
    pub fn kill(&self, port: u16) {
        let mut nodes = self.nodes.lock().unwrap();
        if let Some((_, child)) = nodes.iter_mut().find(|(p, _)| *p == port)
            && let Some(mut child) = child.take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Calls of `command` on every running master (`INFO commandstats`).
    pub fn command_calls(&self, command: &str) -> u64 {
        self.masters()
            .iter()
            .map(|&port| {
                let prefix = format!("cmdstat_{command}:calls=");
                cli(port, &["INFO", "commandstats"])
                    .lines()
                    .find_map(|line| line.trim().strip_prefix(&prefix).map(str::to_owned))
                    .and_then(|rest| rest.split(',').next().and_then(|n| n.parse().ok()))
                    .unwrap_or(0u64)
            })
            .sum()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, child) in self.nodes.lock().unwrap().iter_mut() {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn spawn(dir: &Path, port: u16, tls: Option<(&ClusterTls, u16)>) -> Child {
    let node_dir = dir.join(port.to_string());
    std::fs::create_dir_all(&node_dir).unwrap();
    let mut command = Command::new("redis-server");
    if let Some((tls, tls_port)) = tls {
        command
            .args(["--tls-port", &tls_port.to_string()])
            .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
            .args(["--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(&tls.cert)
            .arg("--tls-key-file")
            .arg(&tls.key)
            .arg("--tls-ca-cert-file")
            .arg(&tls.ca);
    }
    command
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", "1000"])
        .args(["--dir", node_dir.to_str().unwrap()])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        // Replicas sync at once (the default waits 5 s): one that never synced is not
        // promoted when its master dies.
        .args(["--repl-diskless-sync-delay", "0"])
        .args(["--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}

/// A process that kills `pids` once this test binary has exited, whatever way it exits.
fn watchdog(pids: &[String], dir: &Path) {
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; kill -9 {pids} 2>/dev/null; rm -rf '{dir}'",
        me = std::process::id(),
        pids = pids.join(" "),
        dir = dir.display(),
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// One line of `CLUSTER NODES`.
pub struct Node {
    pub port: u16,
    pub master: bool,
    pub slots: Vec<std::ops::RangeInclusive<u16>>,
}

/// `CLUSTER NODES` as the node at `port` sees it (failed nodes left out).
pub fn cluster_nodes(port: u16) -> Vec<Node> {
    cli(port, &["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?;
            let flags = fields.get(2)?;
            if flags.contains("fail") || flags.contains("noaddr") {
                return None;
            }
            let port = address.split(['@', ':']).nth(1)?.parse().ok()?;
            let slots = fields
                .iter()
                .skip(8)
                .filter_map(|range| {
                    let (first, last) = range.split_once('-').unwrap_or((range, range));
                    Some(first.parse().ok()?..=last.parse().ok()?)
                })
                .collect();
            Some(Node {
                port,
                master: flags.contains("master"),
                slots,
            })
        })
        .collect()
}
