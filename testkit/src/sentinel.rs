//! Redis Sentinel for a test: a master, a replica of it, and one sentinel watching them
//! (quorum 1, the master judged down after 500 ms), each a real Debian `redis-server` on a
//! free loopback port, stopped by PID on drop. Where it is not installed the test says so
//! loudly and skips — unless `CI=true`, where it fails.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;
use crate::redis::{RedisOptions, RedisServer, binary};

/// The name the sentinel monitors the master under.
pub const MASTER_NAME: &str = "tollgate";

/// A master, its replica and a sentinel.
pub struct SentinelSetup {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinel: Option<Child>,
    sentinel_port: u16,
    /// With [`start_tls`](Self::start_tls): the sentinel's TLS port.
    sentinel_tls_port: Option<u16>,
    /// With [`start_with_password`](Self::start_with_password): what every process asks.
    password: Option<String>,
    _dir: tempfile::TempDir,
}

/// The certificate every process of a TLS setup serves, and its CA.
pub struct SentinelTls<'a> {
    pub pki: &'a crate::certs::Pki,
    pub server: crate::certs::Pair,
}

impl SentinelSetup {
    /// Starts the three and waits until the sentinel knows the replica, or returns `None`
    /// after saying why the test skips.
    pub fn start(test: &str) -> Option<SentinelSetup> {
        SentinelSetup::start_with(test, None, None)
    }

    /// The same with `password` required everywhere: by the master and the replica
    /// (`requirepass`, the replica's `masterauth`) and by the sentinel of its own clients
    /// (`requirepass`; it reaches the master with `sentinel auth-pass`).
    pub fn start_with_password(test: &str, password: &str) -> Option<SentinelSetup> {
        SentinelSetup::start_with(test, None, Some(password))
    }

    /// The same over TLS: the master and the replica serve TLS ports too, the replica is
    /// announced at its TLS port, and the sentinel speaks TLS to them and on a TLS port of
    /// its own — what a client reaches with `rediss://`. (Plain ports stay, for the
    /// fixture's own commands; the replication link is TLS.)
    pub fn start_tls(test: &str, tls: &SentinelTls<'_>) -> Option<SentinelSetup> {
        SentinelSetup::start_with(test, Some(tls), None)
    }

    fn start_with(
        test: &str,
        tls: Option<&SentinelTls<'_>>,
        password: Option<&str>,
    ) -> Option<SentinelSetup> {
        let auth = password.map(|p| ("default".to_owned(), p.to_owned()));
        // A replica syncs at once, not after the default 5 s wait for more replicas.
        let mut master_args = vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
        if let Some(password) = password {
            master_args.extend(["--requirepass".to_owned(), password.to_owned()]);
        }
        let tls_options = tls.map(|tls| crate::redis::RedisTlsOptions {
            cert: tls.server.cert.clone(),
            key: tls.server.key.clone(),
            ca: tls.pki.ca.clone(),
            client_certs: false,
        });
        let master = RedisServer::start_with(
            test,
            RedisOptions {
                tls: tls_options.clone(),
                args: master_args.clone(),
                auth: auth.clone(),
                ..RedisOptions::default()
            },
        )?;
        // Over TLS the replica replicates over TLS too, from the address the sentinel
        // knows the master by (else the sentinel "fixes" it to that address, and a plain
        // link to a TLS port never comes up).
        let mut replica_args = vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.tls_port().unwrap_or(master.port()).to_string(),
        ];
        if tls.is_some() {
            replica_args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
        }
        replica_args.extend(master_args);
        if let Some(password) = password {
            replica_args.extend(["--masterauth".to_owned(), password.to_owned()]);
        }
        let replica_tls_port = tls.map(|_| free_port());
        if let Some(port) = replica_tls_port {
            replica_args.extend(["--replica-announce-port".into(), port.to_string()]);
        }
        let replica = RedisServer::start_with(
            test,
            RedisOptions {
                tls: tls_options.clone(),
                tls_port: replica_tls_port,
                args: replica_args,
                auth,
            },
        )?;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("sentinel.conf");
        let sentinel_port = free_port();
        let sentinel_tls_port = tls.map(|_| free_port());
        // Over TLS the sentinel watches the master at its TLS port, and says so to clients.
        let watched = master.tls_port().unwrap_or(master.port());
        let mut text = format!(
            "port {sentinel_port}\nbind 127.0.0.1\ndaemonize no\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {watched} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} 500\n\
             sentinel failover-timeout {MASTER_NAME} 2000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n"
        );
        if let Some(password) = password {
            text.push_str(&format!(
                "requirepass {password}\nsentinel auth-pass {MASTER_NAME} {password}\n"
            ));
        }
        if let (Some(tls), Some(port)) = (tls, sentinel_tls_port) {
            text.push_str(&format!(
                "tls-port {port}\ntls-replication yes\ntls-auth-clients no\n\
                 tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n",
                tls.server.cert.display(),
                tls.server.key.display(),
                tls.pki.ca.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
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
            sentinel_tls_port,
            password: password.map(str::to_owned),
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

    /// The sentinel's TLS URL (`rediss://localhost:PORT`), with [`start_tls`](Self::start_tls).
    pub fn sentinel_tls_url(&self) -> Option<String> {
        self.sentinel_tls_port
            .map(|port| format!("rediss://localhost:{port}"))
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

    /// The port a client is told to reach the replica at (its TLS port, over TLS).
    pub fn replica_port(&self) -> u16 {
        self.replica.tls_port().unwrap_or(self.replica.port())
    }

    fn replica_linked(&self) -> bool {
        raw(
            self.replica.port(),
            "INFO replication",
            self.password.as_deref(),
        )
        .contains("master_link_status:up")
    }

    fn ask(&self, command: &str) -> Option<String> {
        let reply = raw(self.sentinel_port, command, self.password.as_deref());
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

/// One inline command to a plain port, after `AUTH password` when given; the whole reply
/// as text (empty on failure).
fn raw(port: u16, command: &str, password: Option<&str>) -> String {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if let Some(password) = password {
        let mut ok = [0u8; 5];
        let authed = stream
            .write_all(format!("AUTH {password}\r\n").as_bytes())
            .and_then(|()| stream.read_exact(&mut ok));
        if authed.is_err() || &ok != b"+OK\r\n" {
            return String::new();
        }
    }
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
