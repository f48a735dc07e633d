//! Faults, measured: real gateways and a real Redis, each in a network namespace this
//! test creates (`ip netns`, a veth pair from each gateway to Redis, addresses inside the
//! namespaces only), under paced load from inside each gateway's namespace, with a fault
//! injected mid-run. Per fault × mode it measures what RELIABILITY.md publishes: admitted ÷
//! allowed (the budget the rule allows over the run), requests wrongly refused, 5xx and
//! timeouts, and the time from the fault's end until decisions are shared again (the
//! gateway's fallback counter stops moving) — and asserts each mode's stated bound.
//!
//! `cargo test -p tollgate-server --test integration faults -- --nocapture` runs the short
//! suite (what CI runs) and prints the table; `FAULTS=all` adds the rest, and
//! `FAULTS="<fault>"` runs that fault's rows alone.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Requests a second each gateway offers, and the rule: 100 a second (burst 100) for the
/// one client both gateways see.
const OFFERED_PER_SECOND: u64 = 80;
const RATE: u64 = 100;
const RUN: Duration = Duration::from_secs(6);
const FAULT_AT: Duration = Duration::from_secs(2);
const FAULT_FOR: Duration = Duration::from_secs(2);
/// The name the sentinel monitors the master under.
const MASTER: &str = "tollgate";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Whether this process can make namespaces (root with iproute2); else a loud skip, or a
/// failure under `CI=true`.
fn can_run() -> bool {
    let ok = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success())
        && std::fs::metadata("/proc/self/ns/net").is_ok()
        && unsafe_free_is_root();
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "the fault suite needs root and iproute2 (ip netns) under CI"
        );
        eprintln!("SKIPPED: the fault suite needs root and iproute2 (ip netns)");
    }
    ok && redis_server().is_some()
}

fn unsafe_free_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .and_then(|line| line.split_whitespace().nth(1))
            == Some("0")
    })
}

fn redis_server() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-server"))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "the fault suite needs redis-server under CI"
        );
        eprintln!("SKIPPED: the fault suite needs redis-server");
    }
    found
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap();
    assert!(
        output.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A network namespace, deleted (with its links) on drop.
struct Netns(String);

impl Netns {
    fn new(name: String) -> Netns {
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Moves the calling thread into namespace `ns` (a thread's network namespace is its own,
/// and threads it starts inherit it).
fn enter(ns: &str) {
    let path = format!("/var/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap();
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("setns {path}: {e}"));
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter(&ns);
        f()
    })
    .join()
    .unwrap()
}

/// Accepts connections on `0.0.0.0:port` in namespace `ns`, handing each to `serve`, until
/// `stop` is set; returns once it listens.
fn listen_in(
    ns: &str,
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    mut serve: impl FnMut(TcpStream) + Send + 'static,
) {
    let ns = ns.to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        enter(&ns);
        let listener = std::net::TcpListener::bind(("0.0.0.0", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let _ = ready_tx.send(());
        while !stop.load(Ordering::Relaxed) {
            let Ok((client, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = client.set_nonblocking(false);
            serve(client);
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
}

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What stands behind the gateways.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Single,
    /// A single Redis, gateway 0 reaching it through a [`Relay`].
    Relayed,
    Sentinel,
    Cluster,
}

/// A TCP relay in Redis's namespace, in front of Redis for gateway 0: it holds each reply
/// back by `delay_ms` — a stand-in for added latency and stalls, as this kernel has no
/// `tc netem`. Stops with the test (its threads end when their connections do).
struct Relay {
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    /// Listens on `0.0.0.0:6390` in `ns`, relaying to `127.0.0.1:6379` there.
    fn start(ns: &str) -> Relay {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let delay = Arc::clone(&delay_ms);
        listen_in(ns, 6390, Arc::clone(&stop), move |client| {
            let Ok(server) = TcpStream::connect("127.0.0.1:6379") else {
                return;
            };
            let (mut up_from, mut up_to) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up_from, &mut up_to);
                let _ = up_to.shutdown(std::net::Shutdown::Both);
            });
            // Redis's replies, each released `delay` after it arrived (a constant added
            // latency, as `tc netem delay` would add; not a slower link).
            let (mut down_from, mut down_to) = (server, client);
            let delay = Arc::clone(&delay);
            let (line, held) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 16 * 1024];
                loop {
                    let n = match down_from.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let due = Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
                    if line.send((due, buffer[..n].to_vec())).is_err() {
                        break;
                    }
                }
            });
            std::thread::spawn(move || {
                for (due, bytes) in held {
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    if down_to.write_all(&bytes).is_err() {
                        break;
                    }
                }
                let _ = down_to.shutdown(std::net::Shutdown::Both);
            });
        });
        Relay { delay_ms, stop }
    }

    fn hold(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.delay_ms.store(0, Ordering::Relaxed);
    }
}

