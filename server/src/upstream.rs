//! The proxy's client for a plain-HTTP upstream: HTTP/1.1 connections of its own
//! (`hyper::client::conn::http1`), kept alive in one pool, each driven by the task of the
//! request that is using it.
//!
//! hyper-util's pooled client (which an `https://` upstream still uses) runs every
//! upstream connection on a task of its own, so each request and each chunk of its
//! response crosses tasks — a wake-up and a reschedule each way — and it hashes and
//! compares a pool key on every request. A proxy to one upstream needs neither: here a
//! connection is a [`SendRequest`] and its [`Connection`] future side by side; the
//! request's task polls the connection while it waits for the response head, and the
//! response body ([`UpstreamBody`]) polls it as the client reads. When the body has been
//! read to its end the connection goes back to the pool, idle, polled by no one until the
//! next request takes it (and finds out then, without sending, whether the upstream
//! closed it meanwhile). A body dropped before its end closes its connection: the rest of
//! the response is still on it.
//!
//! The wait for a response head is bounded by a timer each connection keeps: a request
//! moves its deadline later, which tokio does in place, without touching its timer wheel
//! (a timer made and dropped per request went through the wheel twice).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// Idle connections kept at most; more are closed.
const MAX_IDLE: usize = 256;

type Link = Connection<TokioIo<TcpStream>, Body>;

/// A connection to the upstream: the side requests are sent on, and the future that does
/// its I/O.
struct Pooled {
    sender: SendRequest<Body>,
    connection: Pin<Box<Link>>,
    /// When it went idle.
    since: Instant,
    /// The deadline of the request on it, kept from one request to the next.
    deadline: Pin<Box<Sleep>>,
}

impl Pooled {
    /// Polls the connection's I/O; `true` once it has ended (closed, or failed).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        self.connection.as_mut().poll(cx).is_ready()
    }

    /// Whether it can take a request now: its I/O polled once, without a waker to call
    /// (nobody is waiting on an idle connection), and its sender ready.
    fn usable(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        !self.drive(&mut cx) && matches!(self.sender.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }
}

/// Why a request did not get a response from the upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No connection could be made.
    #[error("connecting to {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// No response head within the timeout.
    #[error("no response within {0:?}")]
    TimedOut(Duration),
}

/// Connections to one `host:port`, kept alive.
pub(crate) struct Http1Pool {
    host: String,
    port: u16,
    idle: Mutex<Vec<Pooled>>,
    idle_timeout: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("idle", &self.idle.lock().len())
            .finish()
    }
}

impl Http1Pool {
    /// A pool of connections to `host:port`, closing those idle longer than
    /// `idle_timeout`, waiting at most `timeout` for a response head (connecting
    /// included).
    pub(crate) fn new(
        host: &str,
        port: u16,
        idle_timeout: Duration,
        timeout: Duration,
    ) -> Http1Pool {
        Http1Pool {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            idle: Mutex::new(Vec::new()),
            idle_timeout,
            timeout,
        }
    }

    /// Sends `request` (its URI in origin form, its `Host` set) on a pooled connection, or
    /// a new one, and returns the response head; its body keeps the connection going.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut request: Request<Body>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let (mut pooled, reused) = match self.take() {
                Some(pooled) => (pooled, true),
                None => match tokio::time::timeout_at(deadline, self.connect()).await {
                    Ok(made) => (made?, false),
                    Err(_) => return Err(UpstreamError::TimedOut(self.timeout)),
                },
            };
            pooled.deadline.as_mut().reset(deadline);
            let Pooled {
                sender,
                connection,
                deadline: timer,
                ..
            } = &mut pooled;
            let mut sent = std::pin::pin!(sender.try_send_request(request));
            let mut ended = false;
            let answer = std::future::poll_fn(|cx| {
                if !ended {
                    ended = connection.as_mut().poll(cx).is_ready();
                }
                match sent.as_mut().poll(cx) {
                    Poll::Ready(answer) => Poll::Ready(Some(answer)),
                    Poll::Pending => timer.as_mut().poll(cx).map(|()| None),
                }
            })
            .await;
            match answer {
                // The request is on the connection, unanswered: both go.
                None => return Err(UpstreamError::TimedOut(self.timeout)),
                Some(Ok(response)) => {
                    let (parts, body) = response.into_parts();
                    let body = UpstreamBody {
                        body,
                        finished: false,
                        link: (!ended).then_some((pooled, Arc::clone(self))),
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                Some(Err(mut failed)) => match failed.take_message() {
                    // Not sent: the upstream had closed the idle connection. Once more,
                    // on another.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(UpstreamError::Http(failed.into_error())),
                },
            }
        }
    }

    /// The most recently idle connection still usable.
    fn take(&self) -> Option<Pooled> {
        let mut idle = self.idle.lock();
        while let Some(mut pooled) = idle.pop() {
            if pooled.since.elapsed() >= self.idle_timeout {
                // The newest is too old: so is every one below it.
                idle.clear();
                return None;
            }
            if pooled.usable() {
                return Some(pooled);
            }
        }
        None
    }

    fn put(&self, mut pooled: Pooled) {
        if !pooled.usable() {
            return;
        }
        pooled.since = Instant::now();
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(pooled);
        }
    }

    async fn connect(&self) -> Result<Pooled, UpstreamError> {
        let failed = |source| UpstreamError::Connect {
            address: format!("{}:{}", self.host, self.port),
            source,
        };
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(failed)?;
        stream.set_nodelay(true).map_err(failed)?;
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await?;
        Ok(Pooled {
            sender,
            connection: Box::pin(connection),
            since: Instant::now(),
            deadline: Box::pin(tokio::time::sleep(self.timeout)),
        })
    }
}

