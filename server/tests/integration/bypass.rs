//! Attempts to slip past a limit, each through the gateway over raw HTTP/1.1 on loopback:
//! every variant must land in the canonical request's bucket, or be contained by the bound.
//!
//! "Same bucket" is read off the `RateLimit` header: the rule named must be the canonical
//! one and `r` (remaining) must go down by exactly one per request. A fresh bucket would
//! answer with the full burst again.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::start_gateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the gateway answered to one raw request.
struct Answer {
    status: u16,
    head: String,
}

impl Answer {
    /// The `RateLimit` header as (rule, remaining).
    fn bucket(&self) -> (String, u64) {
        let value = self
            .head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("ratelimit")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no RateLimit header in:\n{}", self.head));
        let (rule, rest) = value.split_once(";r=").unwrap();
        let remaining = rest.split(';').next().unwrap().parse().unwrap();
        (rule.trim_matches('"').to_owned(), remaining)
    }
}

/// Sends `request_line` and `headers` exactly as written (no normalisation by a client
/// library), and reads the answer's status and head.
async fn raw(address: SocketAddr, request_line: &str, headers: &[String]) -> Answer {
    let mut text = format!("{request_line}\r\nHost: gateway.test\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str("Connection: close\r\n\r\n");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the gateway answered within 10 s");
    let answer = String::from_utf8_lossy(&answer);
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    Answer { status, head }
}

/// Asserts each request lands in `rule`'s bucket, one token below the one before.
async fn assert_one_bucket(address: SocketAddr, rule: &str, requests: &[(String, Vec<String>)]) {
    let mut expected = None;
    for (request_line, headers) in requests {
        let answer = raw(address, request_line, headers).await;
        assert_eq!(answer.status, 200, "{request_line} {headers:?}");
        let (named, remaining) = answer.bucket();
        assert_eq!(named, rule, "{request_line} {headers:?} resolved elsewhere");
        if let Some(expected) = expected {
            assert_eq!(
                remaining, expected,
                "{request_line} {headers:?} got a bucket of its own"
            );
        }
        expected = Some(remaining - 1);
    }
}

fn get(path: &str) -> (String, Vec<String>) {
    (format!("GET {path} HTTP/1.1"), Vec::new())
}

