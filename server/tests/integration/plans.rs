//! Plans through every front end of the service: `TG.CHECK … PLAN` and membership over
//! RESP, a `tollgate.plan` descriptor entry and membership over gRPC, and `/explain`
//! naming the plan and where it came from.

use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::grpc::descriptor;
use crate::support::{Reply, get, start_gateway};

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

fn config(members: &std::path::Path) -> String {
    format!(
        "[plans]\nmembers = [\"{}\"]\ndefault = \"free\"\n\
         [limits.api]\nrate = \"100/min\"\n\
         [limits.api.plans]\nfree = \"2/min\"\npro = \"1000/min\"\n\
         [limits.\"edge/user\"]\nrate = \"100/min\"\nplans = {{ free = \"1/min\", pro = \"50/min\" }}\n",
        members.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_end_reaches_the_rules_limits_per_plan() {
    let dir = tempfile::tempdir().unwrap();
    let members = dir.path().join("plans.toml");
    std::fs::write(&members, "\"ada\" = \"pro\"\n").unwrap();
    let running = start_gateway(&config(&members), |options| {
        options.resp = Some("127.0.0.1:0".parse().unwrap());
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;

    // RESP: membership by the key's client, the default, and PLAN.
    let resp = running.gateway.resp_addr().unwrap();
    let mut redis = redis::Client::open(format!("redis://{resp}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut check = async |args: &[&str]| -> (i64, i64) {
        let reply: (i64, i64, i64, i64, String) = redis::cmd("TG.CHECK")
            .arg(args)
            .query_async(&mut redis)
            .await
            .unwrap();
        (reply.0, reply.1)
    };
    assert_eq!(check(&["api/ada"]).await, (1, 999), "ada is on pro");
    assert_eq!(
        check(&["api/bob"]).await,
        (1, 1),
        "bob is on the default, free"
    );
    assert_eq!(check(&["api/bob", "PLAN", "pro"]).await, (1, 998));
    assert_eq!(
        check(&["api/carol", "COST", "5", "PLAN", "gold"]).await,
        (1, 95),
        "a plan the rule has no limit for: the rule's own"
    );
    let refused: redis::RedisResult<redis::Value> = redis::cmd("TG.CHECK")
        .arg(&["api/bob", "PLAN", ""])
        .query_async(&mut redis)
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // gRPC: the same membership by the last value, and a tollgate.plan entry.
    let address = running.gateway.grpc_addr().unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let mut ask = async |entries: &[(&str, &str)]| {
        client
            .should_rate_limit(RateLimitRequest {
                domain: "edge".into(),
                descriptors: vec![descriptor(entries)],
                hits_addend: 0,
            })
            .await
            .unwrap()
            .into_inner()
    };
    let free = ask(&[("user", "dan")]).await;
    assert_eq!(free.overall_code(), Code::Ok);
    assert_eq!(free.statuses[0].limit_remaining, 0, "dan is on free: 1/min");
    assert_eq!(
        ask(&[("user", "dan")]).await.overall_code(),
        Code::OverLimit
    );
    let pro = ask(&[("user", "ada")]).await;
    assert_eq!(pro.statuses[0].limit_remaining, 49, "ada is on pro: 50/min");
    let told = ask(&[("user", "erin"), ("tollgate.plan", "pro")]).await;
    assert_eq!(told.overall_code(), Code::Ok);
    assert_eq!(told.statuses[0].limit_remaining, 49);

    // /explain names the plan, where it came from and the limit it gives.
    let admin = running.gateway.admin_addr();
    let why = json(&get(admin, "/explain?path=/api&client=ada", &[]).await);
    assert_eq!(
        (
            why["plan"].as_str(),
            why["plan_source"].as_str(),
            why["limit"].as_str()
        ),
        (Some("pro"), Some("members"), Some("1000/1m")),
        "{why}"
    );
    let why = json(&get(admin, "/explain?path=/api&client=zed", &[]).await);
    assert_eq!(
        (why["plan"].as_str(), why["plan_source"].as_str()),
        (Some("free"), Some("default"))
    );
    let why = json(&get(admin, "/explain?path=/api&client=zed&plan=gold", &[]).await);
    assert_eq!(why["plan_limit"], false, "{why}");
    assert_eq!(why["limit"], "100/1m");

    // TG.EXPLAIN too.
    let explained: Vec<redis::Value> = redis::cmd("TG.EXPLAIN")
        .arg("api/ada")
        .query_async(&mut redis)
        .await
        .unwrap();
    let text = format!("{explained:?}");
    assert!(
        text.contains("\"pro\"") && text.contains("\"1000/1m\""),
        "{text}"
    );
}
