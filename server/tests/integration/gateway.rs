//! The gateway in-process, in front of a real loopback upstream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::sync::Notify;
use tollgate_server::{Gateway, Settings};

use crate::support::{Reply, get, send, start_gateway};

/// An upstream that describes what it received, plus `/big` (4 MiB) and `/slow`.
async fn upstream(arrived: Arc<Notify>) -> SocketAddr {
    let app = Router::new().fallback(echo).with_state(arrived);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    address
}

async fn echo(State(arrived): State<Arc<Notify>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/big" {
        let body: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        return ([("x-upstream", "big")], body).into_response();
    }
    if path == "/slow" {
        arrived.notify_one();
        tokio::time::sleep(Duration::from_millis(600)).await;
        return "slow done".into_response();
    }
    // Scoped so nothing borrowing the request (whose body is not Sync) lives across the await.
    let mut description = {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or("?").to_owned())
        };
        serde_json::json!({
        "method": request.method().as_str(),
        "path": path,
        "query": request.uri().query(),
        "x_custom": header("x-custom"),
        "x_secret": header("x-secret"),
        "connection": header("connection"),
        "x_forwarded_for": header("x-forwarded-for"),
        "x_forwarded_host": header("x-forwarded-host"),
        "host": header("host"),
        })
    };
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap();
    description["body_len"] = body.len().into();
    description["body_checksum"] = checksum(&body).into();
    ([("x-upstream", "echo")], axum::Json(description)).into_response()
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(*b))
    })
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

const GENEROUS: &str = "[limits]\n\"/\" = \"1000/s\"\nlogin = \"3/min\"\n";

#[tokio::test]
async fn proxies_methods_paths_queries_headers_and_bodies() {
    let echo = upstream(Arc::new(Notify::new())).await;
    let running = start_gateway(GENEROUS, |o| {
        o.upstream = Some(format!("http://{echo}").parse().unwrap())
    })
    .await;
    let proxy = running.gateway.listen_addr();

    for method in [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ] {
        let reply = send(
            proxy,
            method.clone(),
            "/a/b?x=1&y=%20",
            &[("x-custom", "kept")],
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        let seen = json(&reply);
        assert_eq!(seen["method"], method.as_str());
        assert_eq!(seen["path"], "/a/b");
        assert_eq!(seen["query"], "x=1&y=%20");
        assert_eq!(seen["x_custom"], "kept");
        assert_eq!(
            reply.header("x-upstream"),
            Some("echo"),
            "upstream headers come back"
        );
        assert!(
            reply.header("ratelimit").is_some(),
            "and the limiter's are added"
        );
    }

    // Hop-by-hop headers stop at the gateway; the client's address is appended.
    let reply = send(
        proxy,
        Method::GET,
        "/",
        &[
            ("connection", "x-secret"),
            ("x-secret", "1"),
            ("x-forwarded-for", "198.51.100.1"),
            ("host", "example.test"),
        ],
        Bytes::new(),
    )
    .await;
    let seen = json(&reply);
    assert_eq!(seen["x_secret"], serde_json::Value::Null);
    assert_eq!(seen["x_forwarded_for"], "198.51.100.1, 127.0.0.1");
    assert_eq!(seen["x_forwarded_host"], "example.test");
    assert_eq!(seen["host"], echo.to_string());

    // A large body each way.
    let upload: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i % 253) as u8).collect();
    let expected = checksum(&upload);
    let reply = send(proxy, Method::POST, "/upload", &[], Bytes::from(upload)).await;
    let seen = json(&reply);
    assert_eq!(seen["body_len"], 5 * 1024 * 1024);
    assert_eq!(seen["body_checksum"], expected);
    let big = get(proxy, "/big", &[]).await;
    assert_eq!(big.bytes.len(), 4 * 1024 * 1024);
    assert!(
        big.bytes
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8),
        "body intact"
    );
}

