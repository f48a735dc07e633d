//! Trailers through the proxy: a cost settled from an upstream's trailer, and the trailer
//! passed on to a client that asked for trailers (`TE: trailers`), over HTTP/1.1 and
//! HTTP/2.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::start_gateway;

const RULES: &str = "[limits.\"/\"]\nrate = \"100/hour\"\n\
    cost = { reserve = 10, from = \"trailer:x-usage-tokens\" }\n";

/// An upstream answering every request with a chunked body and `x-usage-tokens: 7` in its
/// trailer section, as a real HTTP/1.1 server writes it; counts the connections it took and
/// the requests that asked for trailers.
async fn chunked_upstream_with_trailer() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let (counted, asking) = (Arc::clone(&connections), Arc::clone(&asked));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::Relaxed);
            let asking = Arc::clone(&asking);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buffer = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buffer[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        if head.contains("\r\nte: trailers") {
                            asking.fetch_add(1, Ordering::Relaxed);
                        }
                        seen.drain(..end + 4);
                        let response = "HTTP/1.1 200 OK\r\n\
                            content-type: text/plain\r\n\
                            transfer-encoding: chunked\r\n\
                            trailer: x-usage-tokens\r\n\r\n\
                            5\r\nhello\r\n0\r\nx-usage-tokens: 7\r\n\r\n";
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (address, connections, asked)
}

/// Sends `GET /` with `extra` header lines over a new connection and reads the whole raw
/// response (the connection is closed after it).
async fn raw_get(proxy: SocketAddr, extra: &str) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let request =
        format!("GET /generate HTTP/1.1\r\nhost: test\r\n{extra}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("the proxy answered within 10 s")
        .unwrap();
    String::from_utf8(response).unwrap()
}

/// The `r=` of a response's `RateLimit` header.
fn remaining(response: &str) -> u64 {
    let line = response
        .lines()
        .find(|line| line.to_ascii_lowercase().starts_with("ratelimit:"))
        .unwrap_or_else(|| panic!("no RateLimit header in\n{response}"));
    line.split(";r=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_in_an_upstreams_trailer_is_settled_and_passed_on_to_clients_asking_for_it() {
    let (upstream, connections, asked) = chunked_upstream_with_trailer().await;
    let running = start_gateway(RULES, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap());
    })
    .await;
    let proxy = running.gateway.listen_addr();

    // A client that did not ask for trailers gets the body, not the trailer.
    let first = raw_get(proxy, "").await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(remaining(&first), 90, "10 reserved at admission");
    assert!(first.contains("hello"), "{first}");
    assert!(
        !first.to_ascii_lowercase().contains("x-usage-tokens: 7"),
        "no trailer for a client that did not send TE: trailers:\n{first}"
    );

    // The first response's trailer settled it at 7: 100 - 7 - 10 reserved now.
    let second = raw_get(proxy, "te: trailers\r\n").await;
    assert_eq!(remaining(&second), 83, "{second}");
    let lower = second.to_ascii_lowercase();
    assert!(
        lower.contains("trailer: x-usage-tokens"),
        "the Trailer header announces it:\n{second}"
    );
    assert!(
        lower.contains("0\r\nx-usage-tokens: 7\r\n\r\n"),
        "the trailer reaches a client that sent TE: trailers:\n{second}"
    );

    // The second was settled too.
    let third = raw_get(proxy, "").await;
    assert_eq!(remaining(&third), 100 - 7 - 7 - 10, "{third}");

    // The proxy asked for trailers every time, and a response read to its trailers left
    // its connection to be used again.
    assert_eq!(asked.load(Ordering::Relaxed), 3);
    assert_eq!(
        connections.load(Ordering::Relaxed),
        1,
        "one kept-alive connection"
    );
}

/// `GET /generate` over HTTP/2 (prior knowledge) on `client`, with `te: trailers`: the
/// response's `RateLimit` remaining, its body and its trailers.
async fn h2_get(
    client: h2::client::SendRequest<bytes::Bytes>,
    proxy: SocketAddr,
) -> (u64, String, Option<http::HeaderMap>) {
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(format!("http://{proxy}/generate"))
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .unwrap()
        .unwrap();
    let line = response.headers()["ratelimit"].to_str().unwrap().to_owned();
    let remaining = line.split(";r=").nth(1).unwrap().split(';').next().unwrap();
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap();
    (
        remaining.parse().unwrap(),
        String::from_utf8(text).unwrap(),
        trailers,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_the_trailer_settles_the_cost_and_reaches_the_client() {
    let (upstream, _, asked) = chunked_upstream_with_trailer().await;
    let running = start_gateway(RULES, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap());
    })
    .await;
    let proxy = running.gateway.listen_addr();
    let tcp = TcpStream::connect(proxy).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let (remaining, body, trailers) = h2_get(client.clone(), proxy).await;
    assert_eq!(
        (remaining, body.as_str()),
        (90, "hello"),
        "10 reserved at admission"
    );
    let trailers = trailers.expect("an HTTP/2 client asking for trailers gets them");
    assert_eq!(trailers["x-usage-tokens"], "7");
    // The trailer settled the first at 7: 100 - 7 - 10 reserved now.
    let (remaining, _, _) = h2_get(client, proxy).await;
    assert_eq!(remaining, 83);
    assert_eq!(asked.load(Ordering::Relaxed), 2);
}
