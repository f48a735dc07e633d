//! One connection: read what arrives, run every whole command in it, answer in order,
//! write the answers out in one go — pipelining for free. Bounded throughout: an idle or
//! unreading client is closed after the idle timeout, a command larger than the bounds is
//! an error and a close, and replies are written out whenever they reach
//! `max_output_bytes`, so a client that sends without reading waits for its own replies
//! instead of growing our memory.

use std::ops::Range;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::commands;
use super::protocol::{self, Parsed, Reply};
use super::state::Shared;
use tollgate::store::Store;

/// Serves one client until it quits, goes quiet, breaks the protocol or hangs up.
pub(super) async fn serve<St: Store, S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    shared: &Shared<St>,
) {
    let idle = shared.options.idle_timeout;
    let mut session = shared.session();
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    let mut ranges: Vec<Range<usize>> = Vec::with_capacity(16);
    loop {
        match tokio::time::timeout(idle, stream.read_buf(&mut input)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(_)) => {}
        }
        loop {
            match protocol::parse(&input, &shared.bounds, &mut ranges) {
                Parsed::Incomplete => {
                    if input.len() > shared.options.max_command_bytes {
                        Reply::new(&mut output, session.resp3)
                            .error("ERR Protocol error: command too large");
                        let _ = write(&mut stream, &mut output, idle).await;
                        return;
                    }
                    break;
                }
                Parsed::Invalid(why) => {
                    Reply::new(&mut output, session.resp3).error(&format!("ERR {why}"));
                    let _ = write(&mut stream, &mut output, idle).await;
                    return;
                }
                Parsed::Command { len } => {
                    {
                        // The arguments, as slices of the buffer: on the stack for the
                        // commands clients send, in a vector for the rare long one.
                        let mut stack: [&[u8]; 16] = [&[]; 16];
                        let spill: Vec<&[u8]>;
                        let args: &[&[u8]] = if ranges.len() <= stack.len() {
                            for (slot, range) in stack.iter_mut().zip(&ranges) {
                                *slot = input.get(range.clone()).unwrap_or_default();
                            }
                            &stack[..ranges.len()]
                        } else {
                            spill = ranges
                                .iter()
                                .map(|r| input.get(r.clone()).unwrap_or_default())
                                .collect();
                            &spill
                        };
                        if cross_protocol(args) {
                            tracing::warn!(
                                "RESP listener: an HTTP request (POST or Host:) on the port; closed"
                            );
                            // The commands before it are answered, however the bytes
                            // arrived: as if each had come in a read of its own.
                            let _ = write(&mut stream, &mut output, idle).await;
                            return;
                        }
                        commands::execute(shared, &mut session, args, &mut output).await;
                    }
                    input.advance(len);
                    if session.closing {
                        let _ = write(&mut stream, &mut output, idle).await;
                        return;
                    }
                    if output.len() >= shared.options.max_output_bytes
                        && write(&mut stream, &mut output, idle).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
        if write(&mut stream, &mut output, idle).await.is_err() {
            return;
        }
    }
}

/// Writes out what is buffered, within `limit`.
async fn write(
    stream: &mut (impl AsyncWrite + Unpin),
    output: &mut BytesMut,
    limit: Duration,
) -> Result<(), ()> {
    if output.is_empty() {
        return Ok(());
    }
    let written = tokio::time::timeout(limit, stream.write_all(output)).await;
    output.clear();
    match written {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// What Redis closes the connection on: the start of an HTTP request, which a browser can
/// be made to send to a local port (cross-protocol scripting).
fn cross_protocol(args: &[&[u8]]) -> bool {
    args.first().is_some_and(|name| {
        name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
    })
}
