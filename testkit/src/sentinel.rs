//! Redis Sentinel for a test: a master, a replica of it, and one sentinel watching them
//! (quorum 1, the master judged down after 500 ms), each a real Debian `redis-server` on a
//! free loopback port, stopped by PID on drop. Where it is not installed the test says so
//! loudly and skips — unless `CI=true`, where it fails.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::{RedisOptions, RedisServer, binary, free_port};

/// The name the sentinel monitors the master under.
pub const MASTER_NAME: &str = "tollgate";

/// A master, its replica and a sentinel.
pub struct SentinelSetup {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinel: Option<Child>,
    sentinel_port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelSetup {
    /// Starts the three and waits until the sentinel knows the replica, or returns `None`
    /// after saying why the test skips.
    pub fn start(test: &str) -> Option<SentinelSetup> {
        let master = RedisServer::start(test)?;
        let replica = RedisServer::start_with(
            test,
            RedisOptions {
                args: vec![
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    master.port().to_string(),
                ],
                ..RedisOptions::default()
            },
        )?;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("sentinel.conf");
        let sentinel_port = free_port();
        std::fs::write(
            &config,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndaemonize no\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                 sentinel failover-timeout {MASTER_NAME} 2000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                master.port()
            ),
        )
        .unwrap();
        let binary = binary()?;
        let sentinel = Command::new(binary)
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel starts");
        let setup = SentinelSetup {
            master,
            replica,
            sentinel: Some(sentinel),
            sentinel_port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let replicas = setup.ask(&format!("SENTINEL replicas {MASTER_NAME}"));
            let linked = setup
                .replica
                .command("INFO replication")
                .is_some_and(|_| setup.replica_linked());
            if linked && replicas.is_some_and(|r| r.contains("ip")) {
                return Some(setup);
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel did not see the replica within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The sentinel's URL.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// The port the sentinel names as the master's now.
    pub fn master_port(&self) -> Option<u16> {
        let reply = self.ask(&format!("SENTINEL get-master-addr-by-name {MASTER_NAME}"))?;
        reply.lines().filter_map(|l| l.trim().parse().ok()).next()
    }

    /// Kills the master (SIGKILL, by PID), as a crash would.
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    fn replica_linked(&self) -> bool {
        raw(self.replica.port(), "INFO replication").contains("master_link_status:up")
    }

    fn ask(&self, command: &str) -> Option<String> {
        let reply = raw(self.sentinel_port, command);
        (!reply.is_empty()).then_some(reply)
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        if let Some(mut child) = self.sentinel.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One inline command to a plain port; the whole reply as text (empty on failure).
fn raw(port: u16, command: &str) -> String {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream
        .write_all(format!("{command}\r\n").as_bytes())
        .is_err()
    {
        return String::new();
    }
    let mut text = String::new();
    let mut buffer = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
        if n < buffer.len() {
            break;
        }
    }
    text
}
