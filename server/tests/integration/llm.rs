//! Token budgets through the gateway and its demo model: a reservation at admission,
//! settled from the JSON usage or the last server-sent event, debt waited off.

use bytes::Bytes;
use http::{Method, StatusCode};

use crate::support::{Reply, get, send, start_gateway};

const RULES: &str = "[client]\nsources = [\"header:x-api-key\", \"ip\"]\n\
    [limits.\"v1/chat\"]\nrate = \"2000/hour\"\n\
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
    // 19 bytes of prompt (5 tokens) + 100 completion tokens: 105 used of the 500 reserved.
    let reply = chat(
        proxy,
        "key-1",
        r#"{"messages":[{"role":"user","content":"say something short"}],"max_tokens":100}"#,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(json(&reply)["usage"]["total_tokens"], 105);
    assert_eq!(remaining(admin, "key-1").await, 2000 - 105);
    // Streamed: the usage in the last event settles it.
    let streamed = chat(
        proxy,
        "key-1",
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"stream":true}"#,
    )
    .await;
    assert_eq!(streamed.status, StatusCode::OK);
    assert!(streamed.body.contains("\"usage\"") && streamed.body.ends_with("data: [DONE]\n\n"));
    assert_eq!(remaining(admin, "key-1").await, 2000 - 105 - 41);
    // A long answer: 3000 tokens, admitted on its 500 reservation, leaves the key in debt.
    let long = chat(proxy, "key-1", r#"{"messages":[],"max_tokens":3000}"#).await;
    assert_eq!(long.status, StatusCode::OK);
    assert_eq!(remaining(admin, "key-1").await, 0);
    let refused = chat(proxy, "key-1", r#"{"messages":[],"max_tokens":1}"#).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        wait > 30,
        "over a thousand tokens to wait off at 2000 an hour, then 500 to reserve: {wait}"
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
    assert_eq!(rule["tokens"]["used"], 105 + 41 + 3000 + 16);
    let page = get(admin, "/", &[]).await.body;
    assert!(
        page.contains("tokens since start: 2000 reserved · 3162 used, by 4 settled responses"),
        "the page shows it"
    );
}

/// A key's weighted token budget and its monthly dollar budget (`also` limits on every
/// request), a model's limit for everyone (an ordinary rule on the model read from the
/// body) — estimated at admission
/// and settled from the usage of each API the demo model speaks, streamed and not.
const AI_RULES: &str = r#"
[key]
parts = ["route", "json:/model", "client"]

[client]
sources = ["header:x-api-key", "ip"]

[limits."/"]
rate = "100/s"

[limits."/".also]
tokens = { rate = "60000/min", cost = { reserve = "estimate", from = "usage", max = 20000, weights = { input = 1, output = 4, cached = 0.1 } } }
budget = { rate = "$50/month", cost = { reserve = "estimate", from = "usage", max = 100 } }

[prices."*"]
input = "2.50/1M"
output = "10.00/1M"

[limits."v1/chat/completions/gpt-4o"]
rate = "200000/min"
per = "global"
cost = { reserve = "estimate", from = "usage", max = 20000 }
"#;

fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}")) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_budgets_per_key_and_per_model_from_every_api_streamed_and_not() {
    let running = start_gateway(AI_RULES, |_| {}).await;
    let (proxy, admin) = (running.gateway.listen_addr(), running.gateway.admin_addr());
    // 8 bytes of prompt (2 tokens), 10 tokens of answer: 2 + 4 × 10 = 42 weighted.
    let calls = [
        (
            "/v1/chat/completions",
            r#"{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"abcdefgh"}]STREAM}"#,
        ),
        (
            "/v1/responses",
            r#"{"model":"gpt-4.1","max_output_tokens":10,"input":"abcdefgh"STREAM}"#,
        ),
        (
            "/v1/messages",
            r#"{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"}]}]STREAM}"#,
        ),
        (
            "/v1beta/models/gemini-x:generateContent",
            r#"{"contents":[{"parts":[{"text":"abcdefgh"}]}],"generationConfig":{"maxOutputTokens":10}}"#,
        ),
        (
            "/v1beta/models/gemini-x:streamGenerateContent",
            r#"{"contents":[{"parts":[{"text":"abcdefgh"}]}],"generationConfig":{"maxOutputTokens":10}}"#,
        ),
    ];
    let mut sent = 0;
    for (path, body) in calls {
        for stream in ["", r#","stream":true"#] {
            if path.contains("gemini") && !stream.is_empty() {
                continue;
            }
            let body = body.replace("STREAM", stream);
            let reply = send(
                proxy,
                Method::POST,
                path,
                &[("x-api-key", "key-1"), ("content-type", "application/json")],
                Bytes::from(body),
            )
            .await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{path} {stream}: {}",
                reply.body
            );
            sent += 1;
        }
    }
    assert_eq!(sent, 8);
    let metrics = get(admin, "/metrics", &[]).await.body;
    let usage = |rule: &str, kind: &str| {
        metric(
            &metrics,
            &format!("tollgate_usage_tokens_total{{rule=\"{rule}\",kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(
        usage("/#tokens", "input"),
        8 * 2,
        "every request's input, every API"
    );
    assert_eq!(usage("/#tokens", "output"), 8 * 10);
    assert_eq!(usage("/#tokens", "cached"), 0);
    assert_eq!(
        usage("v1/chat/completions/gpt-4o", "output"),
        2 * 10,
        "gpt-4o's only"
    );
    assert_eq!(
        metric(&metrics, "tollgate_settled_tokens_total{rule=\"/#tokens\"}"),
        8 * 42
    );
    // Answers of 4,000 tokens: 2 + 16,000 estimated, and used. Three fit in what is left
    // of 60,000 − 8 × 42; the fourth is refused before the model is asked.
    let long = r#"{"model":"claude-x","max_tokens":4000,"messages":[{"role":"user","content":"abcdefgh"}]}"#;
    for _ in 0..3 {
        let reply = send(
            proxy,
            Method::POST,
            "/v1/messages",
            &[("x-api-key", "key-1"), ("content-type", "application/json")],
            Bytes::from(long),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let refused = send(
        proxy,
        Method::POST,
        "/v1/messages",
        &[("x-api-key", "key-1"), ("content-type", "application/json")],
        Bytes::from(long),
    )
    .await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains(r#""limit":"/#tokens""#),
        "{}",
        refused.body
    );
    // Another key has its own budget.
    let other = send(
        proxy,
        Method::POST,
        "/v1/messages",
        &[("x-api-key", "key-2"), ("content-type", "application/json")],
        Bytes::from(long),
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);

    // The admin listener explains a request with its body: the model read as a key part,
    // and what each estimating limit would reserve.
    let explained = send(
        admin,
        Method::POST,
        "/explain?path=/v1/chat/completions&client=key-1&method=POST",
        &[("content-type", "application/json")],
        Bytes::from(calls[0].1.replace("STREAM", "")),
    )
    .await;
    let why = json(&explained);
    assert_eq!(why["key"], "v1/chat/completions/gpt-4o/key-1", "{why}");
    assert_eq!(why["rule"], "v1/chat/completions/gpt-4o");
    let estimates = why["estimates"].as_array().unwrap();
    let reserve = |limit: &str| {
        estimates
            .iter()
            .find(|e| e["limit"] == limit)
            .unwrap_or_else(|| panic!("{limit} in {why}"))["reserve"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(reserve("v1/chat/completions/gpt-4o"), 2 + 10);
    assert_eq!(reserve("/#tokens"), 2 + 4 * 10);
    assert_eq!(estimates[0]["model"], "gpt-4o");
    assert_eq!(reserve("/#budget"), 0, "105 micro-dollars: no whole cent");

    // Dollars: 8 answers of 2 input + 10 output tokens (105 micro-dollars each), then four
    // of 2 + 4,000 (40,005 each; the refused one never ran), priced by [prices] "*".
    let metrics = get(admin, "/metrics", &[]).await.body;
    assert_eq!(
        metric(&metrics, "tollgate_settled_tokens_total{rule=\"/#budget\"}"),
        8 * 105 + 4 * 40_005
    );
    let page = get(admin, "/", &[]).await.body;
    assert!(
        page.contains("spent since start: $0.16 used") || page.contains("· $0.16 used"),
        "the page shows dollars: {}",
        page.lines()
            .filter(|l| l.contains("spent"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