/// An upstream response's body: read by the client's side, it drives the upstream
/// connection; read to its end, it puts the connection back in the pool.
pub(crate) struct UpstreamBody {
    body: Incoming,
    /// The body has been read to its end.
    finished: bool,
    /// The connection and its pool; `None` once the connection has ended.
    link: Option<(Pooled, Arc<Http1Pool>)>,
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.body).poll_frame(cx);
        if polled.is_pending() {
            // The body waits on the connection: drive it, then look again.
            if let Some((pooled, _)) = &mut this.link
                && pooled.drive(cx)
            {
                this.link = None;
            }
            polled = Pin::new(&mut this.body).poll_frame(cx);
        }
        match &polled {
            // The message ended: its trailers are its last frame (and hyper, sending them
            // on, drops the body without polling it again).
            Poll::Ready(None) => this.finished = true,
            Poll::Ready(Some(Ok(frame))) if frame.is_trailers() => this.finished = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if let Some((pooled, pool)) = self.link.take()
            && (self.finished || self.body.is_end_stream())
        {
            pool.put(pooled);
        }
    }
}

/// The kinds of `tollgate_upstream_errors_total`.
pub(crate) const UPSTREAM_ERRORS: [&str; 3] = ["timeout", "unavailable", "broken"];

/// Counts one failure to reach or hear the upstream in `tollgate_upstream_errors_total`:
/// `timeout` (no response head in time), `unavailable` (no connection, a refused
/// certificate), `broken` (a response body or its trailers broke off).
pub(crate) fn count_upstream_error(kind: &'static str) {
    metrics::counter!("tollgate_upstream_errors_total", "kind" => kind).increment(1);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An upstream answering every request on a connection with `body`; closes each
    /// connection after one response when `once`. Counts the connections it accepted.
    async fn upstream(body: &'static str, once: bool) -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = stream.read(&mut buffer).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buffer[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if stream.write_all(response.as_bytes()).await.is_err() || once {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    /// A pool to the upstream on `port`, waiting 5 s for a response.
    fn pool_to(port: u16) -> Arc<Http1Pool> {
        Arc::new(Http1Pool::new(
            "127.0.0.1",
            port,
            Duration::from_secs(60),
            Duration::from_secs(5),
        ))
    }

    fn request() -> Request<Body> {
        Request::builder()
            .uri("/")
            .header(http::header::HOST, "upstream")
            .body(Body::empty())
            .unwrap()
    }

    async fn body_of(response: Response<UpstreamBody>) -> Bytes {
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_read_to_its_end_is_used_again() {
        let (port, accepted) = upstream("hello", false).await;
        let pool = pool_to(port);
        for _ in 0..5 {
            let response = pool.send(request()).await.unwrap();
            assert_eq!(body_of(response).await, "hello");
        }
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            1,
            "one kept-alive connection"
        );
    }

    #[tokio::test]
    async fn a_body_dropped_unread_closes_its_connection() {
        let (port, accepted) = upstream("hello", false).await;
        let pool = pool_to(port);
        drop(pool.send(request()).await.unwrap());
        let response = pool.send(request()).await.unwrap();
        assert_eq!(body_of(response).await, "hello");
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            2,
            "the unread one was not reused"
        );
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
        let (port, accepted) = upstream("bye", true).await;
        let pool = pool_to(port);
        for _ in 0..3 {
            let response = pool.send(request()).await.unwrap();
            assert_eq!(body_of(response).await, "bye");
            // The upstream's close reaches this side.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn an_upstream_that_never_answers_times_out_and_its_connection_is_not_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                held.push(stream); // read nothing, answer nothing
            }
        });
        let timeout = Duration::from_millis(200);
        let pool = Arc::new(Http1Pool::new(
            "127.0.0.1",
            port,
            Duration::from_secs(60),
            timeout,
        ));
        for _ in 0..2 {
            let began = Instant::now();
            let failed = pool.send(request()).await.err().unwrap();
            assert!(matches!(failed, UpstreamError::TimedOut(_)), "{failed}");
            assert!(began.elapsed() >= timeout);
        }
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            2,
            "a connection with a request unanswered is never used again"
        );
    }

    #[tokio::test]
    async fn an_upstream_that_is_not_there_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let pool = pool_to(port);
        let failed = pool.send(request()).await.err().unwrap();
        assert!(matches!(failed, UpstreamError::Connect { .. }), "{failed}");
    }
}
