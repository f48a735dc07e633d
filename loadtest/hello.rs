//! The axum "hello" servers `loadtest/axum.sh` compares, and a fixed-count load generator.
//!
//! ```sh
//! cargo build --release --example bench_hello
//! target/release/examples/bench_hello serve tollgate never --listen 127.0.0.1:18090
//! target/release/examples/bench_hello load --target 127.0.0.1:18090 --requests 10000
//! ```
//!
//! `serve <limiter> <quota>` runs one variant on a single-threaded runtime until SIGTERM or
//! Ctrl-C, then returns from `main` (so valgrind can write its counts):
//!
//! - limiter `bare` (no limiter), `tollgate` (`RateLimitLayer::new(..).axum_body()`, the
//!   layer as the README sets it up for axum, IETF headers on), `tollgate-no-headers` (the
//!   same with `[response] headers = "none"`, to show what the headers cost),
//!   `tollgate-wrapped` (`RateLimitLayer::new` alone: any body type, wrapped, which axum
//!   boxes again), `tollgate-parts` (the first with `[key] parts = ["host", "method",
//!   "header:x-tenant", "route", "client"]`, the rule three segments deep, with limits per
//!   plan and every client on `[plans] default`), `tollgate-usage` (the first over a handler
//!   that reports `x-usage: 1`), `tollgate-settle` (the same, its rule reserving 2 and
//!   settling from that header: a refund each request), `tollgate-suggest` (the first with
//!   `suggest = true`: each client's peak counted), `tollgate-candidate` (the first with one
//!   candidate limit, which also counts peaks), `tollgate-also` (the first whose rule
//!   carries two `also` limits: three buckets decided together), `tollgate-stacked` (three
//!   tollgate layers stacked in tower, one rule each), `tollgate-reserve` (the first behind
//!   `ReadBodyLayer`, its rule reserving a fixed 1,000 tokens settled from an OpenAI `usage`
//!   object the handler answers with: the body is never read), `tollgate-estimate` (the same
//!   reserving `"estimate"`, weighted: each request's JSON body read and walked),
//!   `tollgate-header`, `tollgate-api-key` and `tollgate-jwt` (the first keyed by
//!   `header:x-api-key` as sent, by a known API key, or by a verified RS256 token's `sub`:
//!   run the load with `--auth api-key` or `--auth rs256`), `governor` or `governor-headers` (the same
//!   with tower_governor's `use_headers`: `x-ratelimit-limit`, `-remaining`, `-after`) (tower_governor's `GovernorLayer` keyed by peer IP, no
//!   headers);
//! - quota `never` (1,000,000/s with a burst of 1,000,000: nobody is denied) or `deny`
//!   (1/s with a burst of 1: a single client is denied all but one request a second).
//!
//! Both limiters get the same quota and key clients by peer address through axum's
//! `ConnectInfo`, which every variant (bare included) is served with.
//!
//! `load` sends exactly `--requests` GET requests (with `--chat`, POST requests carrying a
//! 2 KiB OpenAI chat body) over `--connections` keep-alive HTTP/1.1
//! connections and prints how many got each status: the fixed amount of work the
//! instruction counts are taken over (wrk, which runs for a time, measures throughput).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use clap::{Parser, Subcommand, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tollgate::{Limits, RateLimitLayer, ReadBodyLayer};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

