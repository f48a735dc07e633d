//! WebSocket through the proxy, with real clients and servers (tokio-tungstenite): an
//! upgrade decided like any request and relayed both ways; a concurrency cap counting open
//! sockets, freed however a socket ends (a close frame, a hang-up); an upstream that never
//! answers the upgrade is a 504 within the timeout (and counted); an `https://` upstream's
//! sockets go over TLS; other upgrades pass as plain HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tollgate_server::tls::{ListenerTls, TlsAcceptor};
use tollgate_testkit::certs::Pki;

use crate::support::{get, start_gateway};

/// A WebSocket echo server on a free loopback port; over TLS with `tls`.
async fn echo_server_with(tls: Option<Arc<TlsAcceptor>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => echo(stream).await,
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream, Duration::from_secs(5)).await {
                            echo(stream).await;
                        }
                    }
                }
            });
        }
    });
    address
}

async fn echo_server() -> SocketAddr {
    echo_server_with(None).await
}

/// Echoes every message on the WebSocket accepted on `stream` until it closes.
async fn echo<S>(stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    while let Some(Ok(message)) = socket.next().await {
        if message.is_close() {
            break;
        }
        if socket.send(message).await.is_err() {
            break;
        }
    }
}

type Socket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// A WebSocket to `proxy`, or the HTTP status that refused the upgrade.
async fn open(proxy: SocketAddr) -> Result<Socket, u16> {
    let stream = TcpStream::connect(proxy).await.unwrap();
    match tokio_tungstenite::client_async(format!("ws://{proxy}/chat"), stream).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(error) => panic!("{error}"),
    }
}

async fn echoes(socket: &mut Socket, text: &str) {
    socket.send(Message::text(text)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(answer, Message::text(text));
}

/// Opens sockets until one is admitted, for up to 10 s: a freed slot comes back as soon as
/// the relay notices its socket ended.
async fn open_when_free(proxy: SocketAddr) -> Socket {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match open(proxy).await {
            Ok(socket) => return socket,
            Err(status) => {
                assert!(Instant::now() < deadline, "still refused: {status}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_are_relayed_counted_while_open_and_freed_however_they_close() {
    let upstream = echo_server().await;
    let running = start_gateway(
        "[limits]\nchat = { rate = \"100/min\", concurrency = 2 }\n",
        |o| {
            o.upstream = Some(format!("http://{upstream}").parse().unwrap());
        },
    )
    .await;
    let proxy = running.gateway.listen_addr();

    let mut first = open(proxy).await.unwrap();
    echoes(&mut first, "hello").await;
    let mut second = open(proxy).await.unwrap();
    echoes(&mut second, &"x".repeat(100_000)).await;
    // Two sockets open: the cap refuses a third upgrade.
    assert_eq!(open(proxy).await.err(), Some(429));

    // A close handshake frees its slot (the client closes, reads to the end, goes)...
    first.close(None).await.unwrap();
    while let Some(Ok(_)) = first.next().await {}
    drop(first);
    let mut third = open_when_free(proxy).await;
    echoes(&mut third, "again").await;
    assert_eq!(open(proxy).await.err(), Some(429));
    // ...and so does a hang-up without one.
    drop(second);
    let mut fourth = open_when_free(proxy).await;
    echoes(&mut fourth, "still").await;
    drop((third, fourth));

    let admin = running.gateway.admin_addr();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(admin, "/metrics", &[]).await.body;
        let in_flight = metrics
            .lines()
            .find(|line| line.starts_with("tollgate_in_flight{rule=\"chat\"}"))
            .unwrap_or_else(|| panic!("{metrics}"))
            .to_owned();
        if in_flight.ends_with(" 0") {
            break;
        }
        assert!(Instant::now() < deadline, "{in_flight}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_the_upgrade_is_a_504_in_time() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            kept.push(stream);
        }
    });
    let running = start_gateway("[limits]\nchat = \"100/min\"\n", |o| {
        o.upstream = Some(format!("http://{address}").parse().unwrap());
        o.upstream_timeout = Some(Duration::from_millis(500));
    })
    .await;
    let started = Instant::now();
    assert_eq!(open(running.gateway.listen_addr()).await.err(), Some(504));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let metrics = get(running.gateway.admin_addr(), "/metrics", &[])
        .await
        .body;
    assert!(
        metrics.lines().any(|line| line
            .starts_with("tollgate_upstream_errors_total{kind=\"timeout\"}")
            && !line.ends_with(" 0")),
        "the timeout is counted:\n{metrics}"
    );
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_to_an_https_upstream_go_over_tls_verified_against_its_ca() {
    let pki = Pki::new("websocket");
    let pair = pki.server("upstream");
    let tls = TlsAcceptor::load(
        "upstream",
        ListenerTls::new(&pair.cert, &pair.key),
        &[b"http/1.1"],
    )
    .unwrap();
    let upstream = echo_server_with(Some(tls)).await;
    let through = |ca_file: Option<std::path::PathBuf>| async move {
        start_gateway("[limits]\nchat = \"100/min\"\n", |o| {
            o.upstream = Some(
                format!("https://localhost:{}", upstream.port())
                    .parse()
                    .unwrap(),
            );
            o.upstream_ca_file = ca_file;
        })
        .await
    };
    let running = through(Some(pki.ca.clone())).await;
    let mut socket = open(running.gateway.listen_addr()).await.unwrap();
    echoes(&mut socket, "over tls").await;
    echoes(&mut socket, &"y".repeat(50_000)).await;
    // An upstream certificate the proxy does not trust: no socket, a 502.
    let untrusting = through(None).await;
    assert_eq!(
        open(untrusting.gateway.listen_addr()).await.err(),
        Some(502)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_to_anything_else_is_passed_as_plain_http() {
    let running = start_gateway("[limits]\nchat = \"100/min\"\n", |_| {}).await;
    let reply = get(
        running.gateway.listen_addr(),
        "/chat",
        &[("upgrade", "h2c"), ("connection", "upgrade")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
