//! TLS on every listener and to HTTPS upstreams, with real clients — `curl`, `redis-cli
//! --tls`, a tonic client over rustls — and certificates the tests make: what is served,
//! client certificates required and refused, certificates re-read when they change (a bad
//! pair keeping the old one), plaintext spoken to a TLS port and TLS to a plaintext one,
//! and a handshake that never finishes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use tollgate_testkit::certs::{Pair, Pki};

use crate::support::{get, start_gateway};

const RULES: &str = "[limits]\n\"/\" = \"100/min\"\n";

/// A `[gateway.tls]`-style table for `pair`, with client certificates from `client_ca`.
fn tls_table(table: &str, pair: &Pair, client_ca: Option<&Pki>) -> String {
    let mut text = format!(
        "[gateway.{table}]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pair.cert.display(),
        pair.key.display()
    );
    if let Some(ca) = client_ca {
        text.push_str(&format!("client_ca_file = \"{}\"\n", ca.ca.display()));
    }
    text
}

/// `curl` of `url`: the status it printed (000 when there was no HTTP answer) and its
/// stderr. `args` adds `--cacert` and the like.
fn curl(url: &str, args: &[&str]) -> Option<(String, String)> {
    let output = match Command::new("curl")
        .args([
            "-s",
            "-S",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .arg(url)
        .output()
    {
        Ok(output) => output,
        Err(_) => {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "curl is required under CI (apt-get install curl)"
            );
            eprintln!("SKIPPED: curl is not installed (apt-get install curl)");
            return None;
        }
    };
    Some((
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn https(address: SocketAddr, path: &str) -> String {
    format!("https://localhost:{}{path}", address.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_and_admin_serve_https_and_plaintext_spoken_to_them_gets_nothing() {
    let pki = Pki::new("gateway");
    let server = pki.server("gateway");
    let config = format!("{RULES}{}", tls_table("tls", &server, None));
    let running = start_gateway(&config, |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    let ca = pki.ca.display().to_string();
    let ca_args = ["--cacert", ca.as_str()];
    let Some((status, _)) = curl(&https(proxy, "/hello"), &ca_args) else {
        return;
    };
    assert_eq!(
        status, "200",
        "the proxy over HTTPS, verified against the CA"
    );
    let (status, _) = curl(&https(admin, "/healthz"), &ca_args).unwrap();
    assert_eq!(status, "200", "the admin listener over HTTPS");

    // A client that does not trust the CA refuses the proxy's certificate.
    let (status, error) = curl(&https(proxy, "/hello"), &[]).unwrap();
    assert_eq!(status, "000", "{error}");
    assert!(error.contains("certificate"), "{error}");

    // Plain HTTP to the TLS port: no HTTP answer, and the server lives on.
    let mut plain = TcpStream::connect(proxy).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "no HTTP answer over plaintext: {:?}",
        String::from_utf8_lossy(&answer)
    );
    let (status, _) = curl(&https(proxy, "/hello"), &ca_args).unwrap();
    assert_eq!(status, "200", "and the next client is served");
    drop(running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_from_the_configured_ca_only() {
    let pki = Pki::new("gateway");
    let foreign = Pki::new("foreign");
    let server = pki.server("gateway");
    let config = format!("{RULES}{}", tls_table("tls", &server, Some(&pki)));
    let running = start_gateway(&config, |_| {}).await;
    let proxy = running.gateway.listen_addr();
    let ca = pki.ca.display().to_string();
    let ours = pki.client("alice", "alice");
    let theirs = foreign.client("mallory", "mallory");
    let with = |pair: &Pair| {
        vec![
            "--cacert".to_owned(),
            ca.clone(),
            "--cert".to_owned(),
            pair.cert.display().to_string(),
            "--key".to_owned(),
            pair.key.display().to_string(),
        ]
    };
    let Some((status, error)) = curl(&https(proxy, "/hello"), &["--cacert", &ca]) else {
        return;
    };
    assert_eq!(status, "000", "no client certificate, no answer: {error}");
    let args = with(&ours);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, error) = curl(&https(proxy, "/hello"), &args).unwrap();
    assert_eq!(status, "200", "a certificate from the CA: {error}");
    let args = with(&theirs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, error) = curl(&https(proxy, "/hello"), &args).unwrap();
    assert_eq!(status, "000", "a certificate from another CA: {error}");
    drop(running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_certificate_is_used_for_new_connections_and_a_bad_one_keeps_the_old() {
    let first = Pki::new("first");
    let second = Pki::new("second");
    let live = tempfile::tempdir().unwrap();
    let (cert, key) = (live.path().join("cert.pem"), live.path().join("key.pem"));
    let install = |pair: &Pair| {
        std::fs::copy(&pair.key, &key).unwrap();
        std::fs::copy(&pair.cert, &cert).unwrap();
    };
    install(&first.server("one"));
    let live_pair = Pair {
        cert: cert.clone(),
        key: key.clone(),
    };
    let config = format!("{RULES}{}", tls_table("tls", &live_pair, None));
    let running = start_gateway(&config, |_| {}).await;
    let admin = running.gateway.admin_addr();
    let trusts = |pki: &Pki| {
        let ca = pki.ca.display().to_string();
        curl(&https(admin, "/healthz"), &["--cacert", &ca]).map(|(status, _)| status)
    };
    let Some(status) = trusts(&first) else {
        return;
    };
    assert_eq!(status, "200");

    // A new pair from another CA: new connections get it within a couple of seconds.
    std::thread::sleep(Duration::from_millis(1100));
    install(&second.server("two"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while trusts(&second).as_deref() != Some("200") {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(
        trusts(&first).as_deref(),
        Some("200"),
        "the old one is gone"
    );

    // A broken pair: refused, the working one stays, and it is counted.
    std::fs::write(&cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        trusts(&second).as_deref(),
        Some("200"),
        "the previous pair still serves"
    );
    let ca = second.ca.display().to_string();
    let metrics = Command::new("curl")
        .args(["-s", "--cacert", &ca])
        .arg(https(admin, "/metrics"))
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.lines().any(
            |line| line.starts_with("tollgate_tls_reload_failures_total") && !line.ends_with(" 0")
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_never_finishes_is_cut_after_the_timeout() {
    let pki = Pki::new("gateway");
    let config = format!("{RULES}{}", tls_table("tls", &pki.server("gateway"), None));
    let running = start_gateway(&config, |options| {
        options.header_read_timeout = Some(Duration::from_millis(300));
    })
    .await;
    let mut silent = TcpStream::connect(running.gateway.listen_addr()).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let read = silent.read(&mut byte);
    assert!(matches!(read, Ok(0) | Err(_)), "closed: {read:?}");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(250) && held < Duration::from_secs(5),
        "cut after the timeout, not before and not never: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_speaks_tls_to_the_resp_listener_with_a_client_certificate() {
    let pki = Pki::new("resp");
    let config = format!(
        "{RULES}{}",
        tls_table("resp_tls", &pki.server("resp"), Some(&pki))
    );
    let running = start_gateway(&config, |options| {
        options.resp = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let port = running.gateway.resp_addr().unwrap().port().to_string();
    let client = pki.client("worker", "worker");
    let cli = |extra: &[&str]| {
        Command::new("redis-cli")
            .args(["-h", "localhost", "-p", &port, "--tls", "--cacert"])
            .arg(&pki.ca)
            .args(extra)
            .args(["TG.CHECK", "api/203.0.113.7"])
            .output()
    };
    let cert = client.cert.display().to_string();
    let key = client.key.display().to_string();
    let Ok(output) = cli(&["--cert", &cert, "--key", &key]) else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "redis-cli is required under CI"
        );
        eprintln!("SKIPPED: redis-cli is not installed (apt-get install redis-tools)");
        return;
    };
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(answer.starts_with("1\n99\n"), "admitted over TLS: {answer}");
    // Without a client certificate the handshake is refused.
    let output = cli(&[]).unwrap();
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(
        !answer.starts_with('1'),
        "refused without a certificate: {answer}"
    );
    // Plaintext to the TLS port: nothing is decided.
    let output = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "TG.CHECK",
            "api/203.0.113.8",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&output.stdout).starts_with('1'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reaches_the_grpc_listener_over_tls() {
    use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor::Entry,
    };
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};

    let pki = Pki::new("grpc");
    let config = format!(
        "[limits]\n\"edge/remote_address\" = \"1/min\"\n{}",
        tls_table("grpc_tls", &pki.server("grpc"), None)
    );
    let running = start_gateway(&config, |options| {
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let port = running.gateway.grpc_addr().unwrap().port();
    let ca = Certificate::from_pem(std::fs::read(&pki.ca).unwrap());
    let channel = Channel::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(ca)
                .domain_name("localhost"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let request = || RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: "203.0.113.7".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let first = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.overall_code(), Code::Ok);
    let second = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.overall_code(), Code::OverLimit);

    // A plaintext HTTP/2 client gets no answer from the TLS port.
    let plain = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    if let Ok(channel) = plain {
        let answer = RateLimitServiceClient::new(channel)
            .should_rate_limit(request())
            .await;
        assert!(answer.is_err(), "no answer over plaintext");
    }
}

/// An HTTPS upstream on a free port, serving "secure" with `pair`.
async fn https_upstream(pair: &Pair) -> SocketAddr {
    let tls = tollgate_server::tls::TlsAcceptor::load(
        "upstream",
        tollgate_server::tls::ListenerTls::new(&pair.cert, &pair.key),
        &[b"http/1.1"],
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tls = std::sync::Arc::clone(&tls);
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(stream, Duration::from_secs(5)).await else {
                    return;
                };
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"secure")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_verified_against_the_ca_file_and_refused_otherwise() {
    let pki = Pki::new("upstream");
    let good = https_upstream(&pki.server("upstream")).await;
    let wrong_host = https_upstream(&pki.server_for("elsewhere", &["api.example.net"])).await;
    let ca = pki.ca.clone();
    let through = |upstream: SocketAddr, ca_file: Option<std::path::PathBuf>| async move {
        let running = start_gateway(RULES, |options| {
            options.upstream = Some(
                format!("https://localhost:{}", upstream.port())
                    .parse()
                    .unwrap(),
            );
            options.upstream_ca_file = ca_file;
        })
        .await;
        let reply = get(running.gateway.listen_addr(), "/hello", &[]).await;
        (reply.status.as_u16(), reply.body)
    };
    assert_eq!(
        through(good, Some(ca.clone())).await,
        (200, "secure".into())
    );
    let (status, body) = through(good, None).await;
    assert_eq!(
        (status, body.as_str()),
        (502, r#"{"error":"upstream_unavailable"}"#),
        "not among the system's roots"
    );
    let (status, _) = through(wrong_host, Some(ca)).await;
    assert_eq!(status, 502, "a certificate for another host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_on_a_plaintext_port_gets_an_error_and_the_server_lives_on() {
    let running = start_gateway(RULES, |_| {}).await;
    let proxy = running.gateway.listen_addr();
    let Some((status, error)) = curl(&https(proxy, "/hello"), &["--insecure"]) else {
        return;
    };
    assert_eq!(status, "000", "no HTTPS from a plaintext port: {error}");
    let reply = get(proxy, "/hello", &[]).await;
    assert_eq!(reply.status.as_u16(), 200, "and plain HTTP still is served");
}

/// A PEM block that is a private key by its label and garbage inside: what a rotation job
/// writing the wrong thing, or half a file, leaves behind.
const GARBAGE_KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
    bm90IGEga2V5LCBqdXN0IHNvbWUgYnl0ZXMgdGhhdCBhIHJvdGF0aW9uIGpvYiB3cm90ZQ==\n\
    -----END PRIVATE KEY-----\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_or_ca_that_fails_to_load_is_named_with_its_listener_at_start_and_on_reload() {
    let pki = Pki::new("named");
    let live = tempfile::tempdir().unwrap();
    let copy = |pair: &Pair, name: &str| {
        let (cert, key) = (
            live.path().join(format!("{name}.crt")),
            live.path().join(format!("{name}.key")),
        );
        std::fs::copy(&pair.cert, &cert).unwrap();
        std::fs::copy(&pair.key, &key).unwrap();
        Pair { cert, key }
    };
    let http = copy(&pki.server("http"), "http");
    let resp = copy(&pki.server("resp"), "resp");

    // At start: the gateway refuses to start, naming the listener and the file.
    let good_key = std::fs::read(&resp.key).unwrap();
    std::fs::write(&resp.key, GARBAGE_KEY).unwrap();
    let config = format!(
        "{RULES}{}{}",
        tls_table("tls", &http, None),
        tls_table("resp_tls", &resp, None)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, &config).unwrap();
    let mut options = crate::support::loopback_options(&file);
    options.resp = Some("127.0.0.1:0".parse().unwrap());
    let error = tollgate_server::Gateway::start(options)
        .await
        .expect_err("a garbage key is fatal at start")
        .to_string();
    let key_path = resp.key.display().to_string();
    assert!(
        error.contains("resp listener") && error.contains(&key_path) && error.contains("key_file"),
        "names the listener and the file: {error}"
    );
    assert!(!error.contains(&http.key.display().to_string()), "{error}");

    // On a reload: the old pair stays, and /config says which listener and which file.
    std::fs::write(&resp.key, &good_key).unwrap();
    let running = start_gateway(&config, |options| {
        options.resp = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = running.gateway.admin_addr();
    let ca = pki.ca.display().to_string();
    let config_json = || {
        let output = Command::new("curl")
            .args(["-s", "--max-time", "10", "--cacert", &ca])
            .arg(https(admin, "/config"))
            .output();
        let Ok(output) = output else {
            assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "curl under CI");
            return None;
        };
        Some(serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap())
    };
    let Some(before) = config_json() else {
        eprintln!("SKIPPED: curl is not installed (apt-get install curl)");
        return;
    };
    let listeners: Vec<&str> = before["tls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tls| tls["listener"].as_str().unwrap())
        .collect();
    assert_eq!(listeners, ["proxy and admin", "resp"], "{before}");
    assert!(before["tls"][1]["last_error"].is_null());

    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(&resp.key, GARBAGE_KEY).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        let now = config_json().unwrap();
        if let Some(error) = now["tls"][1]["last_error"].as_str() {
            break error.to_owned();
        }
        assert!(Instant::now() < deadline, "no reload error in {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        error.starts_with("resp listener: key_file ") && error.contains(&key_path),
        "{error}"
    );
    assert!(error.contains("not a usable private key"), "{error}");

    // A key that is a key, but another certificate's: both files are named.
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::copy(pki.server("other").key, &resp.key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        let now = config_json().unwrap();
        let error = now["tls"][1]["last_error"].as_str().unwrap_or_default();
        if error.contains("is not the key of") {
            break error.to_owned();
        }
        assert!(Instant::now() < deadline, "no mismatch error in {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        error.contains(&key_path) && error.contains(&resp.cert.display().to_string()),
        "{error}"
    );

    // A client CA that is no certificate: named too (here at start, for the proxy).
    let bad_ca = live.path().join("clients-ca.pem");
    std::fs::write(&bad_ca, "not a certificate").unwrap();
    let config = format!(
        "{RULES}{}client_ca_file = \"{}\"\n",
        tls_table("tls", &http, None),
        bad_ca.display()
    );
    std::fs::write(&file, &config).unwrap();
    let error = tollgate_server::Gateway::start(crate::support::loopback_options(&file))
        .await
        .expect_err("a bad client CA is fatal at start")
        .to_string();
    assert!(
        error.contains("proxy and admin listener: client_ca_file")
            && error.contains(&bad_ca.display().to_string()),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_client_key_that_fails_to_load_is_named_in_config_and_readiness() {
    let pki = Pki::new("redis-client");
    let client = pki.client("gateway", "gateway");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, GARBAGE_KEY).unwrap();
    let config = format!(
        "{RULES}[store]\nbackend = \"redis\"\nurl = \"rediss://127.0.0.1:6380\"\n\
         on_backend_error = \"deny\"\n[store.tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pki.ca.display(),
        client.cert.display(),
        key.display()
    );
    let running = start_gateway(&config, |_| {}).await;
    let admin = running.gateway.admin_addr();
    let shown: serde_json::Value =
        serde_json::from_str(&get(admin, "/config", &[]).await.body).unwrap();
    let reason = shown["store"]["unusable"].as_str().unwrap_or_default();
    assert!(
        reason.contains("[store.tls] key_file ")
            && reason.contains(&key.display().to_string())
            && reason.contains("not a usable private key"),
        "{shown}"
    );
    let ready = get(admin, "/readyz", &[]).await;
    assert_eq!(ready.status, http::StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.body.contains("key_file"), "{}", ready.body);

    // A CA file that holds no certificate is named too.
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let config = format!(
        "{RULES}[store]\nbackend = \"redis\"\nurl = \"rediss://127.0.0.1:6380\"\n[store.tls]\nca_file = \"{}\"\n",
        ca.display()
    );
    let running = start_gateway(&config, |_| {}).await;
    let shown: serde_json::Value =
        serde_json::from_str(&get(running.gateway.admin_addr(), "/config", &[]).await.body)
            .unwrap();
    assert!(
        shown["store"]["unusable"]
            .as_str()
            .unwrap_or_default()
            .ends_with(&format!(
                "[store.tls] ca_file {}: no certificate in it",
                ca.display()
            )),
        "{shown}"
    );
}

/// A Redis whose certificate names only `redis.internal`, reached by address: the gateway
/// verifies it against `[store.tls] server_name` and decides there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reaches_a_redis_by_address_verified_against_server_name() {
    use crate::support::redis::{RedisOptions, RedisServer, RedisTlsOptions};
    let pki = Pki::new("redis-named");
    let pair = pki.server_for("redis", &["redis.internal"]);
    let Some(redis) = RedisServer::start_with(
        "the_gateway_reaches_a_redis_by_address",
        RedisOptions {
            tls: Some(RedisTlsOptions {
                cert: pair.cert.clone(),
                key: pair.key.clone(),
                ca: pki.ca.clone(),
                client_certs: false,
            }),
            ..RedisOptions::default()
        },
    ) else {
        return;
    };
    let config = |name: &str| {
        format!(
            "[limits]\n\"/\" = \"5/min\"\n[store]\nbackend = \"redis\"\n\
             url = \"rediss://127.0.0.1:{}\"\nkey_prefix = \"named:\"\non_backend_error = \"deny\"\n\
             [store.tls]\nca_file = \"{}\"\nserver_name = \"{name}\"\n",
            redis.tls_port().unwrap(),
            pki.ca.display()
        )
    };
    let running = start_gateway(&config("redis.internal"), |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    let ready = get(admin, "/readyz", &[]).await;
    assert_eq!(ready.status, http::StatusCode::OK, "{}", ready.body);
    let reply = get(proxy, "/hello", &[]).await;
    assert_eq!(reply.status, http::StatusCode::OK, "{}", reply.body);
    assert!(
        reply.header("ratelimit").is_some_and(|h| h.contains("r=4")),
        "{:?}",
        reply.headers
    );
    assert_eq!(
        redis.command("EXISTS named:{/127.0.0.1}c").as_deref(),
        Some(":1"),
        "decided in Redis: {:?}",
        redis.command("KEYS *")
    );

    // Another name: the handshake fails, decided as on_backend_error = "deny" says.
    let running = start_gateway(&config("cache.internal"), |_| {}).await;
    let ready = get(running.gateway.admin_addr(), "/readyz", &[]).await;
    assert_eq!(
        ready.status,
        http::StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        ready.body
    );
    let reply = get(running.gateway.listen_addr(), "/hello", &[]).await;
    assert_eq!(reply.status, http::StatusCode::TOO_MANY_REQUESTS);
}