#[derive(Parser)]
#[command(about = "axum hello servers for loadtest/axum.sh, and a fixed-count load generator")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve one variant until SIGTERM or Ctrl-C.
    Serve {
        limiter: Limiter,
        quota: QuotaKind,
        #[arg(long, default_value = "127.0.0.1:18090")]
        listen: SocketAddr,
        /// Start one more thread that only sleeps, so every variant is a multi-threaded
        /// process as a server on tokio's multi-thread runtime is: glibc then takes its
        /// cancellation-point path around every system call (about 150 instructions a
        /// request), which tollgate's maintenance thread otherwise makes it pay alone.
        #[arg(long)]
        idle_thread: bool,
    },
    /// Send a fixed number of requests and print the statuses received.
    Load {
        #[arg(long, default_value = "127.0.0.1:18090")]
        target: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        requests: u64,
        #[arg(long, default_value_t = 1)]
        connections: u64,
        /// POST a 2 KiB OpenAI chat body instead of an empty GET.
        #[arg(long)]
        chat: bool,
        /// Credentials each request carries: `api-key` (`x-api-key`) or `rs256` (a bearer
        /// token signed with the test RSA key, `sub` "user-42").
        #[arg(long)]
        auth: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Limiter {
    Bare,
    Tollgate,
    TollgateNoHeaders,
    TollgateWrapped,
    TollgateParts,
    /// `tollgate` over a handler that reports its usage in an `x-usage: 1` header.
    TollgateUsage,
    /// The same, its rule reserving 2 and settling from that header (1 refunded each time).
    TollgateSettle,
    /// `tollgate` with `suggest = true`: each client's peak per window counted.
    TollgateSuggest,
    /// `tollgate` with one candidate limit (which counts peaks too).
    TollgateCandidate,
    /// `tollgate` whose rule carries two `also` limits (one global, one per client):
    /// three buckets decided together.
    TollgateAlso,
    /// Three `tollgate` layers stacked in tower, one rule each (global, per client, per
    /// client): what a user would do without `also`, and not atomic.
    TollgateStacked,
    /// `tollgate` behind `ReadBodyLayer`, reserving a fixed 1,000 tokens settled from the
    /// handler's OpenAI usage: the body is not read.
    TollgateReserve,
    /// The same reserving `"estimate"`: each JSON body read and walked.
    TollgateEstimate,
    /// `tollgate` keyed by `header:x-api-key`, believed as sent (`load --auth api-key`).
    TollgateHeader,
    /// `tollgate` keyed by a known API key (`api_key`, a one-key table; `--auth api-key`).
    TollgateApiKey,
    /// `tollgate` keyed by a verified token's `sub` (the test key set; `--auth rs256`).
    TollgateJwt,
    Governor,
    /// tower_governor with its rate-limit headers on (`use_headers`): the fair peer of
    /// `tollgate`, which sends the IETF headers.
    GovernorHeaders,
}

#[derive(Clone, Copy, ValueEnum)]
enum QuotaKind {
    /// 1,000,000/s, burst 1,000,000.
    Never,
    /// 1/s, burst 1.
    Deny,
}

impl QuotaKind {
    /// The quota as (tokens per second, burst).
    fn rate_and_burst(self) -> (u64, u32) {
        match self {
            QuotaKind::Never => (1_000_000, 1_000_000),
            QuotaKind::Deny => (1, 1),
        }
    }
}

fn app(limiter: Limiter, quota: QuotaKind) -> Result<Router, Box<dyn std::error::Error>> {
    let app = match limiter {
        Limiter::TollgateUsage | Limiter::TollgateSettle => {
            Router::new().route("/", get(|| async { ([("x-usage", "1")], "hello\n") }))
        }
        Limiter::TollgateReserve | Limiter::TollgateEstimate => Router::new().route(
            "/",
            any(|| async {
                (
                    [("content-type", "application/json")],
                    r#"{"usage":{"prompt_tokens":520,"completion_tokens":100,"total_tokens":620}}"#,
                )
            }),
        ),
        _ => Router::new().route(
            "/",
            get(|| async { "hello\n" }).post(|| async { "hello\n" }),
        ),
    };
    let (per_second, burst) = quota.rate_and_burst();
    Ok(match limiter {
        Limiter::Bare => app,
        Limiter::Tollgate
        | Limiter::TollgateNoHeaders
        | Limiter::TollgateWrapped
        | Limiter::TollgateParts
        | Limiter::TollgateUsage
        | Limiter::TollgateSettle
        | Limiter::TollgateSuggest
        | Limiter::TollgateCandidate
        | Limiter::TollgateAlso => {
            let headers = match limiter {
                Limiter::TollgateNoHeaders => "none",
                _ => "ietf",
            };
            // With parts, the load generator's requests (Host 127.0.0.1, GET, no
            // x-tenant) are keyed 127.0.0.1/GET/-/client: the rule is found three
            // segments down.
            // And a plan lookup: the rule has limits per plan, every client on the default.
            let (parts, rule, plans) = match limiter {
                Limiter::TollgateParts => (
                    "[key]\nparts = [\"host\", \"method\", \"header:x-tenant\", \"route\", \"client\"]\n\
                     [plans]\ndefault = \"free\"\n",
                    "127.0.0.1/GET/-",
                    format!(
                        ", plans = {{ free = {{ rate = \"{per_second}/s\", burst = {burst} }}, pro = \"1/s\" }}"
                    ),
                ),
                Limiter::TollgateSettle => (
                    "",
                    "/",
                    ", cost = { reserve = 2, from = \"header:x-usage\" }".to_owned(),
                ),
                Limiter::TollgateSuggest => ("", "/", ", suggest = true".to_owned()),
                Limiter::TollgateAlso => (
                    "",
                    "/",
                    format!(
                        ", also = {{ everyone = {{ rate = \"{per_second}/s\", burst = {burst}, per = \"global\" }}, \
                         mine = {{ rate = \"{per_second}/s\", burst = {burst} }} }}"
                    ),
                ),
                Limiter::TollgateCandidate => (
                    "",
                    "/",
                    format!(", candidates = [\"{}/s\"]", per_second / 2),
                ),
                _ => ("", "/", String::new()),
            };
            let toml = format!(
                "{parts}[response]\nheaders = \"{headers}\"\n\n\
                 [limits]\n\"{rule}\" = {{ rate = \"{per_second}/s\", burst = {burst}{plans} }}\n"
            );
            let layer = RateLimitLayer::new(Limits::from_toml(&toml)?);
            match limiter {
                Limiter::TollgateWrapped => app.layer(layer),
                _ => app.layer(layer.axum_body()),
            }
        }
        Limiter::TollgateReserve | Limiter::TollgateEstimate => {
            let reserve = match limiter {
                Limiter::TollgateEstimate => "\"estimate\"",
                _ => "1000",
            };
            // A thousand times the quota in tokens: a request costs about a thousand, and
            // none may be refused (a refusal would skip the settlement being measured).
            let (per_second, burst) = (per_second * 1000, burst.saturating_mul(1000));
            let toml = format!(
                "[limits]\n\"/\" = {{ rate = \"{per_second}/s\", burst = {burst}, cost = {{ reserve = {reserve}, \
                 from = \"usage\", max = 20000, weights = {{ input = 1, output = 4 }} }} }}\n"
            );
            let limits = Limits::from_toml(&toml)?;
            app.layer(RateLimitLayer::new(limits.clone()).axum_body())
                .layer(ReadBodyLayer::new(limits).axum_body())
        }
        Limiter::TollgateHeader | Limiter::TollgateApiKey | Limiter::TollgateJwt => {
            let dir = std::env::temp_dir().join(format!("bench_hello.{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");
            std::fs::copy(format!("{fixtures}/jwks.json"), dir.join("jwks.json"))?;
            std::fs::write(
                dir.join("keys.toml"),
                format!(
                    "\"{}\" = {{ id = \"team-a\" }}\n",
                    tollgate::key::ApiKeys::digest_hex(API_KEY.as_bytes())
                ),
            )?;
            let source = match limiter {
                Limiter::TollgateHeader => "header:x-api-key",
                Limiter::TollgateApiKey => "api_key",
                _ => "jwt:sub",
            };
            let main = dir.join("limits.toml");
            std::fs::write(
                &main,
                format!(
                    "[client]\nsources = [\"{source}\", \"ip\"]\n\
                     [identity.api_keys]\nmembers = [\"keys.toml\"]\n\
                     [identity.jwt]\njwks_file = \"jwks.json\"\n\
                     [limits]\n\"/\" = {{ rate = \"{per_second}/s\", burst = {burst} }}\n"
                ),
            )?;
            app.layer(RateLimitLayer::new(Limits::load([&main])?).axum_body())
        }
        Limiter::TollgateStacked => {
            let layer = |per: &str| -> Result<_, Box<dyn std::error::Error>> {
                let toml = format!(
                    "[limits]\n\"/\" = {{ rate = \"{per_second}/s\", burst = {burst}, per = \"{per}\" }}\n"
                );
                Ok(RateLimitLayer::new(Limits::from_toml(&toml)?).axum_body())
            };
            app.layer(layer("global")?)
                .layer(layer("client")?)
                .layer(layer("client")?)
        }
        Limiter::Governor => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1_000_000_000 / per_second)
                .burst_size(burst)
                .finish()
                .ok_or("tower_governor refused the quota")?;
            app.layer(GovernorLayer::new(config))
        }
        Limiter::GovernorHeaders => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1_000_000_000 / per_second)
                .burst_size(burst)
                .use_headers()
                .finish()
                .ok_or("tower_governor refused the quota")?;
            app.layer(GovernorLayer::new(config))
        }
    })
}