#[tokio::test]
async fn limits_requests_with_429_and_headers() {
    let echo = upstream(Arc::new(Notify::new())).await;
    let running = start_gateway(GENEROUS, |o| {
        o.upstream = Some(format!("http://{echo}").parse().unwrap())
    })
    .await;
    let proxy = running.gateway.listen_addr();
    for _ in 0..3 {
        assert_eq!(get(proxy, "/login", &[]).await.status, StatusCode::OK);
    }
    let denied = get(proxy, "/login", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("20"));
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"login\";q=3;w=60")
    );
    assert_eq!(
        denied.body,
        r#"{"error":"rate_limited","retry_after":20,"limit":"login"}"#
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_and_a_slow_one_504() {
    // A port nobody listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let running = start_gateway(GENEROUS, |o| {
        o.upstream = Some(format!("http://{closed}").parse().unwrap())
    })
    .await;
    let reply = get(running.gateway.listen_addr(), "/", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.body, r#"{"error":"upstream_unavailable"}"#);

    let echo = upstream(Arc::new(Notify::new())).await;
    let config = format!(
        "{GENEROUS}[gateway]\nupstream = \"http://{echo}\"\nupstream_timeout = \"100ms\"\n"
    );
    let running = start_gateway(&config, |_| {}).await;
    let reply = get(running.gateway.listen_addr(), "/slow", &[]).await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(reply.body, r#"{"error":"upstream_timeout"}"#);
}

#[tokio::test]
async fn without_an_upstream_the_demo_answers() {
    let running = start_gateway(GENEROUS, |_| {}).await;
    assert!(running.gateway.is_demo());
    let reply = get(running.gateway.listen_addr(), "/anything?q=1", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let seen = json(&reply);
    assert_eq!(seen["message"], "hello from tollgate's demo upstream");
    assert_eq!(seen["path"], "/anything");
    assert_eq!(seen["x_forwarded_for"], "127.0.0.1");
}

#[tokio::test]
async fn flags_win_over_the_gateway_table() {
    let echo = upstream(Arc::new(Notify::new())).await;
    let other = upstream(Arc::new(Notify::new())).await;
    let config = format!("{GENEROUS}[gateway]\nupstream = \"http://{echo}\"\n");
    let from_config = start_gateway(&config, |_| {}).await;
    assert_eq!(
        from_config.gateway.upstream().to_string(),
        format!("http://{echo}/")
    );
    let flagged = start_gateway(&config, |o| {
        o.upstream = Some(format!("http://{other}").parse().unwrap())
    })
    .await;
    assert_eq!(
        flagged.gateway.upstream().to_string(),
        format!("http://{other}/")
    );
    let seen = json(&get(flagged.gateway.listen_addr(), "/", &[]).await);
    assert_eq!(seen["host"], other.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_requests_in_flight_and_refuses_new_ones() {
    let arrived = Arc::new(Notify::new());
    let slow = upstream(arrived.clone()).await;
    let running = start_gateway(GENEROUS, |o| {
        o.upstream = Some(format!("http://{slow}").parse().unwrap())
    })
    .await;
    let proxy = running.gateway.listen_addr();
    let in_flight = tokio::spawn(async move { get(proxy, "/slow", &[]).await });
    arrived.notified().await;

    running.gateway.shutdown().await;
    let reply = in_flight.await.unwrap();
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the request in flight finished"
    );
    assert_eq!(reply.body, "slow done");
    assert!(
        tokio::net::TcpStream::connect(proxy).await.is_err(),
        "no new connections"
    );
}

#[tokio::test]
async fn the_admin_endpoints_answer_in_json() {
    let running = start_gateway(GENEROUS, |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    get(proxy, "/login", &[]).await;
    get(proxy, "/login", &[]).await;
    get(proxy, "/", &[]).await;

    assert_eq!(get(admin, "/healthz", &[]).await.body, "ok\n");

    let config = json(&get(admin, "/config", &[]).await);
    assert_eq!(config["generation"], 1);
    assert_eq!(config["last_error"], serde_json::Value::Null);
    let rules: Vec<_> = config["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rules, ["/", "login"]);
    assert_eq!(config["rules"][1]["limit"]["rates"][0], "3/1m");
    let source = &config["sources"][0];
    assert_eq!(source["kind"], "file");
    assert_eq!(source["reads"], 1, "read once at start, not since");
    assert!(source["validator"]["modified"].as_f64().unwrap() > 0.0);
    assert_eq!(source["last_error"], serde_json::Value::Null);

    // The seed question: every bucket under login/ below half its budget.
    let rows = json(&get(admin, "/buckets?prefix=login/&max_fraction=0.5", &[]).await);
    let rows = rows["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["key"], "login/127.0.0.1");
    assert_eq!(
        (rows[0]["remaining"].as_u64(), rows[0]["capacity"].as_u64()),
        (Some(1), Some(3))
    );
    let all = json(&get(admin, "/buckets?sort=key&limit=10", &[]).await);
    let keys: Vec<_> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["127.0.0.1", "login/127.0.0.1"]);
    let bad = get(admin, "/buckets?max_fraction=2", &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        get(admin, "/buckets?sort=colour", &[]).await.status,
        StatusCode::BAD_REQUEST
    );

    let why = json(&get(admin, "/explain?path=/login/./&client=127.0.0.1", &[]).await);
    assert_eq!(why["route"], "login");
    assert_eq!(why["key"], "login/127.0.0.1");
    assert_eq!(why["rule"], "login");
    assert_eq!(why["bucket"], "login/127.0.0.1");
    assert_eq!(why["state"]["remaining"], 1);
    assert_eq!(
        get(admin, "/explain?path=/", &[]).await.status,
        StatusCode::BAD_REQUEST
    );

    // Forgive: the client starts again with a full budget.
    get(proxy, "/login", &[]).await;
    assert_eq!(
        get(proxy, "/login", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let forgiven = send(
        admin,
        Method::DELETE,
        "/buckets/login/127.0.0.1",
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(forgiven.status, StatusCode::NO_CONTENT);
    assert_eq!(get(proxy, "/login", &[]).await.status, StatusCode::OK);
    let again = send(
        admin,
        Method::DELETE,
        "/buckets/nope/127.0.0.1",
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);

    let metrics = get(admin, "/metrics", &[]).await;
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    // The recorder is process-wide: other gateways in this test binary count too.
    let limited = metrics
        .body
        .lines()
        .find_map(|line| {
            line.strip_prefix("tollgate_requests_total{rule=\"login\",outcome=\"limited\"} ")
        })
        .and_then(|value| value.parse::<u64>().ok());
    assert!(limited.is_some_and(|n| n >= 1), "{}", metrics.body);
    assert!(
        metrics.body.contains("tollgate_config_generation"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("tollgate_buckets_active"),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("tollgate_config_reads_total{kind=\"file\"}"),
        "{}",
        metrics.body
    );

    let page = get(admin, "/", &[]).await;
    assert!(page.body.contains("<title>tollgate · admin</title>"));
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "no CDN"
    );
}

#[tokio::test]
async fn an_admin_token_guards_everything_but_health_and_the_page() {
    let config = format!("{GENEROUS}[gateway]\nadmin_token = \"s3cret\"\n");
    let running = start_gateway(&config, |_| {}).await;
    let admin = running.gateway.admin_addr();
    assert_eq!(get(admin, "/healthz", &[]).await.status, StatusCode::OK);
    // The page is public, so with a token it comes without data (its script asks for the
    // token); a client's bucket is not in it.
    get(running.gateway.listen_addr(), "/login", &[]).await;
    let page = get(admin, "/", &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"buckets\""));
    assert!(!page.body.contains("data-key="), "{}", page.body);
    assert!(!page.body.contains("data-rule="), "{}", page.body);
    // The descriptions of the config and of this API are public, like the page.
    let schema = get(admin, "/schema.json", &[]).await;
    assert_eq!(schema.status, StatusCode::OK);
    assert_eq!(json(&schema)["title"], "tollgate configuration");
    let openapi = get(admin, "/openapi.json", &[]).await;
    assert_eq!(openapi.status, StatusCode::OK);
    assert_eq!(openapi.header("content-type"), Some("application/json"));
    assert_eq!(json(&openapi)["openapi"], "3.1.0");
    assert!(json(&openapi)["paths"]["/traffic"]["get"].is_object());
    for path in [
        "/config",
        "/buckets",
        "/metrics",
        "/explain?client=x",
        "/traffic",
    ] {
        let refused = get(admin, path, &[]).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
        let wrong = get(admin, path, &[("authorization", "Bearer s3creT")]).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{path}");
        let right = get(admin, path, &[("authorization", "Bearer s3cret")]).await;
        assert_eq!(right.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn an_invalid_config_at_start_up_is_an_error_naming_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, "[limits]\n\"/\" = \"ten/s\"\n").unwrap();
    let error = Gateway::start(Settings::new([&file])).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}:2:7: rate count \"ten\" is not a whole number",
            file.display()
        )
    );
}

#[tokio::test]
async fn a_restarted_gateway_remembers_who_spent_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("buckets.snapshot");
    let config = format!("[store]\nsnapshot = \"{}\"\n{GENEROUS}", snapshot.display());
    let first = start_gateway(&config, |_| {}).await;
    let proxy = first.gateway.listen_addr();
    for _ in 0..3 {
        assert_eq!(get(proxy, "/login", &[]).await.status, StatusCode::OK);
    }
    first.gateway.shutdown().await;
    assert!(snapshot.exists(), "graceful shutdown wrote the snapshot");

    let second = start_gateway(&config, |_| {}).await;
    let reply = get(second.gateway.listen_addr(), "/login", &[]).await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the restart handed out a fresh budget"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_share_one_budget() {
    let Some(server) =
        crate::support::redis::RedisServer::start("two_gateways_on_one_redis_share_one_budget")
    else {
        return;
    };
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{GENEROUS}",
        server.url()
    );
    let (first, second) = (
        start_gateway(&config, |_| {}).await,
        start_gateway(&config, |_| {}).await,
    );
    let mut statuses = Vec::new();
    for gateway in [&first, &second, &first, &second, &first] {
        statuses.push(
            get(gateway.gateway.listen_addr(), "/login", &[])
                .await
                .status,
        );
    }
    // login is 3/min for the one client (127.0.0.1), whichever gateway it reaches.
    let ok = statuses.iter().filter(|s| s.is_success()).count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok, limited), (3, 2), "{statuses:?}");

    let config = json(&get(first.gateway.admin_addr(), "/config", &[]).await);
    assert_eq!(config["store"]["backend"], "redis");
    assert_eq!(config["store"]["breaker_open"], false);
    let rows = json(&get(second.gateway.admin_addr(), "/buckets?prefix=login/", &[]).await);
    assert_eq!(rows["rows"][0]["key"], "login/127.0.0.1");
    assert_eq!(rows["rows"][0]["remaining"], 0);
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let running = start_gateway(GENEROUS, |o| {
        o.header_read_timeout = Some(Duration::from_millis(300));
    })
    .await;
    let proxy = running.gateway.listen_addr();
    let started = std::time::Instant::now();
    let mut slow = tokio::net::TcpStream::connect(proxy).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One header byte every 50 ms, for at most 5 s: the gateway must hang up first.
    let mut cut_off = false;
    for _ in 0..100 {
        if slow.write_all(b"X").await.is_err() {
            cut_off = true;
            break;
        }
        let mut buffer = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(50), slow.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => {
                cut_off = true;
                break;
            }
            // hyper may answer 408 before closing.
            Ok(Ok(_)) => {}
            Err(_) => {}
        }
    }
    let held = started.elapsed();
    assert!(cut_off, "a slowloris connection was held for {held:?}");
    eprintln!("slowloris connection closed after {held:?} (header_read_timeout 300 ms)");
    assert!(held < Duration::from_secs(5));
    assert_eq!(get(proxy, "/", &[]).await.status, StatusCode::OK);
}