#[tokio::test]
async fn case_encoding_and_dot_segment_variants_share_the_canonical_bucket() {
    let running = start_gateway(
        "[key]\ncase_insensitive = true\n\n[limits]\n\"/\" = \"1000/s\"\n\
         \"api/search\" = \"1000/d\"\n",
        |_| {},
    )
    .await;
    let variants = [
        "/api/search",
        "/API/search",
        "/Api/SEARCH?q=1",
        "/api/%73earch",
        "/api/%53EARCH",
        "/api/search%2F",
        "/api/search/",
        "//api/search",
        "/api//search",
        "/api/./search",
        "/api/%2e/search",
        "/x/../api/search",
        "/x/%2E%2E/api/search",
        "/../api/search",
        "/api/search/.",
        "http://gateway.test/api/search",
    ];
    let requests: Vec<_> = variants.iter().map(|path| get(path)).collect();
    assert_one_bucket(running.gateway.listen_addr(), "api/search", &requests).await;
    // Deeper paths are the rule's too (longest prefix), still the same client's bucket.
    assert_one_bucket(
        running.gateway.listen_addr(),
        "api/search",
        &[get("/api/search/deeper"), get("/API/Search/other")],
    )
    .await;
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_change_nothing() {
    // No trusted proxies: the TCP peer (127.0.0.1) is the client whatever it claims.
    let running = start_gateway("[limits]\n\"/\" = \"1000/d\"\n", |_| {}).await;
    let mut requests = Vec::new();
    for i in 0..30 {
        let (line, _) = get("/login");
        requests.push((
            line,
            vec![
                format!("X-Forwarded-For: 203.0.113.{i}"),
                format!("Forwarded: for=198.51.100.{i};proto=https"),
                format!("X-Real-IP: 192.0.2.{i}"),
                format!("X-Forwarded-For: 10.0.0.{i}, 172.16.0.{i}"),
            ],
        ));
    }
    assert_one_bucket(running.gateway.listen_addr(), "/", &requests).await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_only_the_right_most_untrusted_address_counts() {
    let running = start_gateway(
        "[client]\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]\n\n\
         [limits]\n\"/\" = \"1000/d\"\n",
        |_| {},
    )
    .await;
    let address = running.gateway.listen_addr();
    // Fifty copies of the header, all but the last written by the client (left of what
    // the trusted proxy appended); they change with every request.
    let mut requests = Vec::new();
    for i in 0..20 {
        let (line, _) = get("/api");
        let mut headers: Vec<String> = (0..50)
            .map(|copy| format!("X-Forwarded-For: 192.0.2.{}", (i * 50 + copy) % 250))
            .collect();
        headers.push("X-Forwarded-For: 198.51.100.7, 10.1.2.3".to_owned());
        requests.push((line, headers));
    }
    assert_one_bucket(address, "/", &requests).await;
    // A different client behind the proxy does get its own (full) bucket: the header is
    // believed from a trusted peer.
    let other = raw(
        address,
        "GET /api HTTP/1.1",
        &["X-Forwarded-For: 198.51.100.8".to_owned()],
    )
    .await;
    assert_eq!(other.bucket(), ("/".to_owned(), 999));
}

#[tokio::test]
async fn rotating_ipv6_addresses_inside_one_64_share_a_bucket() {
    let running = start_gateway(
        "[client]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[limits]\n\"/\" = \"1000/d\"\n",
        |_| {},
    )
    .await;
    let address = running.gateway.listen_addr();
    let mut requests = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..40 {
        // A different interface identifier every time (xorshift), one /64.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let [a, b, c, d] = [state >> 48, state >> 32, state >> 16, state].map(|x| x & 0xffff);
        let (line, _) = get("/");
        requests.push((
            line,
            vec![format!(
                "X-Forwarded-For: 2001:db8:1:2:{a:x}:{b:x}:{c:x}:{d:x}"
            )],
        ));
    }
    assert_one_bucket(address, "/", &requests).await;
    // The next /64 is another client.
    let other = raw(
        address,
        "GET / HTTP/1.1",
        &["X-Forwarded-For: 2001:db8:1:3::1".to_owned()],
    )
    .await;
    assert_eq!(other.bucket(), ("/".to_owned(), 999));
}

#[tokio::test]
async fn rotating_header_identities_are_contained_by_max_buckets() {
    const BOUND: usize = 64;
    const IDENTITIES: usize = 1_000;
    let running = start_gateway(&format!(
        "[client]\nsources = [\"header:x-api-key\", \"ip\"]\n\n[store]\nmax_buckets = {BOUND}\n\n\
         [limits]\n\"/\" = \"5/min\"\n"
    ), |_| {})
    .await;
    let address = running.gateway.listen_addr();
    let mut most = 0;
    for i in 0..IDENTITIES {
        let answer = raw(
            address,
            "GET / HTTP/1.1",
            &[format!("X-Api-Key: key-{i:06}")],
        )
        .await;
        // Every new identity starts with a full bucket, as it should; what matters is
        // that the store does not grow with them.
        assert_eq!(answer.status, 200);
        most = most.max(running.gateway.limits().store().memory().len());
    }
    assert!(
        most <= BOUND,
        "{IDENTITIES} identities held {most} buckets, bound {BOUND}"
    );
    // One identity that keeps spending is still limited after the churn.
    for _ in 0..5 {
        raw(address, "GET / HTTP/1.1", &["X-Api-Key: steady".to_owned()]).await;
    }
    let denied = raw(address, "GET / HTTP/1.1", &["X-Api-Key: steady".to_owned()]).await;
    assert_eq!(denied.status, 429);
}
