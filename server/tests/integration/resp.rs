//! The Redis-protocol front end with real clients: the `redis-cli` binary and the
//! Rust `redis` crate, against the gateway's listener on a free loopback port.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tollgate::Limits;
use tollgate_server::resp::{self, RespOptions};

use crate::support::{RunningGateway, start_gateway};

/// A gateway serving the Redis protocol too; its RESP address.
async fn gateway(config: &str) -> (RunningGateway, SocketAddr) {
    let running = start_gateway(config, |options| {
        options.resp = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let address = running.gateway.resp_addr().unwrap();
    (running, address)
}

const RULES: &str = "[limits]\n\"/\" = \"1000/d\"\nlogin = \"5/d\"\nshared = \"50/d\"\n";

async fn client(address: SocketAddr, resp3: bool) -> redis::aio::MultiplexedConnection {
    let protocol = if resp3 { "?protocol=resp3" } else { "" };
    redis::Client::open(format!("redis://{address}/{protocol}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn send(
    connection: &mut redis::aio::MultiplexedConnection,
    line: &str,
) -> redis::RedisResult<redis::Value> {
    let mut command = redis::cmd(line.split(' ').next().unwrap());
    for word in line.split(' ').skip(1) {
        command.arg(word);
    }
    command.query_async(connection).await
}

async fn integer(connection: &mut redis::aio::MultiplexedConnection, line: &str) -> i64 {
    match send(connection, line).await {
        Ok(redis::Value::Int(n)) => n,
        other => panic!("{line}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_reproduces_smytes_readme() {
    let (_running, address) = gateway(RULES).await;
    let Some(cli) = redis_cli() else {
        return;
    };
    let port = address.port().to_string();
    let replies = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|_| {
                let output = std::process::Command::new(&cli)
                    .args(["-p", &port, "RL.REDUCE", "TwoPerMin", "2", "60"])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&output.stdout).trim().to_owned()
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(replies, ["2", "1", "0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smytes_test_sequences_through_a_real_client() {
    let (_running, address) = gateway(RULES).await;
    let mut redis = client(address, false).await;
    // smyte's GetReduceCommands, line by line: command, reply.
    let script = [
        ("RL.REDUCE a 10 5 refill 3 at 2", 10),
        ("RL.PREDUCE a 10 5000 at 2000 refill 3", 9),
        ("RL.GET a 10 5 at 2 refill 3", 8),
        ("RL.PGET a 10 5000 refill 3 at 2000", 8),
        ("RL.REDUCE a 10 5 at 2 refill 3 take 5", 8),
        ("RL.PREDUCE a 10 5000 refill 3 take 5 at 2000", 3),
        ("RL.GET a 10 5 at 2 refill 3", 0),
        ("RL.GET a 10 5 at 8 refill 3", 3),
        ("RL.REDUCE a 10 5 at 8 take 2 refill 3", 3),
        ("RL.PREDUCE a 10 5000 at 8000 refill 3", 1),
        ("RL.PREDUCE a 10 5000 at 9000 refill 3", 0),
        ("RL.GET a 10 5 at 13 refill 3", 3),
        ("RL.REDUCE a 10 5 at 14 refill 3 take 4 strict", 3),
        ("rl.reduce a 10 5 at 16 refill 3 take 4 strict", 0),
        ("RL.REDUCE a 10 5 at 18 refill 3 take 1 STRICT", 0),
        ("RL.REDUCE a 10 5 at 23 refill 3 take 2 strict", 3),
    ];
    for (line, expected) in script {
        assert_eq!(integer(&mut redis, line).await, expected, "{line}");
    }
    // smyte's SessionizeCommands.
    let sessions = [
        ("RL.SESSIONIZE s 1 3600 at 0 STRICT", (1, 0)),
        ("RL.SESSIONIZE s 1 3600 at 1 STRICT", (0, 0)),
        ("RL.SESSIONIZE s 1 3600 at 1000 STRICT", (0, 0)),
        ("RL.SESSIONIZE s 1 3600 at 3605 STRICT", (0, 0)),
        ("RL.SESSIONIZE s 1 3600 at 7205 STRICT", (1, 7_205_000)),
    ];
    for (line, expected) in sessions {
        let reply: (i64, i64) =
            redis::from_redis_value(send(&mut redis, line).await.unwrap()).unwrap();
        assert_eq!(reply, expected, "{line}");
    }
    // The same key with other numbers is another bucket.
    assert_eq!(integer(&mut redis, "RL.REDUCE a 20 5 at 23").await, 20);
    // Argument errors, in smyte's (and Redis's) words; the connection stays usable.
    for (line, error) in [
        (
            "RL.GET abc 10 abc",
            "value is not an integer or out of range",
        ),
        ("RL.PGET abc 0 60 take 2", "syntax error"),
        ("RL.REDUCE abc 10 60 refill", "syntax error"),
        (
            "RL.GET abc 10",
            "wrong number of arguments for 'rl.get' command",
        ),
        (
            "NOSUCH thing",
            "unknown command 'NOSUCH', with args beginning with: 'thing'",
        ),
    ] {
        let failure = send(&mut redis, line).await.unwrap_err();
        assert!(failure.to_string().contains(error), "{line}: {failure}");
    }
    assert_eq!(
        send(&mut redis, "PING").await.unwrap(),
        redis::Value::SimpleString("PONG".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_commands_pipelined_in_one_write_answer_in_order() {
    let (_running, address) = gateway(RULES).await;
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut request = Vec::new();
    for _ in 0..2_000 {
        request.extend_from_slice(
            b"*4\r\n$9\r\nRL.REDUCE\r\n$5\r\npiped\r\n$4\r\n1500\r\n$4\r\n3600\r\n",
        );
    }
    stream.write_all(&request).await.unwrap();
    let mut replies = Vec::new();
    let mut buffer = vec![0; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(10);
    while replies.iter().filter(|&&b| b == b'\n').count() < 2_000 {
        assert!(Instant::now() < deadline, "replies stopped coming");
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed early");
        replies.extend_from_slice(&buffer[..n]);
    }
    let numbers: Vec<i64> = String::from_utf8(replies)
        .unwrap()
        .lines()
        .map(|line| line.strip_prefix(':').unwrap().parse().unwrap())
        .collect();
    let expected: Vec<i64> = (0..2_000).map(|i| (1_500 - i).max(0)).collect();
    assert_eq!(
        numbers, expected,
        "each reply is the tokens before its own command, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_tollgates_commands_and_live_rules() {
    let (running, address) = gateway(RULES).await;
    let mut redis = client(address, true).await;
    // TG.CHECK over the live rules: login is 5 a day.
    for remaining in (0..5).rev() {
        let reply: (i64, i64, i64, i64, String) = redis::from_redis_value(
            send(&mut redis, "TG.CHECK login/203.0.113.7")
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (reply.0, reply.1, reply.2, reply.4.as_str()),
            (1, remaining, 0, "login")
        );
    }
    let denied: (i64, i64, i64, i64, String) = redis::from_redis_value(
        send(&mut redis, "TG.CHECK login/203.0.113.7")
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!((denied.0, denied.1), (0, 0));
    assert!(
        denied.2 > 17_000_000,
        "a fifth of a day to wait: {denied:?}"
    );
    // TG.EXPLAIN answers a map in RESP3.
    let explained = send(&mut redis, "TG.EXPLAIN login/203.0.113.7")
        .await
        .unwrap();
    let redis::Value::Map(fields) = explained else {
        panic!("a map: {explained:?}");
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == redis::Value::BulkString(name.as_bytes().to_vec()))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        field("rule"),
        Some(redis::Value::BulkString(b"login".to_vec()))
    );
    assert_eq!(
        field("bucket"),
        Some(redis::Value::BulkString(b"login/203.0.113.7".to_vec()))
    );
    assert_eq!(
        field("kind"),
        Some(redis::Value::BulkString(b"gcra".to_vec()))
    );
    assert!(send(&mut redis, "TG.PEEK nowhere").await.is_ok());

    // A saved config reaches TG.CHECK: login goes from 5 to 50 a day.
    let file = running.gateway.limits().status().files[0].clone();
    std::fs::write(&file, RULES.replace("login = \"5/d\"", "login = \"50/d\"")).unwrap();
    let saved = Instant::now();
    loop {
        let reply: (i64, i64, i64, i64, String) =
            redis::from_redis_value(send(&mut redis, "TG.PEEK login/203.0.113.7").await.unwrap())
                .unwrap();
        if reply.1 == 45 {
            break; // the 5 taken carried over into the new quota (the denial took nothing)
        }
        assert!(
            saved.elapsed() < Duration::from_secs(1),
            "not applied within a second: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_one_key_admit_exactly_the_budget() {
    let (_running, address) = gateway(RULES).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut redis = client(address, false).await;
            let mut admitted = (0, 0);
            for _ in 0..40 {
                if integer(&mut redis, "RL.REDUCE shared 100 3600").await >= 1 {
                    admitted.0 += 1;
                }
                let check: (i64, i64, i64, i64, String) = redis::from_redis_value(
                    send(&mut redis, "TG.CHECK shared/one-client")
                        .await
                        .unwrap(),
                )
                .unwrap();
                admitted.1 += check.0;
            }
            admitted
        }));
    }
    let mut total = (0, 0);
    for task in tasks {
        let (smyte, rules) = task.await.unwrap();
        total = (total.0 + smyte, total.1 + rules);
    }
    assert_eq!(
        total.0, 100,
        "RL.REDUCE: the bucket's 100 tokens, not one more or less"
    );
    assert_eq!(
        total.1, 50,
        "TG.CHECK under shared = 50/d: 50 of 320, exactly"
    );
}

/// A listener with small bounds, served directly through `resp::serve`.
async fn bounded(options: RespOptions) -> SocketAddr {
    let limits = Limits::from_toml("[limits]\n\"/\" = \"10/s\"\n").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(resp::serve(
        limits,
        listener,
        options,
        std::future::pending(),
    ));
    address
}

/// Sends `bytes` and reads until the server closes (or 5 s pass): what it answered.
async fn answer_to(address: SocketAddr, bytes: &[u8]) -> (String, bool) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    (String::from_utf8_lossy(&answer).into_owned(), read.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_an_error_and_a_closed_connection_and_the_server_lives_on() {
    let mut options = RespOptions::default();
    options.max_connections = 4;
    options.idle_timeout = Duration::from_millis(500);
    let address = bounded(options).await;
    for (hostile, expected) in [
        (
            &b"*1000000000\r\n"[..],
            "-ERR Protocol error: too many arguments",
        ),
        (
            b"*1\r\n$1000000000\r\n",
            "-ERR Protocol error: invalid bulk length",
        ),
        (
            b"*2\r\n$4\r\nPING\r\n:1\r\n",
            "-ERR Protocol error: expected '$'",
        ),
        (b"\x00\xff\xfe garbage \x01\r\n", "-ERR unknown command"),
        (b"POST / HTTP/1.1\r\nHost: x\r\n\r\n", ""),
        // What came before it is answered, though it arrived in the same read (found by
        // the `resp` fuzz target: the answers were dropped with the connection).
        (b"PING\r\nPOST / HTTP/1.1\r\nHost: x\r\n\r\n", "+PONG\r\n"),
    ] {
        let (answer, closed) = answer_to(address, hostile).await;
        assert!(answer.starts_with(expected), "{hostile:?} gave {answer:?}");
        if !expected.starts_with("-ERR unknown") {
            assert!(closed, "{hostile:?}: the connection is closed");
        }
    }
    // A command larger than max_command_bytes is cut off while it arrives.
    let mut endless = b"*60\r\n".to_vec();
    for _ in 0..20 {
        endless.extend_from_slice(b"$16000\r\n");
        endless.extend(std::iter::repeat_n(b'x', 16_000));
        endless.extend_from_slice(b"\r\n");
    }
    let (answer, closed) = answer_to(address, &endless).await;
    assert_eq!(answer, "-ERR Protocol error: command too large\r\n");
    assert!(closed);

    // An idle client is let go.
    let started = Instant::now();
    let (answer, closed) = answer_to(address, b"").await;
    assert!(answer.is_empty() && closed);
    assert!(started.elapsed() >= Duration::from_millis(400));

    // A client that pipelines without reading cannot grow the server's memory: the server
    // writes its replies out every max_output_bytes, stalls when the client does not take
    // them, and drops it after the idle timeout — long before all its replies are sent.
    let (one, _) = answer_to(address, b"COMMAND\r\nQUIT\r\n").await;
    let reply_bytes = one.len() - "+OK\r\n".len();
    let mut greedy = tokio::net::TcpStream::connect(address).await.unwrap();
    let asked = 20_000;
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        greedy.write_all(&b"COMMAND\r\n".repeat(asked)),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut received = 0;
    let mut buffer = vec![0; 1 << 16];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), greedy.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => received += n,
            Err(_) => panic!("the connection of a client that does not read stayed open"),
        }
    }
    assert!(
        received < asked * reply_bytes / 2,
        "{received} of {} bytes of replies were produced for a client that never read",
        asked * reply_bytes
    );

    // The connection cap: the fifth at once is told why.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"PING\r\n").await.unwrap();
        let mut pong = [0; 7];
        stream.read_exact(&mut pong).await.unwrap();
        held.push(stream);
    }
    let (answer, _) = answer_to(address, b"PING\r\n").await;
    assert_eq!(answer, "-ERR max number of clients reached\r\n");
    drop(held);

    // And through all of it the server kept serving.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (answer, _) = answer_to(address, b"PING\r\nQUIT\r\n").await;
    assert_eq!(answer, "+PONG\r\n+OK\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_is_asked_for_when_set() {
    let mut options = RespOptions::default();
    options.password = Some("s3cret".into());
    let address = bounded(options).await;
    let (answer, _) = answer_to(
        address,
        b"RL.GET k 1 1\r\nAUTH wrong\r\nAUTH s3cret\r\nRL.GET k 1 1\r\nQUIT\r\n",
    )
    .await;
    assert_eq!(
        answer,
        "-NOAUTH Authentication required.\r\n\
         -WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n:1\r\n+OK\r\n"
    );
    let (answer, _) = answer_to(address, b"HELLO 3 AUTH default s3cret\r\nQUIT\r\n").await;
    assert!(
        answer.starts_with("%7\r\n$6\r\nserver\r\n$8\r\ntollgate\r\n"),
        "{answer}"
    );
}

/// Debian's `redis-cli`, or a loud skip (a failure under `CI=true`).
fn redis_cli() -> Option<String> {
    let found = std::process::Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok();
    if found {
        return Some("redis-cli".into());
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "redis-cli is required under CI (apt-get install redis-tools)"
    );
    eprintln!("SKIPPED: redis-cli is not installed (apt-get install redis-tools)");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_defined_buckets_are_listed_forgiven_and_survive_a_restart() {
    use crate::support::{get, send};
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = format!("[store]\nsnapshot = \"{}\"\n{RULES}", snapshot.display());

    let (running, address) = gateway(&config).await;
    let mut redis = client(address, false).await;
    assert_eq!(
        integer(&mut redis, "RL.REDUCE signup 10 86400 TAKE 4").await,
        10
    );
    assert_eq!(integer(&mut redis, "RL.REDUCE forgiven 3 86400").await, 3);
    let admin = running.gateway.admin_addr();
    let listed = get(admin, "/buckets?prefix=/rl/&sort=key", &[]).await;
    assert!(
        listed.body.contains(r#""key":"/rl/10:10:86400000:signup""#)
            && listed.body.contains(r#""remaining":6"#)
            && listed.body.contains(r#""rule":"RL.*""#),
        "{}",
        listed.body
    );
    let forgive = send(
        admin,
        http::Method::DELETE,
        "/buckets/%2Frl%2F3%3A3%3A86400000%3Aforgiven",
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert_eq!(forgive.status, http::StatusCode::NO_CONTENT);
    assert_eq!(
        integer(&mut redis, "RL.GET forgiven 3 86400").await,
        3,
        "forgiven: full again"
    );

    let metrics = get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("tollgate_resp_commands_total{command=\"rl.reduce\"}")
            && metrics.contains("tollgate_resp_command_seconds_bucket{command="),
        "{metrics}"
    );

    running.gateway.shutdown().await;
    let saved = std::fs::read_to_string(&snapshot).unwrap();
    assert!(saved.contains("discrete"), "{saved}");

    let (_again, address) = gateway(&config).await;
    let mut redis = client(address, false).await;
    assert_eq!(
        integer(&mut redis, "RL.GET signup 10 86400").await,
        6,
        "a restart hands out nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tg_charge_and_tg_refund_settle_costs_known_afterwards() {
    let (_running, address) = gateway(RULES).await;
    let mut redis = client(address, false).await;
    let reply = |value: redis::Value| -> (i64, i64, i64, i64, String) {
        redis::from_redis_value(value).unwrap()
    };
    // 1000 a day: a response that turned out to cost 1200 puts the key 200 in debt.
    let charged = reply(send(&mut redis, "TG.CHARGE llm/key-1 1200").await.unwrap());
    assert_eq!((charged.0, charged.1, charged.4.as_str()), (0, 0, "/"));
    let refused = reply(send(&mut redis, "TG.CHECK llm/key-1").await.unwrap());
    assert_eq!(refused.0, 0, "in debt: refused until it is paid off");
    assert!(refused.2 > 0, "{refused:?}");
    // 500 given back: the debt is paid and 300 are free again.
    let refunded = reply(send(&mut redis, "TG.REFUND llm/key-1 500").await.unwrap());
    assert_eq!((refunded.0, refunded.1), (1, 300));
    // Never past full.
    let full = reply(
        send(&mut redis, "TG.REFUND llm/key-1 100000")
            .await
            .unwrap(),
    );
    assert_eq!(full.1, 1000);
    for bad in [
        "TG.CHARGE llm/key-1 0",
        "TG.REFUND llm/key-1 -5",
        "TG.CHARGE llm/key-1 many",
    ] {
        assert!(send(&mut redis, bad).await.is_err(), "{bad}");
    }
    assert!(
        send(&mut redis, "TG.CHARGE llm/key-1").await.is_err(),
        "arity"
    );
}
