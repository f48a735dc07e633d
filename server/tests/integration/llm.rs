//! Tokens per minute through the gateway and its demo model: a reservation at admission,
//! settled from the JSON usage or the last server-sent event, debt waited off.

use bytes::Bytes;
use http::{Method, StatusCode};

use crate::support::{Reply, get, send, start_gateway};

const RULES: &str = "[client]\nsources = [\"header:x-api-key\", \"ip\"]\n\
    [limits.\"v1/chat\"]\nrate = \"2000/min\"\n\
    cost = { reserve = 500, from = \"json:/usage/total_tokens\" }\n";

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {}", reply.body))
}

async fn chat(proxy: std::net::SocketAddr, key: &str, body: &str) -> Reply {
    send(
        proxy,
        Method::POST,
        "/v1/chat/completions",
        &[("x-api-key", key), ("content-type", "application/json")],
        Bytes::from(body.to_owned()),
    )
    .await
}

async fn remaining(admin: std::net::SocketAddr, key: &str) -> u64 {
    let why = json(
        &get(
            admin,
            &format!("/explain?path=/v1/chat/completions&client={key}"),
            &[],
        )
        .await,
    );
    why["state"]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("{why}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_runs_out_of_tokens_and_into_debt() {
    let running = start_gateway(RULES, |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    // 3 prompt words + 100 completion tokens: 103 used of the 500 reserved.
    let reply = chat(
        proxy,
        "key-1",
        r#"{"messages":[{"role":"user","content":"say something short"}],"max_tokens":100}"#,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(json(&reply)["usage"]["total_tokens"], 103);
    assert_eq!(remaining(admin, "key-1").await, 2000 - 103);
    // Streamed: the usage in the last event settles it.
    let streamed = chat(
        proxy,
        "key-1",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"stream":true}"#,
    )
    .await;
    assert_eq!(streamed.status, StatusCode::OK);
    assert!(streamed.body.contains("\"usage\"") && streamed.body.ends_with("data: [DONE]\n\n"));
    assert_eq!(remaining(admin, "key-1").await, 2000 - 103 - 41);
    // A long answer: 3000 tokens, admitted on its 500 reservation, leaves the key in debt.
    let long = chat(proxy, "key-1", r#"{"messages":[],"max_tokens":3000}"#).await;
    assert_eq!(long.status, StatusCode::OK);
    assert_eq!(remaining(admin, "key-1").await, 0);
    let refused = chat(proxy, "key-1", r#"{"messages":[],"max_tokens":1}"#).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        wait > 30,
        "over a thousand tokens to wait off at 2000 a minute, then 500 to reserve: {wait}"
    );
    // Another key has its own budget.
    assert_eq!(
        chat(proxy, "key-2", r#"{"messages":[]}"#).await.status,
        StatusCode::OK
    );

    // The admin listener counts what was reserved and used, rule by rule, and shows it.
    let traffic = json(&get(admin, "/traffic", &[]).await);
    let rule = traffic["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["rule"] == "v1/chat")
        .unwrap();
    assert_eq!(rule["tokens"]["settlements"], 4, "{rule}");
    assert_eq!(rule["tokens"]["reserved"], 4 * 500);
    assert_eq!(rule["tokens"]["used"], 103 + 41 + 3000 + 16);
    let page = get(admin, "/", &[]).await.body;
    assert!(
        page.contains("tokens since start: 2000 reserved · 3160 used, by 4 settled responses"),
        "the page shows it"
    );
}
