//! What tollgate's tests and benchmarks share, in one crate so the library's tests, the
//! service's tests and the benchmarks use one copy: real servers started on free loopback
//! ports and stopped by PID (`redis`, `cluster`, `browser`), small upstreams and a config
//! repository to aim at (`upstream`, `repository`), and an HTTP client that returns what a
//! test looks at (`get`, `send`, [`Reply`]).
//!
//! Servers that are not installed make a test say so loudly and skip, unless `CI=true`,
//! where they fail.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

pub mod architecture;
pub mod browser;
pub mod certs;
pub mod cluster;
pub mod redis;
pub mod repository;
pub mod sentinel;
pub mod upstream;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Serves `app` on 127.0.0.1 (a free port) with peer addresses, until the runtime ends.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    address
}

/// What a test looks at in a response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: BTreeMap<String, String>,
    /// The body as text (lossy: binary bodies are in `bytes`).
    pub body: String,
    pub bytes: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Sends `GET path` with `headers` to `address` over a fresh HTTP/1.1 connection pool.
pub async fn get(address: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(address, http::Method::GET, path, headers, Bytes::new()).await
}

/// Sends any request; the body is sent whole (the server may still stream it).
pub async fn send(
    address: SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{address}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(body)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let mut collected = BTreeMap::new();
    for (name, value) in response.headers() {
        let entry: &mut String = collected.entry(name.to_string()).or_default();
        if !entry.is_empty() {
            entry.push_str(", ");
        }
        entry.push_str(value.to_str().unwrap());
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers: collected,
        body: String::from_utf8_lossy(&body).into_owned(),
        bytes: body,
    }
}

/// A loopback port nothing listens on at the moment of asking (for servers started with a
/// port number, not `:0`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// `GET path` from `address`, or `None` when nothing answers there (yet).
pub async fn try_get(address: SocketAddr, path: &str) -> Option<Reply> {
    tokio::net::TcpStream::connect(address).await.ok()?;
    tokio::time::timeout(std::time::Duration::from_secs(5), get(address, path, &[]))
        .await
        .ok()
}

/// The value of a future that must be ready at once (the in-memory store never waits).
pub fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("future was not ready at once"),
    }
}

/// This process's resident set in bytes (`VmRSS`), for benches measuring memory.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    kb * 1024
}

/// The sample configs in the repository's `config/` whose names end in one of
/// `extensions`, sorted: every one is parsed by a test, so samples cannot rot.
pub fn config_samples(extensions: &[&str]) -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut samples: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| extensions.contains(&e))
        })
        .collect();
    samples.sort();
    assert!(!samples.is_empty(), "no samples in {}", dir.display());
    samples
}