async fn serve(
    limiter: Limiter,
    quota: QuotaKind,
    listen: SocketAddr,
) -> Result<(), Box<dyn std::error::Error>> {
    let app = app(limiter, quota)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("bench_hello: serving on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
    .await?;
    Ok(())
}

/// One keep-alive connection sending `requests` requests one after another.
async fn connection(
    target: SocketAddr,
    requests: u64,
    chat: Option<Bytes>,
    auth: Option<(http::HeaderName, http::HeaderValue)>,
) -> Result<BTreeMap<u16, u64>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::TcpStream::connect(target).await?;
    stream.set_nodelay(true)?;
    let (mut sender, driver) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(driver);
    let mut statuses = BTreeMap::new();
    for _ in 0..requests {
        sender.ready().await?;
        let mut request = match &chat {
            Some(body) => http::Request::post("/")
                .header(http::header::HOST, target.to_string())
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(body.clone()))?,
            None => http::Request::get("/")
                .header(http::header::HOST, target.to_string())
                .body(Full::new(Bytes::new()))?,
        };
        if let Some((name, value)) = &auth {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let response = sender.send_request(request).await?;
        *statuses.entry(response.status().as_u16()).or_insert(0) += 1;
        response.into_body().collect().await?;
    }
    Ok(statuses)
}

