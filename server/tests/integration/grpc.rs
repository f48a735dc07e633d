//! Envoy's rate limit service through a real tonic client, against the gateway's
//! gRPC listener on a free loopback port.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tollgate_server::grpc::SERVICE_NAME;
use tollgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, rate_limit::Unit,
};
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use tonic::transport::Channel;

use crate::support::{RunningGateway, get, start_gateway};

type Client = RateLimitServiceClient<Channel>;

/// A gateway serving Envoy's rate limit service too, and a client connected to it.
async fn gateway(config: &str) -> (RunningGateway, Client) {
    let running = start_gateway(config, |options| {
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let client = connect(running.gateway.grpc_addr().unwrap()).await;
    (running, client)
}

async fn connect(address: SocketAddr) -> Client {
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RateLimitServiceClient::new(channel)
}

/// A descriptor of `entries`.
pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// The overall code for one descriptor of `entries` in `domain`.
async fn code(client: &mut Client, domain: &str, entries: &[(&str, &str)]) -> Code {
    let response = ask(client, request(domain, vec![descriptor(entries)])).await;
    response.overall_code()
}

const RULES: &str = "\
[limits]
\"edge/remote_address\" = \"2/min\"
\"edge/remote_address/10.0.0.1\" = \"1/min\"
\"edge/tenant\" = \"5/min\"
\"edge/plan\" = \"1/min\"
\"edge/unmetered\" = { unlimited = true }
\"edge/beta\" = { rate = \"1/min\", shadow = true }
\"edge/shared\" = \"50/d\"
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_less_rule_limits_each_value_apart() {
    let (_running, mut client) = gateway(RULES).await;
    let address = |ip| [("remote_address", ip)];
    for _ in 0..2 {
        assert_eq!(
            code(&mut client, "edge", &address("203.0.113.7")).await,
            Code::Ok
        );
    }
    let refused = ask(
        &mut client,
        request("edge", vec![descriptor(&address("203.0.113.7"))]),
    )
    .await;
    assert_eq!(refused.overall_code(), Code::OverLimit);
    let status = &refused.statuses[0];
    assert_eq!(status.code(), Code::OverLimit);
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit, limit.unit()),
        ("edge/remote_address", 2, Unit::Minute)
    );
    assert_eq!(status.limit_remaining, 0);
    let reset = status.duration_until_reset.unwrap();
    assert!((1..=60).contains(&reset.seconds), "{reset:?}");
    assert_eq!(
        code(&mut client, "edge", &address("198.51.100.2")).await,
        Code::Ok,
        "another address has its own bucket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_specific_rule_wins_over_the_value_less_one() {
    let (_running, mut client) = gateway(RULES).await;
    let special = [("remote_address", "10.0.0.1")];
    assert_eq!(code(&mut client, "edge", &special).await, Code::Ok);
    let refused = ask(&mut client, request("edge", vec![descriptor(&special)])).await;
    assert_eq!(refused.overall_code(), Code::OverLimit, "1/min, not 2/min");
    assert_eq!(
        refused.statuses[0].current_limit.as_ref().unwrap().name,
        "edge/remote_address/10.0.0.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_descriptors_are_decided_together() {
    let (running, mut client) = gateway(RULES).await;
    let plan = descriptor(&[("plan", "free")]);
    let tenant = descriptor(&[("tenant", "acme")]);
    assert_eq!(
        code(&mut client, "edge", &[("plan", "free")]).await,
        Code::Ok
    );
    let both = ask(&mut client, request("edge", vec![tenant, plan])).await;
    assert_eq!(both.overall_code(), Code::OverLimit);
    let codes: Vec<Code> = both.statuses.iter().map(DescriptorStatus::code).collect();
    assert_eq!(codes, [Code::Ok, Code::OverLimit]);
    let limits = running.gateway.limits();
    assert_eq!(
        limits.peek("edge/tenant/acme").await.unwrap().remaining(),
        5,
        "the tenant was not charged for a refused request"
    );
    let alone = ask(
        &mut client,
        request("edge", vec![descriptor(&[("tenant", "acme")])]),
    )
    .await;
    assert_eq!(alone.statuses[0].limit_remaining, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_is_the_cost() {
    let (_running, mut client) = gateway(RULES).await;
    let mut costly = request("edge", vec![descriptor(&[("tenant", "acme")])]);
    costly.hits_addend = 3;
    assert_eq!(
        ask(&mut client, costly).await.statuses[0].limit_remaining,
        2
    );
    let mut overridden = descriptor(&[("tenant", "acme")]);
    overridden.hits_addend = Some(1);
    let mut request_level = request("edge", vec![overridden]);
    request_level.hits_addend = 10;
    assert_eq!(
        ask(&mut client, request_level).await.statuses[0].limit_remaining,
        1,
        "the descriptor's own hits_addend overrides the request's"
    );
    let mut too_many = request("edge", vec![descriptor(&[("tenant", "acme")])]);
    too_many.hits_addend = 2;
    assert_eq!(
        ask(&mut client, too_many).await.overall_code(),
        Code::OverLimit
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_rule_or_an_unlimited_one_is_ok_without_a_limit() {
    let config = "[limits]\n\"edge/unmetered\" = { unlimited = true }\n\"edge/remote_address\" = \"2/min\"\n";
    let (_running, mut client) = gateway(config).await;
    for domain in ["edge", "elsewhere"] {
        for entries in [[("unmetered", "x")], [("nobody", "y")]] {
            for _ in 0..3 {
                let response = ask(&mut client, request(domain, vec![descriptor(&entries)])).await;
                assert_eq!(response.overall_code(), Code::Ok);
                assert_eq!(response.statuses[0].current_limit, None);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_rule_answers_ok_and_is_counted_as_shadow() {
    let (running, mut client) = gateway(RULES).await;
    for _ in 0..3 {
        let response = ask(
            &mut client,
            request("edge", vec![descriptor(&[("beta", "tester")])]),
        )
        .await;
        assert_eq!(response.overall_code(), Code::Ok);
    }
    let metrics = get(running.gateway.admin_addr(), "/metrics", &[])
        .await
        .body;
    let shadow = metrics
        .lines()
        .find(|line| {
            line.starts_with("tollgate_requests_total")
                && line.contains("rule=\"edge/beta\"")
                && line.contains("outcome=\"shadow_limited\"")
        })
        .unwrap_or_else(|| panic!("no shadow count in\n{metrics}"));
    assert!(shadow.ends_with(" 2"), "{shadow}");
    let by_domain = metrics
        .lines()
        .find(|line| {
            line.starts_with("tollgate_grpc_requests_total")
                && line.contains("domain=\"edge\"")
                && line.contains("code=\"ok\"")
        })
        .unwrap_or_else(|| panic!("no per-domain count in\n{metrics}"));
    assert!(!by_domain.ends_with(" 0"), "{by_domain}");

    // Domains nobody wrote a rule under are one label, however many callers invent.
    for invented in ["x1", "x2", "x3"] {
        code(&mut client, invented, &[("k", "v")]).await;
    }
    let metrics = get(running.gateway.admin_addr(), "/metrics", &[])
        .await
        .body;
    assert!(!metrics.contains("domain=\"x1\""), "{metrics}");
    // At least the three invented here: the recorder is the process's, and another test
    // running beside this one may ask about a domain without rules too.
    let other: u64 = metrics
        .lines()
        .filter(|line| {
            line.starts_with("tollgate_grpc_requests_total")
                && line.contains("domain=\"other\"")
                && line.contains("code=\"ok\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(other >= 3, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_in_a_value_cannot_reach_another_rule() {
    let config = "[limits]\n\"edge/plan\" = \"1/min\"\n\"edge/unmetered\" = { unlimited = true }\n";
    let (_running, mut client) = gateway(config).await;
    let climbing = [("plan", "../unmetered/x")];
    assert_eq!(code(&mut client, "edge", &climbing).await, Code::Ok);
    let refused = ask(&mut client, request("edge", vec![descriptor(&climbing)])).await;
    assert_eq!(
        refused.overall_code(),
        Code::OverLimit,
        "still under edge/plan"
    );
    assert_eq!(
        refused.statuses[0].current_limit.as_ref().unwrap().name,
        "edge/plan"
    );
    // A domain is one segment too: "edge/plan" is not the domain edge's plan.
    let slashed = ask(
        &mut client,
        request("edge/plan", vec![descriptor(&[("x", "y")])]),
    )
    .await;
    assert_eq!(slashed.overall_code(), Code::Ok);
    assert_eq!(slashed.statuses[0].current_limit, None, "no rule for it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_on_one_key_admit_exactly_the_budget() {
    let (running, _client) = gateway(RULES).await;
    let address = running.gateway.grpc_addr().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut client = connect(address).await;
            let mut admitted = 0;
            for _ in 0..20 {
                let response = ask(
                    &mut client,
                    request("edge", vec![descriptor(&[("shared", "one")])]),
                )
                .await;
                if response.overall_code() == Code::Ok {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, 50, "160 requests on a budget of 50");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_config_reaches_the_service_within_a_second() {
    let (running, mut client) = gateway(RULES).await;
    let plan = || request("edge", vec![descriptor(&[("plan", "pro")])]);
    assert_eq!(ask(&mut client, plan()).await.overall_code(), Code::Ok);
    let file = running.gateway.limits().status().files[0].clone();
    std::fs::write(
        &file,
        RULES.replace("\"edge/plan\" = \"1/min\"", "\"edge/plan\" = \"10/min\""),
    )
    .unwrap();
    let saved = Instant::now();
    loop {
        let response = ask(&mut client, plan()).await;
        let limit = response.statuses[0].current_limit.clone().unwrap();
        if limit.requests_per_unit == 10 {
            assert_eq!(response.overall_code(), Code::Ok, "the budget carried over");
            break;
        }
        assert!(
            saved.elapsed() < Duration::from_secs(1),
            "not applied within a second: {response:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_invalid_arguments_and_the_service_carries_on() {
    let (_running, mut client) = gateway(RULES).await;
    let refusal = |request| {
        let mut client = client.clone();
        async move { client.should_rate_limit(request).await.unwrap_err() }
    };
    let empty_domain = refusal(request("", vec![descriptor(&[("k", "v")])])).await;
    assert_eq!(empty_domain.code(), tonic::Code::InvalidArgument);
    assert_eq!(empty_domain.message(), "domain is empty");
    let no_entries = refusal(request("edge", vec![descriptor(&[])])).await;
    assert_eq!(no_entries.code(), tonic::Code::InvalidArgument);
    assert_eq!(no_entries.message(), "descriptor 0: no entries");
    let many = vec![descriptor(&[("k", "v")]); 65];
    let too_many = refusal(request("edge", many)).await;
    assert_eq!(too_many.code(), tonic::Code::InvalidArgument);
    let huge = "v".repeat(100 * 1024);
    let oversized = refusal(request("edge", vec![descriptor(&[("k", &huge)])])).await;
    assert_eq!(oversized.code(), tonic::Code::OutOfRange, "{oversized:?}");
    assert_eq!(
        code(&mut client, "edge", &[("tenant", "still-here")]).await,
        Code::Ok
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_service_answers() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let (running, _client) = gateway(RULES).await;
    let channel = Channel::from_shared(format!("http://{}", running.gateway.grpc_addr().unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", SERVICE_NAME] {
        let answer = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_headers_are_suggested_when_asked_for() {
    let config = format!("{RULES}\n[gateway]\ngrpc_response_headers = true\n");
    let (_running, mut client) = gateway(&config).await;
    let plan = || request("edge", vec![descriptor(&[("plan", "team")])]);
    let admitted = ask(&mut client, plan()).await;
    let header = |response: &RateLimitResponse, name: &str| {
        response
            .response_headers_to_add
            .iter()
            .find(|header| header.key == name)
            .map(|header| header.value.clone())
    };
    assert_eq!(
        header(&admitted, "ratelimit-policy").as_deref(),
        Some("\"edge/plan\";q=1;w=60")
    );
    assert_eq!(
        header(&admitted, "ratelimit").as_deref(),
        Some("\"edge/plan\";r=0;t=60")
    );
    assert_eq!(header(&admitted, "retry-after"), None);
    let refused = ask(&mut client, plan()).await;
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");

    let (_quiet, mut client) = gateway(RULES).await;
    assert!(
        ask(&mut client, plan())
            .await
            .response_headers_to_add
            .is_empty(),
        "off unless asked for"
    );
}

/// A gateway reading `files` (name, text) in order, serving gRPC; the directory it reads.
async fn gateway_reading(files: &[(&str, &str)]) -> (tempfile::TempDir, tollgate_server::Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = files
        .iter()
        .map(|(name, text)| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect();
    let mut options = crate::support::loopback_options(&paths[0]);
    options.config = paths;
    options.grpc = Some("127.0.0.1:0".parse().unwrap());
    let gateway = tollgate_server::Gateway::start(options).await.unwrap();
    (dir, gateway)
}

const RATELIMIT_YAML: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: /v1/users
        rate_limit: { unit: hour, requests_per_unit: 2 }
      - key: path
        rate_limit: { unit: day, requests_per_unit: 1 }
        shadow_mode: true
  - key: path
    value: /healthz
    rate_limit: { unlimited: true }
";

const RATELIMIT_TOML: &str = r#"
[limits]
"edge/remote_address" = { rate = "3/min", algorithm = "fixed-window" }
"edge/remote_address/10.0.0.1" = { rate = "1/min", algorithm = "fixed-window" }
"edge/tenant/acme/path/%252Fv1%252Fusers" = { rate = "2/h", algorithm = "fixed-window" }
"edge/tenant/acme/path" = { rate = "1/d", algorithm = "fixed-window", shadow = true }
"edge/path/%252Fhealthz" = { unlimited = true }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoyproxy_ratelimit_yaml_file_decides_as_its_toml_equivalent() {
    let settings = "[key]\ncase_insensitive = false\n";
    let (yaml_dir, from_yaml) = gateway_reading(&[
        ("gateway.toml", settings),
        ("ratelimit.yaml", RATELIMIT_YAML),
    ])
    .await;
    let (_toml_dir, from_toml) = gateway_reading(&[("gateway.toml", RATELIMIT_TOML)]).await;
    let mut yaml_client = connect(from_yaml.grpc_addr().unwrap()).await;
    let mut toml_client = connect(from_toml.grpc_addr().unwrap()).await;
    let script: Vec<Vec<RateLimitDescriptor>> = vec![
        vec![descriptor(&[("remote_address", "203.0.113.7")])],
        vec![descriptor(&[("remote_address", "10.0.0.1")])],
        vec![
            descriptor(&[("tenant", "acme"), ("path", "/v1/users")]),
            descriptor(&[("remote_address", "203.0.113.7")]),
        ],
        vec![descriptor(&[("tenant", "acme"), ("path", "/v1/orders")])],
        vec![descriptor(&[("tenant", "globex"), ("path", "/v1/users")])],
        vec![descriptor(&[("path", "/healthz")])],
    ];
    let comparable = |response: RateLimitResponse| {
        let statuses: Vec<_> = response
            .statuses
            .iter()
            .map(|s| (s.code(), s.current_limit.clone(), s.limit_remaining))
            .collect();
        (response.overall_code(), statuses)
    };
    // Fixed windows turn over on the minute for everyone: keep the script inside one, so
    // both gateways count in the same window.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        % 60.0;
    if into_minute > 50.0 {
        tokio::time::sleep(Duration::from_secs_f64(60.5 - into_minute)).await;
    }
    let mut over_limit = 0;
    for _ in 0..3 {
        for descriptors in &script {
            let yaml =
                comparable(ask(&mut yaml_client, request("edge", descriptors.clone())).await);
            let toml =
                comparable(ask(&mut toml_client, request("edge", descriptors.clone())).await);
            assert_eq!(yaml, toml, "{descriptors:?}");
            over_limit += usize::from(yaml.0 == Code::OverLimit);
        }
    }
    assert!(
        over_limit >= 3,
        "the script reaches the limits: {over_limit}"
    );

    // The YAML is live: a save reaches the service within a second.
    let file = yaml_dir.path().join("ratelimit.yaml");
    std::fs::write(
        &file,
        RATELIMIT_YAML.replace("requests_per_unit: 3", "requests_per_unit: 30"),
    )
    .unwrap();
    let saved = Instant::now();
    loop {
        let response = ask(
            &mut yaml_client,
            request("edge", vec![descriptor(&[("remote_address", "192.0.2.1")])]),
        )
        .await;
        if response.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit
            == 30
        {
            break;
        }
        assert!(
            saved.elapsed() < Duration::from_secs(1),
            "not applied within a second: {response:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
