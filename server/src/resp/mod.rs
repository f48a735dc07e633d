//! The Redis-protocol front end: tollgate as a rate-limit *service* any language's Redis
//! client can call, as smyte/ratelimit is ("so we didn't need to change our clients").
//!
//! ```text
//! $ redis-cli -p 9049 RL.REDUCE TwoPerMin 2 60
//! (integer) 2
//! $ redis-cli -p 9049 TG.CHECK login/203.0.113.7
//! 1) (integer) 1
//! 2) (integer) 4
//! 3) (integer) 0
//! 4) (integer) 12000
//! 5) "login"
//! ```
//!
//! - smyte's commands with its semantics (`RL.REDUCE`, `RL.GET`, `RL.SESSIONIZE` and their
//!   millisecond `RL.P…` forms): caller-defined buckets, keyed by the key *and* its numbers,
//!   in the same store as the rules' buckets ([`Limits::take_from`](tollgate::Limits::take_from)).
//! - tollgate's own over the live rules: `TG.CHECK`, `TG.PEEK`, `TG.EXPLAIN`.
//! - RESP2, and RESP3 after `HELLO 3`; pipelining; what clients send on connect.
//! - Bounded: connections, arguments, command and output sizes, idle time
//!   ([`RespOptions`]). Hostile input gets an error and a closed connection.
//!
//! [`serve`] is its entry point, on any listener (the gateway starts it with `--resp`);
//! [`serve_stream`] serves one connection on any byte stream.

mod commands;
mod connection;
mod options;
mod protocol;
mod rules;
mod smyte;
mod state;
mod table;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use options::{DEFAULT_RESP, RespOptions};

use tollgate::Limits;
use tollgate::store::Store;

/// Serves the Redis protocol on `listener` until `shutdown` completes: every connection a
/// task, at most `max_connections` at once. Connections still open at shutdown are closed
/// when their task next waits.
///
/// ```no_run
/// use tollgate::Limits;
/// use tollgate_server::resp::{self, RespOptions};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::watch(["config/gateway.toml"])?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9049").await?;
/// resp::serve(limits, listener, RespOptions::default(), tollgate_server::shutdown_signal()).await;
/// # Ok(()) }
/// ```
pub async fn serve<St: Store>(
    limits: Limits<St>,
    listener: TcpListener,
    options: RespOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let shared = Arc::new(state::Shared::new(limits, options));
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(listener = "resp", %error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            // Reap finished connections as they go, so the set stays small.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tasks.spawn(refuse(stream));
            continue;
        };
        let shared = Arc::clone(&shared);
        tasks.spawn(async move {
            let _ = stream.set_nodelay(true);
            match &shared.options.tls {
                None => connection::serve(stream, &shared).await,
                Some(tls) => {
                    // The handshake holds the slot: a client that never finishes it is
                    // cut at the idle timeout, and counts against the cap meanwhile.
                    if let Ok(stream) = tls.accept(stream, shared.options.idle_timeout).await {
                        connection::serve(stream, &shared).await;
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    tasks.shutdown().await;
}

/// Serves one client on `stream` — any byte stream: a Unix socket, a connection accepted
/// elsewhere, an in-memory pipe — until it quits, goes quiet past `idle_timeout`, breaks
/// the protocol or hangs up. The caller owns the stream, so `max_connections` and `tls` do
/// not apply; everything else in `options` does.
///
/// ```
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use tollgate::Limits;
/// use tollgate_server::resp::{self, RespOptions};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = Limits::from_toml("[limits]\nlogin = \"5/min\"\n")?;
/// let (mut client, server) = tokio::io::duplex(4096);
/// let serving = tokio::spawn(resp::serve_stream(limits, server, RespOptions::default()));
/// client.write_all(b"PING\r\n").await?;
/// client.shutdown().await?;
/// let mut answer = String::new();
/// client.read_to_string(&mut answer).await?;
/// assert_eq!(answer, "+PONG\r\n");
/// serving.await?;
/// # Ok(()) }
/// ```
pub async fn serve_stream<St, S>(limits: Limits<St>, stream: S, options: RespOptions)
where
    St: Store,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let shared = state::Shared::new(limits, options);
    connection::serve(stream, &shared).await;
}

/// Tells a client over the connection cap why, and closes.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        stream.write_all(b"-ERR max number of clients reached\r\n"),
    )
    .await;
}
