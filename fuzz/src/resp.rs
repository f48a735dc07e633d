//! The Redis-protocol front end (`tollgate_server::resp`): a whole connection's bytes —
//! RESP arrays, inline commands, pipelined, in any cut — through the parser and the
//! dispatch, against in-memory limits on a fake clock. Anyone who can open the port writes
//! these bytes.
//!
//! Not part of the fuzz crate's library: the service crate's tests replay it
//! (`server/tests/fuzz_corpus.rs`), and the `resp` target includes it by path.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::Limits;
use tollgate::clock::FakeClock;
use tollgate_server::resp::{RespOptions, serve_stream};

/// The rules the connection's commands decide against.
const RULES: &str = r#"
[limits]
"/" = "100/s"
login = "5/min"
api = { rate = "10/s", burst = 20 }
"api/search" = { rate = "2/s", algorithm = "sliding-window" }
"#;

/// The bounds the fuzzed connection runs under: small, so that inputs reach them.
const MAX_ARGS: usize = 16;
const MAX_ARG_BYTES: usize = 256;

fn options() -> RespOptions {
    let mut options = RespOptions::default();
    options.max_args = MAX_ARGS;
    options.max_arg_bytes = MAX_ARG_BYTES;
    options.max_command_bytes = 64 * 1024;
    options.max_output_bytes = 4 * 1024;
    options.idle_timeout = Duration::from_secs(5);
    options
}

/// What the server answers `input`, written in pieces of `piece` bytes (each let through
/// before the next, so the server reads partial commands), on fresh limits at a fixed time.
fn answers(input: &[u8], piece: usize) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let limits = Limits::builder()
        .clock(FakeClock::new())
        .from_toml(RULES)
        .expect("the target's rules compile");
    runtime.block_on(async {
        let (client, server) = tokio::io::duplex(16 * 1024);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let writing = async {
            for chunk in input.chunks(piece.max(1)) {
                if to_server.write_all(chunk).await.is_err() {
                    return; // the server closed: the rest is never read
                }
                tokio::task::yield_now().await;
            }
            let _ = to_server.shutdown().await;
        };
        let reading = async {
            let mut answers = Vec::new();
            let _ = from_server.read_to_end(&mut answers).await;
            answers
        };
        let ((), (), answers) =
            tokio::join!(serve_stream(limits, server, options()), writing, reading);
        answers
    })
}

/// One RESP2/RESP3 value at the front of `bytes`: its length, or `None` if it is not one.
fn value(bytes: &[u8], depth: usize) -> Option<usize> {
    if depth > 8 {
        return None;
    }
    let end = bytes.windows(2).position(|w| w == b"\r\n")?;
    let (kind, line) = (*bytes.first()?, bytes.get(1..end)?);
    let after = end + 2;
    let number = |line: &[u8]| -> Option<i64> { std::str::from_utf8(line).ok()?.parse().ok() };
    match kind {
        // Simple string, error, integer, null, double, boolean, big number: one line, and
        // the line holds no CR or LF.
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
            if line.contains(&b'\r') || line.contains(&b'\n') {
                return None;
            }
            if kind == b':' {
                number(line)?;
            }
            Some(after)
        }
        // Bulk string, verbatim string, bulk error: a length, the bytes, CRLF.
        b'$' | b'=' | b'!' => {
            let len = number(line)?;
            if len == -1 && kind == b'$' {
                return Some(after);
            }
            let len = usize::try_from(len).ok()?;
            (bytes.get(after + len..after + len + 2)? == b"\r\n").then_some(after + len + 2)
        }
        // Array, set, push (items); map, attribute (pairs).
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = number(line)?;
            if count == -1 && kind == b'*' {
                return Some(after);
            }
            let items =
                usize::try_from(count).ok()? * if matches!(kind, b'%' | b'|') { 2 } else { 1 };
            let mut at = after;
            for _ in 0..items {
                at += value(bytes.get(at..)?, depth + 1)?;
            }
            Some(at)
        }
        _ => None,
    }
}

/// How many whole values `answers` holds; panics if they are not all whole values.
fn replies(answers: &[u8]) -> usize {
    let mut at = 0;
    let mut count = 0;
    while at < answers.len() {
        let Some(len) = value(&answers[at..], 0) else {
            panic!(
                "not a RESP reply at byte {at}: {:?}",
                String::from_utf8_lossy(&answers[at..answers.len().min(at + 80)])
            );
        };
        at += len;
        count += 1;
    }
    count
}

/// A signed decimal as the protocol writes lengths: `-` allowed, `+` not, at most 19
/// digits (so the line ends within the 24 bytes a header may take).
fn decimal(line: &[u8]) -> Option<i64> {
    let digits = line.strip_prefix(b"-").unwrap_or(line);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(line).ok()?.parse().ok()
}

/// The commands in `input`, read independently of the server, when every byte of it is
/// a whole command well inside the bounds; `None` otherwise (then nothing is compared).
fn commands(input: &[u8]) -> Option<Vec<Vec<&[u8]>>> {
    let mut commands = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let rest = &input[at..];
        let line_end = rest.windows(2).position(|w| w == b"\r\n");
        if rest[0] == b'*' {
            let end = line_end?;
            let count = usize::try_from(decimal(&rest[1..end])?).ok()?;
            if count == 0 || count > MAX_ARGS {
                return None;
            }
            let mut args = Vec::with_capacity(count);
            let mut here = end + 2;
            for _ in 0..count {
                let arg = rest.get(here..)?;
                if arg.first() != Some(&b'$') {
                    return None;
                }
                let end = arg.windows(2).position(|w| w == b"\r\n")?;
                let len = usize::try_from(decimal(&arg[1..end])?).ok()?;
                if len > MAX_ARG_BYTES {
                    return None;
                }
                let start = end + 2;
                if arg.get(start + len..start + len + 2)? != b"\r\n" {
                    return None;
                }
                args.push(&arg[start..start + len]);
                here += start + len + 2;
            }
            commands.push(args);
            at += here;
        } else {
            let newline = rest.iter().position(|&b| b == b'\n')?;
            if newline + 1 >= MAX_ARG_BYTES {
                return None;
            }
            let line = &rest[..newline];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let words: Vec<&[u8]> = line
                .split(u8::is_ascii_whitespace)
                .filter(|word| !word.is_empty())
                .collect();
            if words.len() > MAX_ARGS {
                return None;
            }
            if !words.is_empty() {
                commands.push(words);
            }
            at += newline + 1;
        }
    }
    Some(commands)
}

/// `commands` written again as RESP arrays, with lengths written plainly.
fn canonical(commands: &[Vec<&[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    for args in commands {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// `resp`: a connection's bytes. Never panics, within the time and memory bounds; every
/// answer is a whole RESP value (no client byte breaks the framing); the answers do not
/// depend on how the bytes were cut into reads; and the commands, parsed then written
/// again as plain RESP arrays, get the same answers byte for byte.
///
/// The first byte is the size of the pieces the rest is sent in.
pub fn resp(data: &[u8]) {
    let Some((&piece, input)) = data.split_first() else {
        return;
    };
    let whole = answers(input, input.len());
    replies(&whole);
    let cut = answers(input, usize::from(piece % 32) + 1);
    assert_eq!(
        String::from_utf8_lossy(&whole),
        String::from_utf8_lossy(&cut),
        "the answers depend on how the bytes were cut"
    );
    if let Some(commands) = commands(input) {
        let again = answers(&canonical(&commands), usize::MAX);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&again),
            "the commands written as plain arrays get other answers"
        );
    }
}