/// One Redis and `gateways` gateways, each gateway's namespace linked to Redis's by a
/// veth pair (10.88.k.1 on Redis's side, 10.88.k.2 on the gateway's).
struct Topology {
    redis_ns: Netns,
    gateway_ns: Vec<Netns>,
    /// The gateway-side end of each gateway's link.
    links: Vec<String>,
    redis: Option<Process>,
    /// With a sentinel: the replica and the sentinel.
    watchers: Vec<Process>,
    /// In front of Redis for gateway 0, when the fault needs one.
    relay: Option<Relay>,
    /// The cluster node stopped with SIGSTOP, to resume.
    frozen: Option<usize>,
    gateways: Vec<Process>,
    _dir: tempfile::TempDir,
}

impl Topology {
    fn single(gateways: usize, store: &str, relayed: bool) -> Topology {
        Topology::make(gateways, store, relayed, false)
    }

    /// The same with a replica of Redis and a sentinel watching both, in Redis's
    /// namespace; the gateways find the master through the sentinel.
    fn sentinel(gateways: usize, store: &str) -> Topology {
        Topology::make(gateways, store, false, true)
    }

    /// The same with a 3×2 Redis Cluster (ports 7000–7005) in Redis's namespace in place
    /// of the single Redis.
    fn cluster(gateways: usize, store: &str) -> Topology {
        Topology::make_with(gateways, store, Shape::Cluster)
    }

    fn make(gateways: usize, store: &str, relayed: bool, sentinel: bool) -> Topology {
        let shape = match (relayed, sentinel) {
            (_, true) => Shape::Sentinel,
            (true, _) => Shape::Relayed,
            _ => Shape::Single,
        };
        Topology::make_with(gateways, store, shape)
    }

