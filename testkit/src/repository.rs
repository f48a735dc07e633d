//! A config repository for tests: a real HTTP server on a free loopback port, serving one
//! document with an ETag, answering conditional requests with 304, and able to fail on
//! demand or demand a credential. It runs on its own thread and runtime, so tests that
//! block (as `Limits::load` does while it fetches) need no runtime of their own.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The path the document is served at.
pub const PATH: &str = "/fleet/limits.toml";

/// What the repository serves, and what it has seen.
#[derive(Clone, Debug, Default)]
pub struct Served {
    pub body: String,
    /// Bumped by each publish; the ETag is `"v<version>"`.
    pub version: u64,
    /// Answer every request with this status instead.
    pub failing: Option<u16>,
    /// Refuse requests without this header and value.
    pub credential: Option<(String, String)>,
    /// Wait this long before answering (a repository that hangs).
    pub delay: Option<std::time::Duration>,
    /// Requests received.
    pub requests: u64,
    /// Requests that carried `If-None-Match`.
    pub conditional: u64,
    /// Requests answered `304 Not Modified`.
    pub not_modified: u64,
    /// Values of the credential header received, to check where they went.
    pub credentials_seen: Vec<String>,
}

/// A running repository; dropping it stops the server and frees the port.
pub struct Repository {
    address: SocketAddr,
    served: Arc<Mutex<Served>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Repository {
    /// Serves `body` (version 1).
    pub fn start(body: &str) -> Repository {
        let served = Arc::new(Mutex::new(Served {
            body: body.to_owned(),
            version: 1,
            ..Served::default()
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, address) = std::sync::mpsc::channel();
        let state = Arc::clone(&served);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                bound.send(listener.local_addr().unwrap()).unwrap();
                let app = Router::new().route(PATH, get(document)).with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Repository {
            address: address.recv().unwrap(),
            served,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The document's URL.
    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.address)
    }

    /// Serves `body` from now on, under a new ETag.
    pub fn publish(&self, body: &str) {
        let mut served = self.served.lock().unwrap();
        served.body = body.to_owned();
        served.version += 1;
    }

    /// Answers every request with `status` (or serves the document again, with `None`).
    pub fn fail_with(&self, status: Option<u16>) {
        self.served.lock().unwrap().failing = status;
    }

    /// Waits `delay` before answering each request (or answers at once, with `None`).
    pub fn hang_for(&self, delay: Option<std::time::Duration>) {
        self.served.lock().unwrap().delay = delay;
    }

    /// Refuses requests that do not carry `name: value`.
    pub fn require(&self, name: &str, value: &str) {
        self.served.lock().unwrap().credential = Some((name.to_owned(), value.to_owned()));
    }

    /// What it serves and has seen, now.
    pub fn served(&self) -> Served {
        self.served.lock().unwrap().clone()
    }
}

impl Drop for Repository {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn document(State(served): State<Arc<Mutex<Served>>>, headers: HeaderMap) -> Response {
    let delay = {
        let mut served = served.lock().unwrap();
        served.requests += 1;
        served.delay
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let mut served = served.lock().unwrap();
    if let Some((name, _)) = &served.credential
        && let Some(value) = headers.get(name.as_str()).and_then(|v| v.to_str().ok())
    {
        let value = value.to_owned();
        served.credentials_seen.push(value);
    }
    if let Some(status) = served.failing {
        return StatusCode::from_u16(status).unwrap().into_response();
    }
    if let Some((name, value)) = &served.credential
        && headers.get(name.as_str()).and_then(|v| v.to_str().ok()) != Some(value.as_str())
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let etag = format!("\"v{}\"", served.version);
    if let Some(asked) = headers.get(header::IF_NONE_MATCH) {
        served.conditional += 1;
        if asked.to_str().ok() == Some(etag.as_str()) {
            served.not_modified += 1;
            return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
        }
    }
    (
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/toml".into()),
        ],
        served.body.clone(),
    )
        .into_response()
}

/// A fleet's private repository and one server's local file for it: the repository serves
/// `body` only to requests whose `Authorization` is `secret`, and the local file (in a
/// temporary directory) caches copies in `cache` and names the environment variable
/// `variable` as where that header's value comes from.
pub struct PrivateFleet {
    pub repository: Repository,
    /// The local file, to layer after the repository's URL.
    pub local: std::path::PathBuf,
    /// Where copies of the document are cached.
    pub cache: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PrivateFleet {
    pub fn start(body: &str, secret: &str, variable: &str) -> PrivateFleet {
        let repository = Repository::start(body);
        repository.require("authorization", secret);
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let local = dir.path().join("local.toml");
        std::fs::write(
            &local,
            format!(
                "[reload]\ncache_dir = \"{}\"\n[reload.headers.\"127.0.0.1\"]\n\
                 Authorization = \"{variable}\"\n",
                cache.display()
            ),
        )
        .unwrap();
        PrivateFleet {
            repository,
            local,
            cache,
            _dir: dir,
        }
    }
}
