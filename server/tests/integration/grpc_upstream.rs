//! gRPC services behind the proxy (`upstream_protocol = "http2"`), called by a tonic client:
//! client-streaming and bidirectional calls stream through both ways at once, each call one
//! request to the limits; an upstream whose trailers are malformed fails the call for the
//! client (never read as success), is counted, and frees the call's concurrency slot.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use futures_util::StreamExt as _;
use http::uri::PathAndQuery;
use http_body_util::{BodyExt as _, BodyStream, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{get, start_gateway};

/// The message both calls carry.
#[derive(Clone, PartialEq, prost::Message)]
struct Note {
    #[prost(string, tag = "1")]
    text: String,
}

type Codec = tonic_prost::ProstCodec<Note, Note>;

/// A gRPC message frame: uncompressed, its length, its bytes.
fn grpc_frame(note: &Note) -> Bytes {
    let encoded = prost::Message::encode_to_vec(note);
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&encoded);
    Bytes::from(frame)
}

fn grpc_ok() -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    trailers
}

/// A gRPC server over h2c (hyper's HTTP/2) with two methods: `/echo.Echo/Chat` sends back
/// each message as it arrives (bidirectional), `/echo.Echo/Collect` answers once the client
/// is done, with how many messages it sent (client streaming).
async fn grpc_echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(
                |request: http::Request<hyper::body::Incoming>| async move {
                    let chat = request.uri().path() == "/echo.Echo/Chat";
                    let body = request.into_body();
                    let frames: futures_util::stream::BoxStream<
                        'static,
                        Result<Frame<Bytes>, hyper::Error>,
                    > = if chat {
                        BodyStream::new(body)
                            .filter_map(|frame| async move {
                                match frame {
                                    Ok(frame) => frame.into_data().ok().map(|d| Ok(Frame::data(d))),
                                    Err(error) => Some(Err(error)),
                                }
                            })
                            .chain(futures_util::stream::once(async {
                                Ok(Frame::trailers(grpc_ok()))
                            }))
                            .boxed()
                    } else {
                        let mut all = body.collect().await?.to_bytes();
                        let mut count = 0;
                        while all.len() >= 5 {
                            all.advance(1);
                            let length = all.get_u32() as usize;
                            all.advance(length.min(all.len()));
                            count += 1;
                        }
                        let answer = grpc_frame(&Note {
                            text: format!("{count} notes"),
                        });
                        futures_util::stream::iter([
                            Ok(Frame::data(answer)),
                            Ok(Frame::trailers(grpc_ok())),
                        ])
                        .boxed()
                    };
                    let mut response = http::Response::new(StreamBody::new(frames));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/grpc"),
                    );
                    Ok::<_, hyper::Error>(response)
                },
            );
            tokio::spawn(async move {
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    address
}

/// A gateway proxying to `upstream` over HTTP/2 with `rules`.
async fn gateway_before(upstream: SocketAddr, rules: &str) -> crate::support::RunningGateway {
    start_gateway(rules, |o| {
        o.upstream = Some(format!("http://{upstream}").parse().unwrap());
        o.upstream_protocol = Some(tollgate_server::UpstreamProtocol::Http2);
    })
    .await
}

async fn client(proxy: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{proxy}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_calls_stream_both_ways_through_the_proxy_and_each_is_one_request() {
    let upstream = grpc_echo_server().await;
    let running = gateway_before(upstream, "[limits]\n\"echo.Echo\" = \"2/min\"\n").await;
    let mut grpc = client(running.gateway.listen_addr()).await;

    // Bidirectional: each reply arrives before the next message is sent, so neither
    // direction is buffered whole by the proxy.
    let (send, receive) = tokio::sync::mpsc::channel::<Note>(1);
    let outgoing = futures_util::stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|note| (note, receive))
    });
    send.send(Note { text: "one".into() }).await.unwrap();
    grpc.ready().await.unwrap();
    let mut replies = grpc
        .streaming(
            tonic::Request::new(outgoing),
            PathAndQuery::from_static("/echo.Echo/Chat"),
            Codec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    for text in ["one", "two", "three"] {
        if text != "one" {
            send.send(Note { text: text.into() }).await.unwrap();
        }
        let reply = tokio::time::timeout(Duration::from_secs(5), replies.message())
            .await
            .expect("a reply while the call is still open")
            .unwrap()
            .unwrap();
        assert_eq!(reply.text, text);
    }
    drop(send);
    // The client's end closes the call; the upstream's grpc-status 0 ends it cleanly.
    assert_eq!(replies.message().await.unwrap(), None);

    // Client streaming: many messages, one answer.
    let notes = (0..50).map(|n| Note {
        text: format!("note {n}"),
    });
    grpc.ready().await.unwrap();
    let answer = grpc
        .client_streaming(
            tonic::Request::new(futures_util::stream::iter(notes)),
            PathAndQuery::from_static("/echo.Echo/Collect"),
            Codec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.text, "50 notes");

    // Two calls were two requests: the third is refused, as gRPC.
    grpc.ready().await.unwrap();
    let refused = grpc
        .client_streaming(
            tonic::Request::new(futures_util::stream::iter([Note::default()])),
            PathAndQuery::from_static("/echo.Echo/Collect"),
            Codec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
}

/// Writes one HTTP/2 frame.
async fn frame(stream: &mut TcpStream, kind: u8, flags: u8, id: u32, payload: &[u8]) {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![length[1], length[2], length[3], kind, flags];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(payload);
    stream.write_all(&bytes).await.unwrap();
}

/// An HPACK literal header field, not indexed, its name and value as they are.
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    block.push(u8::try_from(name.len()).unwrap());
    block.extend_from_slice(name.as_bytes());
    block.push(u8::try_from(value.len()).unwrap());
    block.extend_from_slice(value.as_bytes());
}