    fn make_with(gateways: usize, store: &str, shape: Shape) -> Topology {
        let (relayed, sentinel) = (shape == Shape::Relayed, shape == Shape::Sentinel);
        let id = format!(
            "{}{}",
            std::process::id() % 10_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let redis_ns = Netns::new(format!("tgf{id}r"));
        let mut gateway_ns = Vec::new();
        let mut links = Vec::new();
        for k in 0..gateways {
            let ns = Netns::new(format!("tgf{id}g{k}"));
            let (near, far) = (format!("tf{id}r{k}"), format!("tf{id}g{k}"));
            ip(&["link", "add", &near, "type", "veth", "peer", "name", &far]);
            ip(&["link", "set", &near, "netns", &redis_ns.0]);
            ip(&["link", "set", &far, "netns", &ns.0]);
            if k == 0 {
                // One bridge in Redis's namespace joins every gateway's link, so Redis (and
                // what a sentinel announces) has one address every gateway reaches.
                ip(&["-n", &redis_ns.0, "link", "add", "br0", "type", "bridge"]);
                ip(&[
                    "-n",
                    &redis_ns.0,
                    "addr",
                    "add",
                    "10.88.0.1/24",
                    "dev",
                    "br0",
                ]);
                ip(&["-n", &redis_ns.0, "link", "set", "br0", "up"]);
            }
            ip(&["-n", &redis_ns.0, "link", "set", &near, "master", "br0"]);
            ip(&["-n", &redis_ns.0, "link", "set", &near, "up"]);
            let address = format!("10.88.0.{}/24", 10 + k);
            ip(&["-n", &ns.0, "addr", "add", &address, "dev", &far]);
            ip(&["-n", &ns.0, "link", "set", &far, "up"]);
            gateway_ns.push(ns);
            links.push(far);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut topology = Topology {
            redis_ns,
            gateway_ns,
            links,
            redis: None,
            watchers: Vec::new(),
            relay: None,
            frozen: None,
            gateways: Vec::new(),
            _dir: dir,
        };
        if shape == Shape::Cluster {
            topology.start_cluster();
        } else {
            topology.start_redis();
        }
        if relayed {
            topology.relay = Some(Relay::start(&topology.redis_ns.0));
        }
        if sentinel {
            topology.start_sentinel();
        }
        for k in 0..gateways {
            let config = topology._dir.path().join(format!("gateway{k}.toml"));
            std::fs::write(
                &config,
                format!(
                    "[client]\nsources = [\"header:x-api-key\"]\n\
                     [store]\ntimeout = \"50ms\"\n{}\n{store}\n\
                     [limits]\n\"/\" = \"{RATE}/s\"\n",
                    if shape == Shape::Cluster {
                        let nodes: Vec<String> = (7000..7006)
                            .map(|port| format!("\"redis://10.88.0.1:{port}\""))
                            .collect();
                        format!("backend = \"redis-cluster\"\nurl = [{}]", nodes.join(", "))
                    } else if sentinel {
                        format!(
                            "backend = \"redis-sentinel\"\nsentinels = [\"redis://10.88.0.1:26379\"]\nmaster_name = \"{MASTER}\""
                        )
                    } else {
                        format!(
                            "backend = \"redis\"\nurl = \"redis://10.88.0.1:{}\"",
                            if relayed && k == 0 { 6390 } else { 6379 }
                        )
                    }
                ),
            )
            .unwrap();
            let child = Command::new("ip")
                .args(["netns", "exec", &topology.gateway_ns[k].0])
                .arg(env!("CARGO_BIN_EXE_tollgate"))
                .args(["--config", config.to_str().unwrap()])
                .args(["--listen", "127.0.0.1:8080", "--admin", "127.0.0.1:9090"])
                .stdout(Stdio::null())
                .stderr(gateway_log(k))
                .spawn()
                .unwrap();
            topology.gateways.push(Process(child));
        }
        for ns in &topology.gateway_ns {
            let ns = ns.0.clone();
            let up = in_ns(&ns, || {
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    if get("127.0.0.1:9090", "/readyz").is_some_and(|(s, _)| s == 200) {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                false
            });
            assert!(up, "gateway in {ns} ready");
        }
        topology
    }

    fn start_redis(&mut self) {
        let binary = redis_server().unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.redis_ns.0])
            .arg(binary)
            .args([
                "--port",
                "6379",
                "--bind",
                "0.0.0.0",
                "--protected-mode",
                "no",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.redis = Some(Process(child));
        let ns = self.redis_ns.0.clone();
        let up = in_ns(&ns, || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if TcpStream::connect("127.0.0.1:6379").is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        });
        assert!(up, "redis in {ns} up");
    }

    /// A replica of the master on port 6380 and a sentinel on 26379 watching it, waiting
    /// until the sentinel knows the replica.
    fn start_sentinel(&mut self) {
        let binary = redis_server().unwrap();
        let replica = Command::new("ip")
            .args(["netns", "exec", &self.redis_ns.0])
            .arg(&binary)
            .args([
                "--port",
                "6380",
                "--bind",
                "0.0.0.0",
                "--protected-mode",
                "no",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--replicaof", "10.88.0.1", "6379"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.watchers.push(Process(replica));
        let config = self._dir.path().join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port 26379\nbind 0.0.0.0\nprotected-mode no\ndaemonize no\n\
                 sentinel monitor {MASTER} 10.88.0.1 6379 1\n\
                 sentinel down-after-milliseconds {MASTER} 500\n\
                 sentinel failover-timeout {MASTER} 2000\n"
            ),
        )
        .unwrap();
        let sentinel = Command::new("ip")
            .args(["netns", "exec", &self.redis_ns.0])
            .arg(&binary)
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.watchers.push(Process(sentinel));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self
            .sentinel_says(&format!("SENTINEL REPLICAS {MASTER}"))
            .contains("10.88.0.1")
        {
            assert!(Instant::now() < deadline, "the sentinel learns the replica");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Six cluster nodes on 7000–7005, joined as three masters with a replica each
    /// (`cluster-node-timeout` 1 s), waiting until every node sees the cluster ok.
    fn start_cluster(&mut self) {
        let binary = redis_server().unwrap();
        for port in 7000..7006 {
            let dir = self._dir.path().join(format!("node{port}"));
            std::fs::create_dir_all(&dir).unwrap();
            let node = Command::new("ip")
                .args(["netns", "exec", &self.redis_ns.0])
                .arg(&binary)
                .args(["--port", &port.to_string(), "--bind", "0.0.0.0"])
                .args(["--protected-mode", "no", "--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "1000"])
                .args([
                    "--dir",
                    dir.to_str().unwrap(),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.watchers.push(Process(node));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while (7000..7006).any(|port| self.cli(port, "PING").trim() != "PONG") {
            assert!(Instant::now() < deadline, "the cluster's nodes answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        let nodes: Vec<String> = (7000..7006)
            .map(|port| format!("10.88.0.1:{port}"))
            .collect();
        let created = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.redis_ns.0,
                "timeout",
                "60",
                "redis-cli",
            ])
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(created.status.success(), "redis-cli --cluster create");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(7000..7006).all(|port| {
            self.cli(port, "CLUSTER INFO").contains("cluster_state:ok")
                && (self.cli(port, "INFO replication").contains("role:master")
                    || self
                        .cli(port, "INFO replication")
                        .contains("master_link_status:up"))
        }) {
            assert!(Instant::now() < deadline, "the cluster comes up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A command's reply from the node on `port`, from inside Redis's namespace.
    /// (Within 5 s: a stopped node answers nothing.)
    fn cli(&self, port: u16, command: &str) -> String {
        let output = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.redis_ns.0,
                "timeout",
                "5",
                "redis-cli",
                "-p",
                &port.to_string(),
            ])
            .args(command.split_whitespace())
            .output();
        output.map_or_else(
            |_| String::new(),
            |o| String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    }

    /// Kills the cluster master serving the shared client's bucket.
    fn kill_bucket_master(&mut self) {
        self.kill_master(true);
    }

    /// Kills a cluster master that does not serve the shared client's bucket: its
    /// decisions should not notice.
    fn kill_other_master(&mut self) {
        let at = self.master_index(false);
        if let Some(node) = self.watchers.get_mut(at) {
            let _ = node.0.kill();
            let _ = node.0.wait();
        }
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) a master the bucket is not on: it holds its
    /// connections open and answers nothing, as a hung host would.
    fn freeze_other_master(&mut self, frozen: bool) {
        let at = if frozen {
            let at = self.master_index(false);
            self.frozen = Some(at);
            at
        } else {
            match self.frozen.take() {
                Some(at) => at,
                None => return,
            }
        };
        if let Some(node) = self.watchers.get(at) {
            let signal = if frozen { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill")
                .args([signal, &node.0.id().to_string()])
                .status();
        }
    }

    /// Kills the master serving the bucket's slot (`bucket`), or another one.
    fn kill_master(&mut self, bucket: bool) {
        let at = self.master_index(bucket);
        if let Some(node) = self.watchers.get_mut(at) {
            let _ = node.0.kill();
            let _ = node.0.wait();
        }
    }

    /// Which of the nodes (started in port order) is the master serving the bucket's slot
    /// (`bucket`), or another master.
    fn master_index(&self, bucket: bool) -> usize {
        let slot: u16 = self
            .cli(7000, "CLUSTER KEYSLOT tollgate:{/shared}c")
            .trim()
            .parse()
            .unwrap();
        let nodes = self.cli(7000, "CLUSTER NODES");
        let port = nodes
            .lines()
            .filter(|line| line.contains("master") && line.split_whitespace().count() > 8)
            .find(|line| {
                bucket == line.split_whitespace().skip(8).any(|range| {
                    let (low, high) = range.split_once('-').unwrap_or((range, range));
                    matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if (l..=h).contains(&slot))
                })
            })
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|address| address.split(['@', ':']).nth(1))
            .and_then(|port| port.parse::<u16>().ok())
            .expect("a master to kill");
        usize::from(port - 7000)
    }

    /// A sentinel command's reply, from inside Redis's namespace.
    fn sentinel_says(&self, command: &str) -> String {
        let output = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.redis_ns.0,
                "redis-cli",
                "-p",
                "26379",
            ])
            .args(command.split_whitespace())
            .output();
        output.map_or_else(
            |_| String::new(),
            |o| String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    }

    /// Cuts (or restores) gateway `k`'s link to Redis: like a pulled cable, packets are
    /// lost, nothing is refused.
    fn link(&self, k: usize, up: bool) {
        ip(&[
            "-n",
            &self.gateway_ns[k].0,
            "link",
            "set",
            &self.links[k],
            if up { "up" } else { "down" },
        ]);
    }
}

/// `GET path` from `address` in the calling thread's namespace: status and body.
fn get(address: &str, path: &str) -> Option<(u16, String)> {
    let address: SocketAddr = address.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nx-api-key: shared\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    Some((status, body))
}

/// What one gateway's load saw: per request, when (since the run began) and the status
/// (0: a timeout or a broken connection).
type Seen = Vec<(Duration, u16)>;

/// Paced load from inside `ns`: `OFFERED_PER_SECOND` requests a second for `RUN`.
fn load(ns: String, began: Instant) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        in_ns(&ns, move || {
            let step = Duration::from_nanos(1_000_000_000 / OFFERED_PER_SECOND);
            let mut seen = Vec::new();
            let mut next = began;
            while began.elapsed() < RUN && seen.len() < 10_000 {
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                next += step;
                let at = began.elapsed();
                let status = get("127.0.0.1:8080", "/hello").map_or(0, |(status, _)| status);
                seen.push((at, status));
            }
            seen
        })
    })
}

/// Gateway `k`'s `tollgate_backend_fallbacks_total`, polled from inside its namespace
/// every 25 ms for the run: (since the run began, count).
fn watch_fallbacks(ns: String, began: Instant) -> std::thread::JoinHandle<Vec<(Duration, f64)>> {
    std::thread::spawn(move || {
        in_ns(&ns, move || {
            let mut samples = Vec::new();
            while began.elapsed() < RUN + Duration::from_secs(1) {
                let count = get("127.0.0.1:9090", "/metrics").and_then(|(_, body)| {
                    body.lines()
                        .find(|line| line.starts_with("tollgate_backend_fallbacks_total"))
                        .and_then(|line| line.split_whitespace().last()?.parse().ok())
                });
                samples.push((began.elapsed(), count.unwrap_or(0.0)));
                std::thread::sleep(Duration::from_millis(25));
            }
            samples
        })
    })
}

/// `FAULTS_TRACE=1`: each run prints its gateways' timelines, and their logs are kept in
/// `/tmp/tollgate-faults-gateway-K.log` (the last run's), to find out why a figure is bad.
fn tracing_faults() -> bool {
    std::env::var_os("FAULTS_TRACE").is_some()
}

/// Where gateway `k`'s log goes: nowhere, or with `FAULTS_TRACE` a file.
fn gateway_log(k: usize) -> Stdio {
    if !tracing_faults() {
        return Stdio::null();
    }
    std::fs::File::create(format!("/tmp/tollgate-faults-gateway-{k}.log"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

/// Per gateway, per half second of the run: admitted / offered.
fn print_timeline(seen: &[Seen]) {
    for (k, requests) in seen.iter().enumerate() {
        let mut line = format!("gateway {k}, admitted/offered per 500 ms:");
        let halves = RUN.as_millis() / 500;
        for half in 0..halves {
            let inside = requests
                .iter()
                .filter(|(at, _)| at.as_millis() / 500 == half);
            let (admitted, offered) = inside.fold((0, 0), |(a, o), (_, status)| {
                (a + u32::from(*status == 200), o + 1)
            });
            line += &format!(" {admitted}/{offered}");
        }
        eprintln!("{line}");
    }
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    fault: &'static str,
    mode: &'static str,
    offered: u64,
    admitted: u64,
    allowed: u64,
    wrongly_refused: u64,
    errors_5xx: u64,
    timeouts: u64,
    heal: Option<Duration>,
    bound: String,
    within: bool,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.admitted as f64 / self.allowed as f64
    }

    fn print(&self) {
        eprintln!(
            "| {} | {} | {:.2} ({} of {}; {} offered) | {} | {} | {} | {} | {} |",
            self.fault,
            self.mode,
            self.ratio(),
            self.admitted,
            self.allowed,
            self.offered,
            self.wrongly_refused,
            self.errors_5xx,
            self.timeouts,
            self.heal
                .map_or_else(|| "—".to_owned(), |d| format!("{} ms", d.as_millis())),
            self.bound
        );
    }
}

/// Runs `fault` (injected at `FAULT_AT`, undone `FAULT_FOR` later) against two gateways
/// in `mode`, and measures.
fn measure(fault: &'static str, mode: &'static str, store: &str) -> Row {
    // "hybrid, 4 gateways": the same mode across more instances.
    let gateways = if mode.ends_with("4 gateways") { 4 } else { 2 };
    let relayed = matches!(fault, "slow" | "stalled");
    let mut topology = if matches!(fault, "sentinel failover" | "master killed") {
        Topology::sentinel(gateways, store)
    } else if fault.contains("cluster master") {
        Topology::cluster(gateways, store)
    } else {
        Topology::single(gateways, store, relayed)
    };
    if fault.ends_with("coverage not required") {
        for port in 7000..7006 {
            let said = topology.cli(port, "CONFIG SET cluster-require-full-coverage no");
            assert!(said.contains("OK"), "{said}");
        }
    }
    let began = Instant::now() + Duration::from_millis(200);
    let loads: Vec<_> = topology
        .gateway_ns
        .iter()
        .map(|ns| load(ns.0.clone(), began))
        .collect();
    let watch = watch_fallbacks(topology.gateway_ns[0].0.clone(), began);
    std::thread::sleep((began + FAULT_AT).saturating_duration_since(Instant::now()));
    match fault {
        "partition" => topology.link(0, false),
        "restarted empty" => topology.redis = None,
        // Every reply to gateway 0 held 100 ms (twice its timeout), or 3 s.
        "slow" => topology.relay.as_ref().map_or((), |r| r.hold(100)),
        "sentinel failover" => {
            let said = topology.sentinel_says(&format!("SENTINEL FAILOVER {MASTER}"));
            assert!(said.contains("OK"), "the sentinel fails over: {said}");
        }
        // SIGKILL to the master: the sentinel promotes the replica after 500 ms down.
        "master killed" => topology.redis = None,
        // SIGKILL to the master of the bucket's slot: its replica takes over after the
        // 1 s node timeout.
        "cluster master killed" => topology.kill_bucket_master(),
        // A master the shared client's bucket is not on (with Redis's default
        // `cluster-require-full-coverage yes`, or not).
        "another cluster master killed"
        | "another cluster master killed, coverage not required" => {
            topology.kill_other_master();
        }
        // SIGSTOP: its connections stay open and nothing answers, as a hung host.
        "another cluster master frozen, coverage not required" => {
            topology.freeze_other_master(true);
        }
        "stalled" => topology.relay.as_ref().map_or((), |r| r.hold(3_000)),
        _ => {} // none: the baseline
    }
    std::thread::sleep((began + FAULT_AT + FAULT_FOR).saturating_duration_since(Instant::now()));
    // A failover is not undone: it has healed once the new master answers, counted from
    // when it began.
    let healed_at = if matches!(
        fault,
        "sentinel failover"
            | "master killed"
            | "cluster master killed"
            | "another cluster master killed"
            | "another cluster master killed, coverage not required"
    ) {
        FAULT_AT
    } else {
        began.elapsed()
    };
    match fault {
        "partition" => topology.link(0, true),
        "restarted empty" => topology.start_redis(),
        "slow" | "stalled" => topology.relay.as_ref().map_or((), |r| r.hold(0)),
        "another cluster master frozen, coverage not required" => {
            topology.freeze_other_master(false);
        }
        _ => {}
    }
    let seen: Vec<Seen> = loads.into_iter().map(|l| l.join().unwrap()).collect();
    if tracing_faults() {
        print_timeline(&seen);
    }
    let fallbacks = watch.join().unwrap();
    let all: Vec<(Duration, u16)> = seen.into_iter().flatten().collect();
    let offered = all.len() as u64;
    let admitted = all.iter().filter(|(_, s)| *s == 200).count() as u64;
    let errors_5xx = all.iter().filter(|(_, s)| *s >= 500).count() as u64;
    let timeouts = all.iter().filter(|(_, s)| *s == 0).count() as u64;
    // The budget over the run: a full burst, then the rate.
    let allowed = RATE + RATE * RUN.as_secs();
    let wrongly_refused = offered.min(allowed).saturating_sub(admitted);
    // Healed: the last time the partitioned gateway's fallback counter moved.
    let last_fallback = fallbacks
        .windows(2)
        .filter(|pair| pair[1].1 > pair[0].1)
        .map(|pair| pair[1].0)
        .next_back();
    let heal = last_fallback
        .filter(|at| *at >= healed_at)
        .map(|at| at - healed_at)
        .or(Some(Duration::ZERO).filter(|_| last_fallback.is_some()));
    // The bounds are in the time the cut instance decides without Redis: the fault, and
    // until it has healed (measured, and reported beside).
    let cut = FAULT_FOR + heal.unwrap_or_default();
    let cut_ms = u64::try_from(cut.as_millis()).unwrap_or(u64::MAX);
    let partitioned_offered = (OFFERED_PER_SECOND * cut_ms).div_ceil(1_000);
    let (bound, within) = match (fault, mode) {
        ("partition" | "slow" | "stalled", "local") => {
            let extra = RATE + (RATE * cut_ms).div_ceil(1_000);
            (
                format!("≤ allowed + one instance's own budget while cut off ({extra})"),
                admitted <= allowed + extra,
            )
        }
        ("partition", "allow") => (
            format!(
                "≤ allowed + what the cut instance was offered while cut off ({partitioned_offered})"
            ),
            admitted <= allowed + partitioned_offered,
        ),
        ("partition" | "slow" | "stalled", "deny") => (
            format!(
                "never over; wrongly refused ≤ what the cut instance was offered while cut off ({partitioned_offered})"
            ),
            admitted <= allowed && wrongly_refused <= partitioned_offered,
        ),
        ("partition" | "slow" | "stalled", "hybrid" | "hybrid, 4 gateways") => {
            let extra = RATE + (RATE * cut_ms).div_ceil(1_000);
            (
                format!("≤ allowed + one instance's own budget while cut off ({extra})"),
                admitted <= allowed + extra,
            )
        }
        ("restarted empty", _) => {
            let extra = RATE + (RATE * cut_ms).div_ceil(1_000);
            (
                format!(
                    "≤ allowed + one burst lost with the data + the fallback's own budget while down ({})",
                    extra + RATE
                ),
                admitted <= allowed + extra + RATE,
            )
        }
        ("sentinel failover" | "master killed" | "cluster master killed", _) => {
            // Replication is asynchronous: what the old master took and had not sent on
            // is lost, as is any budget spent by the fallback while the new one is found.
            let extra = 2 * (RATE + (RATE * cut_ms).div_ceil(1_000));
            (
                format!(
                    "≤ allowed + each instance's own budget until the new master answers ({extra})"
                ),
                admitted <= allowed + extra,
            )
        }
        ("another cluster master killed", _) => {
            // The bucket's own master never fails, and its requests go straight to it; but
            // with Redis's default `cluster-require-full-coverage yes` every node answers
            // CLUSTERDOWN from when the dead master is marked failed until its replica
            // takes over, so for that while every instance decides by its fallback.
            let extra = 2 * (RATE + (RATE * cut_ms).div_ceil(1_000));
            (
                format!(
                    "≤ allowed + each instance's own budget while the cluster answers CLUSTERDOWN ({extra})"
                ),
                admitted <= allowed + extra,
            )
        }
        (
            "another cluster master killed, coverage not required"
            | "another cluster master frozen, coverage not required",
            _,
        ) => (
            "≤ allowed, and not one fallback: the bucket's master never stopped answering"
                .to_owned(),
            admitted <= allowed && heal.is_none(),
        ),
        ("none", _) => (
            "≤ allowed (no fault: the baseline)".to_owned(),
            admitted <= allowed,
        ),
        _ => (String::new(), true),
    };
    Row {
        fault,
        mode,
        offered,
        admitted,
        allowed,
        wrongly_refused,
        errors_5xx,
        timeouts,
        heal,
        bound,
        within,
    }
}

fn print_header() {
    eprintln!(
        "| fault | mode | admitted ÷ allowed | wrongly refused | 5xx | timeouts | heal | bound |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|");
}

#[test]
fn faults_against_a_single_redis_stay_within_each_modes_bound() {
    if !can_run() {
        return;
    }
    let mut cases: Vec<(&str, &str, &str)> = vec![
        ("partition", "local", "on_backend_error = \"local\""),
        ("partition", "allow", "on_backend_error = \"allow\""),
        ("partition", "deny", "on_backend_error = \"deny\""),
        ("partition", "hybrid", "sync = \"local\""),
        // One fault for each other topology.
        ("sentinel failover", "local", "on_backend_error = \"local\""),
        (
            "another cluster master killed, coverage not required",
            "local",
            "on_backend_error = \"local\"",
        ),
    ];
    let wanted = std::env::var("FAULTS").ok();
    if wanted.is_some() {
        cases.extend([
            ("none", "remote", ""),
            ("none", "hybrid", "sync = \"local\""),
            ("none", "hybrid, 4 gateways", "sync = \"local\""),
            ("partition", "hybrid, 4 gateways", "sync = \"local\""),
            ("master killed", "hybrid", "sync = \"local\""),
            ("cluster master killed", "hybrid", "sync = \"local\""),
            ("master killed", "local", "on_backend_error = \"local\""),
            ("master killed", "deny", "on_backend_error = \"deny\""),
            (
                "cluster master killed",
                "local",
                "on_backend_error = \"local\"",
            ),
            (
                "another cluster master killed",
                "local",
                "on_backend_error = \"local\"",
            ),
            (
                "another cluster master frozen, coverage not required",
                "local",
                "on_backend_error = \"local\"",
            ),
            ("slow", "local", "on_backend_error = \"local\""),
            ("slow", "deny", "on_backend_error = \"deny\""),
            ("slow", "hybrid", "sync = \"local\""),
            ("stalled", "local", "on_backend_error = \"local\""),
            ("stalled", "hybrid", "sync = \"local\""),
            ("restarted empty", "local", "on_backend_error = \"local\""),
            ("restarted empty", "hybrid", "sync = \"local\""),
        ]);
    }
    // FAULTS=all: every row; FAULTS=<fault>: the rows of the faults it begins.
    if let Some(only) = wanted.filter(|w| w != "all") {
        cases.retain(|(fault, _, _)| fault.starts_with(only.as_str()));
    }
    assert!(!cases.is_empty(), "FAULTS names no fault the suite knows");
    let rows: Vec<Row> = cases
        .into_iter()
        .map(|(fault, mode, store)| measure(fault, mode, store))
        .collect();
    print_header();
    for row in &rows {
        row.print();
    }
    for row in &rows {
        assert!(row.within, "{row:?}");
        assert_eq!(row.errors_5xx, 0, "a failing store is never a 5xx: {row:?}");
    }
}

/// A config repository: `GET /rules.toml` answers the text of the moment, from a thread in
/// namespace `ns` on `0.0.0.0:8088`.
struct Repository {
    text: std::sync::Arc<parking_lot::Mutex<String>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Repository {
    fn start(ns: &str, text: &str) -> Repository {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let text = Arc::new(parking_lot::Mutex::new(text.to_owned()));
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::clone(&text);
        listen_in(ns, 8088, Arc::clone(&stop), move |mut client| {
            let _ = client.set_read_timeout(Some(Duration::from_secs(1)));
            let mut request = [0u8; 4096];
            let _ = client.read(&mut request);
            let body = served.lock().clone();
            let _ = write!(
                client,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        Repository { text, stop }
    }
}

impl Drop for Repository {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The generation of the config gateway `ns` has in force (from `/config`).
fn generation(ns: &str) -> Option<u64> {
    let ns = ns.to_owned();
    in_ns(&ns, || {
        let (_, body) = get("127.0.0.1:9090", "/config")?;
        let value: serde_json::Value = serde_json::from_str(&body).ok()?;
        value["generation"].as_u64()
    })
}

#[test]
fn a_gateway_cut_off_from_its_config_repository_keeps_its_rules_and_catches_up() {
    if !can_run() {
        return;
    }
    let id = format!(
        "{}{}",
        std::process::id() % 10_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let repo_ns = Netns::new(format!("tgf{id}c"));
    let gateway_ns = Netns::new(format!("tgf{id}w"));
    let (near, far) = (format!("tf{id}c"), format!("tf{id}w"));
    ip(&["link", "add", &near, "type", "veth", "peer", "name", &far]);
    ip(&["link", "set", &near, "netns", &repo_ns.0]);
    ip(&["link", "set", &far, "netns", &gateway_ns.0]);
    ip(&[
        "-n",
        &repo_ns.0,
        "addr",
        "add",
        "10.89.0.1/30",
        "dev",
        &near,
    ]);
    ip(&["-n", &repo_ns.0, "link", "set", &near, "up"]);
    ip(&[
        "-n",
        &gateway_ns.0,
        "addr",
        "add",
        "10.89.0.2/30",
        "dev",
        &far,
    ]);
    ip(&["-n", &gateway_ns.0, "link", "set", &far, "up"]);
    let repository = Repository::start(&repo_ns.0, "[limits]\n\"/\" = \"100/s\"\n");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.toml");
    std::fs::write(&local, "[reload]\npoll_interval = \"200ms\"\n").unwrap();
    let _gateway = Process(
        Command::new("ip")
            .args(["netns", "exec", &gateway_ns.0])
            .arg(env!("CARGO_BIN_EXE_tollgate"))
            .args(["--config", "http://10.89.0.1:8088/rules.toml"])
            .args(["--config", local.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:8080", "--admin", "127.0.0.1:9090"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while generation(&gateway_ns.0).is_none() {
        assert!(
            Instant::now() < deadline,
            "the gateway starts from the repository"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = generation(&gateway_ns.0).unwrap();
    // Cut off, then the config changes; the gateway keeps serving its last good rules.
    ip(&["-n", &gateway_ns.0, "link", "set", &far, "down"]);
    *repository.text.lock() = "[limits]\n\"/\" = \"50/s\"\n".to_owned();
    let cut = Instant::now();
    let mut served = 0;
    while cut.elapsed() < Duration::from_secs(2) {
        let ns = gateway_ns.0.clone();
        let status = in_ns(&ns, || get("127.0.0.1:8080", "/hello").map(|(s, _)| s));
        assert_eq!(status, Some(200), "the last good rules keep serving");
        served += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        generation(&gateway_ns.0),
        Some(before),
        "nothing applied while cut off"
    );
    // Healed: how long until the new config is in force (polls back off while failing).
    ip(&["-n", &gateway_ns.0, "link", "set", &far, "up"]);
    let healed = Instant::now();
    let deadline = healed + Duration::from_secs(30);
    while generation(&gateway_ns.0) == Some(before) {
        assert!(
            Instant::now() < deadline,
            "the change arrives after the partition"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let caught_up = healed.elapsed();
    eprintln!(
        "| config repository partitioned for 2 s while the config changed | poll_interval 200ms | {served} requests served, 0 failed | caught up {} ms after the partition ended |",
        caught_up.as_millis()
    );
    // Failed polls back off (doubling from 200 ms): after 2 s cut off the next poll is due
    // within about 1.6 s, plus the poll itself.
    assert!(
        caught_up < Duration::from_secs(5),
        "caught up in {caught_up:?}"
    );
}
