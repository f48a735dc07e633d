//! HTTP/2 from clients: prior-knowledge h2c on plain listeners and ALPN `h2` on TLS ones,
//! limited and answered as HTTP/1.1 is (curl, as clients run it), and a rapid-reset flood
//! (CVE-2023-44487) that neither takes the service down nor leaks a concurrency slot.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{ServiceProcess, get};

/// curl's `http_version http_code ratelimit` for `url`, or `None` (said) without curl.
fn curl(url: &str, args: &[&str]) -> Option<String> {
    let Ok(output) = Command::new("curl")
        .args(["-s", "-S", "-o", "/dev/null", "--max-time", "10"])
        .args(["-w", "%{http_version} %{http_code} %header{ratelimit}"])
        .args(args)
        .arg(url)
        .output()
    else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "curl is required under CI"
        );
        eprintln!("SKIPPED: curl is not installed (apt-get install curl)");
        return None;
    };
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn h2c_and_h2_over_tls_are_limited_and_answered_as_http1_is() {
    let dir = tempfile::tempdir().unwrap();
    let pki = tollgate_testkit::certs::Pki::new("h2");
    let pair = pki.server("localhost");
    let main = dir.path().join("gateway.toml");
    std::fs::write(
        &main,
        format!(
            "[limits]\napi = \"3/min\"\n[gateway.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            pair.cert.display(),
            pair.key.display()
        ),
    )
    .unwrap();
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, "[limits]\napi = \"3/min\"\n").unwrap();

    // Prior knowledge on a plain listener, beside HTTP/1.1 on the same port and bucket.
    let service = ServiceProcess::start(&["--config", &plain.display().to_string()], &[]);
    let url = format!("http://{}/api/x", service.proxy);
    let Some(first) = curl(&url, &["--http2-prior-knowledge"]) else {
        return;
    };
    let seen = [
        first,
        curl(&url, &["--http1.1"]).unwrap(),
        curl(&url, &["--http2-prior-knowledge"]).unwrap(),
        curl(&url, &["--http2-prior-knowledge"]).unwrap(),
    ];
    // Without the `t=` of each (a second may pass between requests).
    let seen = seen.map(|line| line.split(";t=").next().unwrap_or_default().to_owned());
    assert_eq!(
        seen,
        [
            "2 200 \"api\";r=2",
            "1.1 200 \"api\";r=1",
            "2 200 \"api\";r=0",
            "2 429 \"api\";r=0",
        ]
        .map(str::to_owned),
        "{}",
        service.log()
    );
    let admin = format!("http://{}/healthz", service.admin);
    assert!(
        curl(&admin, &["--http2-prior-knowledge"])
            .unwrap()
            .starts_with("2 200")
    );
    drop(service);

    // ALPN on a TLS listener: curl asks for h2 and gets it.
    let service = ServiceProcess::start(&["--config", &main.display().to_string()], &[]);
    let url = format!("https://localhost:{}/api/x", service.proxy.port());
    let ca = pki.ca.display().to_string();
    let answered = curl(&url, &["--http2", "--cacert", &ca]).unwrap();
    assert!(
        answered.starts_with("2 200 \"api\";r=2"),
        "{answered}\n{}",
        service.log()
    );
    let answered = curl(&url, &["--http1.1", "--cacert", &ca]).unwrap();
    assert!(answered.starts_with("1.1 200 \"api\";r=1"), "{answered}");
}

/// Opens `streams` requests on one HTTP/2 connection, resetting each at once; how many it
/// opened before the server closed the connection.
async fn rapid_reset(proxy: SocketAddr, streams: usize) -> usize {
    let tcp = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = Some(client);
    let mut opened = 0;
    for _ in 0..streams {
        let Some(Ok(mut ready)) = (match client.take() {
            Some(client) => Some(client.ready().await),
            None => None,
        }) else {
            break;
        };
        let request = http::Request::get(format!("http://{proxy}/api/x"))
            .body(())
            .unwrap();
        let Ok((response, mut stream)) = ready.send_request(request, false) else {
            break;
        };
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
        opened += 1;
        client = Some(ready);
    }
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(5), driver).await;
    opened
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rapid_reset_flood_neither_stops_the_service_nor_leaks_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("gateway.toml");
    std::fs::write(
        &main,
        "[limits]\napi = { rate = \"100000/s\", concurrency = 4 }\n",
    )
    .unwrap();
    let service = ServiceProcess::start(&["--config", &main.display().to_string()], &[]);
    let started = Instant::now();
    let mut opened = 0;
    for _ in 0..5 {
        opened += rapid_reset(service.proxy, 10_000).await;
    }
    eprintln!(
        "{opened} streams opened and reset in {:?}",
        started.elapsed()
    );
    assert!(
        opened < 50_000,
        "the server never closed a flooding connection ({opened} streams)"
    );
    // Every slot came back: the cap of 4 admits request after request.
    for _ in 0..20 {
        let reply = get(service.proxy, "/api/x", &[]).await;
        assert_eq!(reply.status, 200, "{}\n{}", reply.body, service.log());
    }
    let metrics = get(service.admin, "/metrics", &[]).await.body;
    let in_flight = metrics
        .lines()
        .find(|line| line.starts_with("tollgate_in_flight{rule=\"api\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(in_flight.ends_with(" 0"), "{in_flight}");
    // Each flooding connection the server closed is counted, by listener.
    let closed: u64 = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix(
                "tollgate_client_connection_errors_total{listener=\"proxy\",kind=\"excessive_resets\"} ",
            )
        })
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    assert!((1..=5).contains(&closed), "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_refused_by_the_proxy_reads_resource_exhausted() {
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("gateway.toml");
    std::fs::write(&main, "[limits]\n\"/\" = \"1/hour\"\n").unwrap();
    let service = ServiceProcess::start(&["--config", &main.display().to_string()], &[]);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", service.proxy))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let call = || RateLimitRequest {
        domain: "edge".into(),
        ..RateLimitRequest::default()
    };
    // The first call is admitted and reaches the demo upstream, which speaks no gRPC.
    let _ = client.should_rate_limit(call()).await;
    let refused = client.should_rate_limit(call()).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().starts_with("rate limited: retry after"),
        "{refused:?}"
    );
    let retry: u64 = refused
        .metadata()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{refused:?}"));
    assert!((3000..=3600).contains(&retry), "{retry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_upstream_is_proxied_over_http2_with_its_trailers() {
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

    // The upstream: a real gRPC server (another gateway's rate limit service).
    let upstream = crate::support::start_gateway("[limits]\n\"edge\" = \"100/min\"\n", |o| {
        o.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let grpc = upstream.gateway.grpc_addr().unwrap();
    let proxy = crate::support::start_gateway("[limits]\n\"/\" = \"2/min\"\n", |o| {
        o.upstream = Some(format!("http://{grpc}").parse().unwrap());
        o.upstream_protocol = Some(tollgate_server::UpstreamProtocol::Http2);
    })
    .await;
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", proxy.gateway.listen_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let call = || RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![crate::grpc::descriptor(&[("k", "v")])],
        ..RateLimitRequest::default()
    };
    for _ in 0..2 {
        // Answered by the upstream: its message and its grpc-status trailer came through.
        let answer = client.should_rate_limit(call()).await.unwrap().into_inner();
        assert_eq!(answer.overall_code(), Code::Ok);
    }
    // The third is refused by the proxy's own limit, as gRPC.
    let refused = client.should_rate_limit(call()).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
}