async fn load(
    target: SocketAddr,
    requests: u64,
    connections: u64,
    chat: bool,
    auth: Option<String>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let chat = chat.then(chat_body);
    let auth = match auth.as_deref() {
        None => None,
        Some("api-key") => Some((
            http::HeaderName::from_static("x-api-key"),
            http::HeaderValue::from_static(API_KEY),
        )),
        Some("rs256") => Some((
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(&format!("Bearer {}", rs256_token()?))?,
        )),
        Some(other) => return Err(format!("unknown --auth {other} (api-key or rs256)").into()),
    };
    let connections = connections.clamp(1, requests.max(1));
    let mut tasks = Vec::new();
    for index in 0..connections {
        // Spread the remainder so the total is exactly `requests`.
        let share = requests / connections + u64::from(index < requests % connections);
        tasks.push(tokio::spawn(connection(
            target,
            share,
            chat.clone(),
            auth.clone(),
        )));
    }
    let mut statuses = BTreeMap::new();
    for task in tasks {
        for (status, count) in task.await?? {
            *statuses.entry(status).or_insert(0) += count;
        }
    }
    let summary: Vec<String> = statuses
        .iter()
        .map(|(status, count)| format!("{status}={count}"))
        .collect();
    eprintln!("bench_hello: {requests} requests: {}", summary.join(" "));
    Ok(())
}

/// The API key `--auth api-key` sends (and the `tollgate-api-key` table knows).
const API_KEY: &str = "tg_live_bench_000042";

/// A bearer token for "user-42" signed with the test RSA key (`tests/fixtures/jwt`).
fn rs256_token() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let der = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt/rs256.der"
    ))?;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("rsa-1".to_owned());
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        + 3600;
    Ok(jsonwebtoken::encode(
        &header,
        &serde_json::json!({ "sub": "user-42", "exp": exp }),
        &jsonwebtoken::EncodingKey::from_rsa_der(&der),
    )?)
}

/// A 2 KiB OpenAI Chat Completions body: a system prompt, a user turn and `max_tokens`.
fn chat_body() -> Bytes {
    let words = "the quick brown fox jumps over the lazy dog ".repeat(44);
    Bytes::from(format!(
        r#"{{"model":"gpt-4o","max_tokens":100,"messages":[{{"role":"system","content":"You answer briefly."}},{{"role":"user","content":"{words}"}}]}}"#
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
    match args.command {
        Command::Serve {
            limiter,
            quota,
            listen,
            idle_thread,
        } => {
            if idle_thread {
                std::thread::spawn(|| {
                    loop {
                        std::thread::park();
                    }
                });
            }
            // One thread: the instruction counts then hold no cross-thread wake-ups, and
            // wrk's throughput is per core, like the gateway benchmark's.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime
                .block_on(serve(limiter, quota, listen))
                .map_err(|error| error.to_string().into())
        }
        Command::Load {
            target,
            requests,
            connections,
            chat,
            auth,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(600),
                    load(target, requests, connections, chat, auth),
                )
                .await
                .map_err(|_| "load did not finish within 600 s")?
            })
        }
    }
}
