//! Limits that compose through the service: the proxy, the admin listener (buckets,
//! explain, metrics), the Redis protocol and Envoy's rate limit service, each meeting a
//! rule's `also` limits beside it, all admitting or none charged.

use http::StatusCode;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::support::{get, start_gateway};

const RULES: &str = "[client]\nsources = [\"header:x-key\", \"ip\"]\n\
    [limits.\"/\"]\nrate = \"100/min\"\n\
    [limits.\"/\".also]\neveryone = { rate = \"4/min\", per = \"global\" }\n\
    org = { rate = \"3/min\", per = \"header:x-org\" }\n\
    [limits.\"edge\"]\nrate = \"100/min\"\nalso.all = { rate = \"3/min\", per = \"global\" }\n";

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_admin_and_metrics_show_every_limit_a_request_meets() {
    let running = start_gateway(RULES, |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    let call = |key: &'static str, org: &'static str| async move {
        get(proxy, "/hello", &[("x-key", key), ("x-org", org)]).await
    };
    for key in ["a", "b", "c"] {
        assert_eq!(call(key, "acme").await.status, StatusCode::OK);
    }
    // Acme's three are spent; another key of acme's is refused by the org's limit.
    let refused = call("d", "acme").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json(&refused.body)["limit"], "/#org");
    // Another org takes everyone's fourth; then everyone refuses.
    assert_eq!(call("e", "initech").await.status, StatusCode::OK);
    let everyone = call("f", "globex").await;
    assert_eq!(json(&everyone.body)["limit"], "/#everyone");

    // The buckets under their limits' names.
    let buckets = json(&get(admin, "/buckets?limit=50", &[]).await.body);
    let keys: Vec<&str> = buckets["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{buckets}"))
        .iter()
        .map(|row| row["key"].as_str().unwrap())
        .collect();
    for expected in ["/#everyone", "/#org/acme", "/#org/initech"] {
        assert!(keys.contains(&expected), "{expected} in {keys:?}");
    }
    // Explain names the limits a key meets.
    let why = json(&get(admin, "/explain?path=/x&client=z", &[]).await.body);
    let met: Vec<&str> = why["also"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["limit"].as_str().unwrap())
        .collect();
    assert_eq!(met, ["/#everyone", "/#org"], "{why}");
    // Each limit counts what it refused (other tests of this process count too: at least).
    let metrics = get(admin, "/metrics", &[]).await.body;
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} not exported"))
    };
    assert!(value("tollgate_requests_total{rule=\"/#org\",outcome=\"limited\"}") >= 1.0);
    assert!(value("tollgate_requests_total{rule=\"/#everyone\",outcome=\"limited\"}") >= 1.0);
    assert!(value("tollgate_requests_total{rule=\"/#everyone\",outcome=\"allowed\"}") >= 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tg_check_and_envoy_descriptors_meet_the_also_limits_atomically() {
    let running = start_gateway(RULES, |options| {
        options.resp = Some("127.0.0.1:0".parse().unwrap());
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    // Over RESP, a limit kept per part counts per client.
    let resp = running.gateway.resp_addr().unwrap();
    let mut connection = redis::Client::open(format!("redis://{resp}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let check = |key: &'static str| redis::cmd("TG.CHECK").arg(key).clone();
    for _ in 0..3 {
        let answer: Vec<redis::Value> = check("x/k1").query_async(&mut connection).await.unwrap();
        assert_eq!(answer[0], redis::Value::Int(1));
    }
    let answer: Vec<redis::Value> = check("x/k1").query_async(&mut connection).await.unwrap();
    assert_eq!(
        answer[0],
        redis::Value::Int(0),
        "k1's org bucket (by client) is spent"
    );
    assert_eq!(
        answer[4],
        redis::Value::BulkString(b"/#org".to_vec()),
        "{answer:?}"
    );
    let explained: redis::Value = redis::cmd("TG.EXPLAIN")
        .arg("x/k1")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        format!("{explained:?}").contains("/#everyone"),
        "{explained:?}"
    );

    // Envoy: two descriptors of one request meet the domain's global limit once (on a
    // gateway of its own: the one above has spent most of everyone's budget).
    let running = start_gateway(RULES, |options| {
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let grpc = running.gateway.grpc_addr().unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let descriptor = |key: &str, value: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..Default::default()
    };
    let ask = |descriptors: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    };
    let mut codes = Vec::new();
    for n in 0..4 {
        let answer = client
            .should_rate_limit(ask(vec![
                descriptor("user", &format!("u{n}")),
                descriptor("ip", "203.0.113.7"),
            ]))
            .await
            .unwrap()
            .into_inner();
        codes.push(answer.overall_code());
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
        "three requests a minute in all, each counted once whatever its descriptors"
    );
}
