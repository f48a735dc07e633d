//! `/livez`, `/readyz` and the gRPC health status, through every state a real Redis can
//! put them in (stopped and started again), and during a drain.

use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate_testkit::redis::RedisServer;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::support::{get, start_gateway};

/// `/readyz`: the status code and the JSON body.
async fn readyz(admin: std::net::SocketAddr) -> (u16, Value) {
    let reply = get(admin, "/readyz", &[]).await;
    (
        reply.status.as_u16(),
        serde_json::from_str(&reply.body).unwrap(),
    )
}

/// Polls `/readyz` until its `status` is `wanted` (at most 15 s).
async fn until(admin: std::net::SocketAddr, wanted: &str) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = readyz(admin).await;
        if body["status"] == wanted {
            return (code, body);
        }
        assert!(Instant::now() < deadline, "never {wanted}: {code} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn grpc_health(address: std::net::SocketAddr) -> ServingStatus {
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let answer = client
        .check(HealthCheckRequest {
            service: tollgate_server::grpc::SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner();
    answer.status()
}

fn config(server: &RedisServer, on_error: &str) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\non_backend_error = \"{on_error}\"\n\
         timeout = \"200ms\"\n[limits]\n\"/\" = \"100/min\"\n",
        server.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_deny_a_lost_redis_is_not_ready_and_the_grpc_health_says_so_too() {
    let Some(mut server) = RedisServer::start("with_deny_a_lost_redis_is_not_ready") else {
        return;
    };
    let running = start_gateway(&config(&server, "deny"), |options| {
        options.grpc = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let (admin, grpc) = (
        running.gateway.admin_addr(),
        running.gateway.grpc_addr().unwrap(),
    );
    let (code, body) = until(admin, "ready").await;
    assert_eq!(code, 200);
    assert_eq!(body["generation"], 1);
    let live = get(admin, "/livez", &[]).await;
    assert_eq!(live.status.as_u16(), 200);
    assert!(live.body.contains("\"alive\""), "{}", live.body);

    server.kill();
    let (code, body) = until(admin, "not_ready").await;
    assert_eq!(code, 503);
    assert!(body["reason"].as_str().unwrap().contains("deny"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while grpc_health(grpc).await != ServingStatus::NotServing {
        assert!(Instant::now() < deadline, "the gRPC health follows /readyz");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        get(admin, "/livez", &[]).await.status.as_u16(),
        200,
        "alive all along"
    );

    server.restart();
    let (code, _) = until(admin, "ready").await;
    assert_eq!(code, 200, "ready again once Redis answers");
    let deadline = Instant::now() + Duration::from_secs(10);
    while grpc_health(grpc).await != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "the gRPC health serving again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_fallback_a_lost_redis_is_degraded_but_ready() {
    let Some(mut server) = RedisServer::start("with_a_fallback_a_lost_redis_is_degraded") else {
        return;
    };
    let running = start_gateway(&config(&server, "local"), |_| {}).await;
    let admin = running.gateway.admin_addr();
    until(admin, "ready").await;
    server.kill();
    let (code, body) = until(admin, "degraded").await;
    assert_eq!(
        code, 200,
        "a fallback decides: still worth sending requests to"
    );
    assert!(
        body["reason"].as_str().unwrap().contains("own buckets"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_shutdown_on_readyz_says_draining_while_requests_in_flight_finish() {
    // An upstream that takes its time, so a request is in flight when shutdown begins.
    let app = axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        "slow"
    });
    let upstream = crate::support::serve(app).await;
    let running = start_gateway("[limits]\n\"/\" = \"100/min\"\n", |options| {
        options.upstream = Some(format!("http://{upstream}").parse().unwrap());
    })
    .await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    assert_eq!(readyz(admin).await.0, 200);
    let in_flight = tokio::spawn(async move { get(proxy, "/slow", &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let crate::support::RunningGateway { gateway, .. } = running;
    let shutdown = tokio::spawn(gateway.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, body) = readyz(admin).await;
    assert_eq!(
        (code, body["status"].as_str()),
        (503, Some("draining")),
        "{body}"
    );
    assert_eq!(
        in_flight.await.unwrap().body,
        "slow",
        "the request in flight finished"
    );
    shutdown.await.unwrap();
}