/// An h2c server written frame by frame that answers every call with a response head, one
/// message, then trailers that are malformed: a HEADERS frame after the data that does not
/// end the stream (RFC 9113 §8.1: trailers must carry END_STREAM).
async fn malformed_trailers_server() -> SocketAddr {
    const HEADERS: u8 = 0x1;
    const SETTINGS: u8 = 0x4;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if stream.read_exact(&mut preface).await.is_err() {
                    return;
                }
                frame(&mut stream, SETTINGS, 0, 0, &[]).await;
                loop {
                    let mut head = [0u8; 9];
                    if stream.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    let length = usize::from(head[0]) << 16
                        | usize::from(head[1]) << 8
                        | usize::from(head[2]);
                    let (kind, flags) = (head[3], head[4]);
                    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    let mut payload = vec![0u8; length];
                    if stream.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    if kind == SETTINGS && flags & 0x1 == 0 {
                        frame(&mut stream, SETTINGS, 0x1, 0, &[]).await;
                    }
                    if kind == HEADERS {
                        let mut head = vec![0x88]; // :status 200, from the static table
                        literal(&mut head, "content-type", "application/grpc");
                        frame(&mut stream, HEADERS, 0x4, id, &head).await;
                        frame(&mut stream, 0x0, 0, id, &grpc_frame(&Note::default())).await;
                        let mut trailers = Vec::new();
                        literal(&mut trailers, "grpc-status", "0");
                        // END_HEADERS, no END_STREAM.
                        frame(&mut stream, HEADERS, 0x4, id, &trailers).await;
                    }
                }
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_trailers_fail_the_call_are_counted_and_free_the_slot() {
    let upstream = malformed_trailers_server().await;
    let running = gateway_before(
        upstream,
        "[limits]\n\"echo.Echo/Get\" = { rate = \"100/min\", concurrency = 1 }\n",
    )
    .await;
    let admin = running.gateway.admin_addr();
    // The counter is the process's: other tests' failures may add to it meanwhile.
    let broken = || async move {
        let metrics = get(admin, "/metrics", &[]).await.body;
        metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix("tollgate_upstream_errors_total{kind=\"broken\"} ")
                    .map(|count| count.parse::<u64>().unwrap())
            })
            .unwrap_or(0)
    };
    let before = broken().await;
    let mut grpc = client(running.gateway.listen_addr()).await;
    for _ in 0..3 {
        grpc.ready().await.unwrap();
        let failed = tokio::time::timeout(
            Duration::from_secs(10),
            grpc.unary(
                tonic::Request::new(Note::default()),
                PathAndQuery::from_static("/echo.Echo/Get"),
                Codec::default(),
            ),
        )
        .await
        .expect("the call ends")
        .unwrap_err();
        // Never read as success, and each call admitted: the cap's one slot came back.
        assert!(
            !matches!(
                failed.code(),
                tonic::Code::Ok | tonic::Code::ResourceExhausted
            ),
            "{failed:?}"
        );
    }
    assert!(broken().await >= before + 3, "each broken call is counted");
    let metrics = get(admin, "/metrics", &[]).await.body;
    let in_flight = metrics
        .lines()
        .find(|line| line.starts_with("tollgate_in_flight{rule=\"echo.Echo/Get\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(in_flight.ends_with(" 0"), "{in_flight}");
}