/// `/traffic` (issue 24): per-rule counts over time, rules with the most refusals first,
/// and who was refused. Rule names are this test's own: the traffic registry is
/// process-wide, as the metrics are.
#[tokio::test]
async fn the_traffic_endpoint_counts_each_rule_over_time_and_names_who_was_refused() {
    let config = "[limits]\n\"traffic-refusing\" = \"2/min\"\n\"traffic-passing\" = \"100/min\"\n";
    let running = start_gateway(config, |_| {}).await;
    let proxy = running.gateway.listen_addr();
    let admin = running.gateway.admin_addr();
    // Until someone reads the history, admissions are sampled; the first read says so and
    // turns counting one by one on.
    let first = json(&get(admin, "/traffic", &[]).await);
    assert_eq!(first["sample"], 64);
    let exact_since = first["exact_since"].as_u64().unwrap();
    for _ in 0..5 {
        get(proxy, "/traffic-refusing", &[]).await;
    }
    for _ in 0..4 {
        assert_eq!(
            get(proxy, "/traffic-passing", &[]).await.status,
            StatusCode::OK
        );
    }
    let reply = get(admin, "/traffic?rules=1000&top=5", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let traffic = json(&reply);
    assert_eq!(
        traffic["exact_since"], exact_since,
        "still the same stretch"
    );
    assert_eq!(traffic["resolution_secs"], 5.0);
    assert_eq!(traffic["span_secs"], 900);
    assert_eq!(traffic["series"].as_array().unwrap().len(), 180);
    let rules = traffic["rules"].as_array().unwrap();
    let at = |name: &str| rules.iter().position(|r| r["rule"] == name).unwrap();
    let (refusing, passing) = (
        &rules[at("traffic-refusing")],
        &rules[at("traffic-passing")],
    );
    assert!(
        at("traffic-refusing") < at("traffic-passing"),
        "most refusals first"
    );
    assert_eq!(refusing["total"]["admitted"], 2);
    assert_eq!(refusing["total"]["refused"], 3);
    assert_eq!(passing["total"]["admitted"], 4);
    assert_eq!(passing["total"]["refused"], 0);
    assert_eq!(refusing["top_refused"][0]["client"], "127.0.0.1");
    assert_eq!(refusing["top_refused"][0]["count"], 3);
    assert!(passing["top_refused"].as_array().unwrap().is_empty());
    // The series adds up to the totals, in slots of the last 15 minutes.
    let refused_in_series: u64 = refusing["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|slot| slot["counts"]["refused"].as_u64().unwrap())
        .sum();
    assert_eq!(refused_in_series, 3);
    let bad = get(admin, "/traffic?top=many", &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// The reload history on `/config` (issue 24): a saved edit appears with what it changed.
#[tokio::test]
async fn a_config_edit_appears_in_the_reload_history_with_old_and_new_numbers() {
    let running = start_gateway("[limits]\nhistory = \"5/min\"\n", |_| {}).await;
    let admin = running.gateway.admin_addr();
    let before = json(&get(admin, "/config", &[]).await);
    assert_eq!(before["reloads"], serde_json::json!([]));
    let file = running.config_file();
    let temporary = file.with_extension("toml.partial");
    std::fs::write(&temporary, "[limits]\nhistory = \"50/min\"\n").unwrap();
    std::fs::rename(&temporary, &file).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let config = loop {
        let config = json(&get(admin, "/config", &[]).await);
        // The rules are swapped a moment before the history records the reload.
        if config["generation"] == 2 && config["reloads"][0].is_object() {
            break config;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the edit was not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let reload = &config["reloads"][0];
    assert_eq!(reload["trigger"], "file");
    assert_eq!(reload["sources"][0], file.display().to_string());
    assert_eq!(reload["generation"], 2);
    assert_eq!(reload["applied"], true);
    assert_eq!(reload["changes"][0]["rule"], "history");
    assert_eq!(
        reload["changes"][0]["before"],
        "5/1m burst 5 · gcra · cost 1 · per client"
    );
    assert_eq!(
        reload["changes"][0]["after"],
        "50/1m burst 50 · gcra · cost 1 · per client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_every_key_part_of_the_request_described() {
    let running = crate::support::start_gateway(
        "[key]\nparts = [\"host\", \"method\", \"header:x-tenant\", \"route\", \"query:format\", \"client\"]\n\
         [limits]\n\"/\" = \"100/min\"\n\"shop.example/POST/acme/orders\" = \"5/min\"\n",
        |options| options.resp = Some("127.0.0.1:0".parse().unwrap()),
    )
    .await;
    let admin = running.gateway.admin_addr();
    let why = json(
        &get(
            admin,
            "/explain?path=%2Forders%2F42%3Fformat%3Dcsv&client=127.0.0.1&method=POST\
             &host=Shop.Example%3A8443&header.x-tenant=acme",
            &[],
        )
        .await,
    );
    assert_eq!(why["rule"], "shop.example/POST/acme/orders", "{why}");
    assert_eq!(why["route"], "orders/42");
    assert_eq!(why["key"], "shop.example/POST/acme/orders/42/csv/127.0.0.1");
    let parts: Vec<(String, String)> = why["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["part"].as_str().unwrap().to_owned(),
                p["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("host", "shop.example"),
        ("method", "POST"),
        ("header:x-tenant", "acme"),
        ("query:format", "csv"),
    ]
    .map(|(p, v)| (p.to_owned(), v.to_owned()));
    assert_eq!(parts, expected);
    // What the request did not carry is `-`; a header that cannot be is a 400.
    let bare = json(&get(admin, "/explain?path=/orders&client=127.0.0.1", &[]).await);
    assert_eq!(bare["key"], "-/GET/-/orders/-/127.0.0.1", "{bare}");
    assert_eq!(bare["rule"], "/");
    assert_eq!(
        get(admin, "/explain?client=x&header.bad%20name=1", &[])
            .await
            .status,
        StatusCode::BAD_REQUEST
    );

    // TG.EXPLAIN takes the key as written, and names its parts the same way.
    let resp = running.gateway.resp_addr().unwrap();
    let mut redis = redis::Client::open(format!("redis://{resp}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let explained: Vec<redis::Value> = redis::cmd("TG.EXPLAIN")
        .arg("shop.example/POST/acme/orders/42/csv/127.0.0.1")
        .query_async(&mut redis)
        .await
        .unwrap();
    let text = format!("{explained:?}");
    assert!(text.contains("shop.example/POST/acme/orders"), "{text}");
    for value in [
        "host",
        "shop.example",
        "header:x-tenant",
        "acme",
        "query:format",
        "csv",
    ] {
        assert!(text.contains(&format!("\"{value}\"")), "{value} in {text}");
    }
}
