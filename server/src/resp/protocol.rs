//! The Redis protocol on the wire: requests (RESP arrays of bulk strings, and inline
//! commands as `redis-cli` and telnet send them) parsed in place from the read buffer, and
//! replies written in RESP2 or RESP3.
//!
//! Parsing never allocates for an argument: a command is a list of byte ranges into the
//! buffer. Every length is checked against [`Bounds`] *before* anything is reserved, so a
//! client announcing a billion arguments, or a gigabyte argument, gets an error and a
//! closed connection, not our memory.

use std::ops::Range;

use bytes::{BufMut, BytesMut};

/// What one request may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Arguments in one command, the command's name included.
    pub(crate) max_args: usize,
    /// Bytes in one argument (and in one inline command line).
    pub(crate) max_arg_bytes: usize,
}

/// What the front of the buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Not a whole command yet: read more.
    Incomplete,
    /// A command of `len` bytes, its arguments (name first) at these ranges of the buffer.
    /// An empty inline line has no arguments: nothing to answer.
    Command { len: usize },
    /// Not the Redis protocol, or beyond the bounds: say why, then close.
    Invalid(&'static str),
}

/// Parses the command at the front of `buffer`, putting its arguments' ranges in `args`.
pub(crate) fn parse(buffer: &[u8], bounds: &Bounds, args: &mut Vec<Range<usize>>) -> Parsed {
    args.clear();
    match buffer.first() {
        None => Parsed::Incomplete,
        Some(b'*') => parse_array(buffer, bounds, args),
        Some(_) => parse_inline(buffer, bounds, args),
    }
}

fn parse_array(buffer: &[u8], bounds: &Bounds, args: &mut Vec<Range<usize>>) -> Parsed {
    let Some((count, mut at)) = header(buffer, 1) else {
        return incomplete_or(buffer, 1, "Protocol error: invalid multibulk length");
    };
    let Ok(count) = usize::try_from(count) else {
        // `*-1`: a null array, which Redis ignores.
        return Parsed::Command { len: at };
    };
    if count > bounds.max_args {
        return Parsed::Invalid("Protocol error: too many arguments in one command");
    }
    for _ in 0..count {
        match buffer.get(at) {
            None => return Parsed::Incomplete,
            Some(b'$') => {}
            Some(_) => return Parsed::Invalid("Protocol error: expected '$', got something else"),
        }
        let Some((length, start)) = header(buffer, at + 1) else {
            return incomplete_or(buffer, at + 1, "Protocol error: invalid bulk length");
        };
        let Some(length) = usize::try_from(length)
            .ok()
            .filter(|&l| l <= bounds.max_arg_bytes)
        else {
            return Parsed::Invalid("Protocol error: invalid bulk length");
        };
        let end = start + length;
        match buffer.get(end..end + 2) {
            None => return Parsed::Incomplete,
            Some(b"\r\n") => {}
            Some(_) => return Parsed::Invalid("Protocol error: bulk string not ended by CRLF"),
        }
        args.push(start..end);
        at = end + 2;
    }
    Parsed::Command { len: at }
}

/// `<integer>\r\n` from `from`: the number and where the line after it starts; `None` if
/// the line is not complete or not a number.
fn header(buffer: &[u8], from: usize) -> Option<(i64, usize)> {
    let rest = buffer.get(from..)?;
    let newline = rest.iter().take(24).position(|&b| b == b'\n')?;
    let line = rest.get(..newline)?.strip_suffix(b"\r")?;
    Some((decimal(line)?, from + newline + 1))
}

/// A signed 64-bit decimal (`-` allowed, `+` not, as Redis reads numbers), straight from
/// the bytes.
pub(crate) fn decimal(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut value: i64 = 0;
    for &byte in digits {
        let digit = i64::from(byte.checked_sub(b'0').filter(|d| *d <= 9)?);
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// A header that did not parse: incomplete if its line has not ended yet (and could still
/// be a number), invalid otherwise.
fn incomplete_or(buffer: &[u8], from: usize, why: &'static str) -> Parsed {
    let rest = buffer.get(from..).unwrap_or_default();
    let still_coming = rest.len() < 24
        && !rest.contains(&b'\n')
        && rest
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'\r'));
    if still_coming {
        Parsed::Incomplete
    } else {
        Parsed::Invalid(why)
    }
}

/// A command typed as a line: words separated by spaces, ended by `\n` (or `\r\n`).
fn parse_inline(buffer: &[u8], bounds: &Bounds, args: &mut Vec<Range<usize>>) -> Parsed {
    let Some(newline) = buffer
        .iter()
        .take(bounds.max_arg_bytes + 2)
        .position(|&b| b == b'\n')
    else {
        return if buffer.len() > bounds.max_arg_bytes {
            Parsed::Invalid("Protocol error: too big inline request")
        } else {
            Parsed::Incomplete
        };
    };
    let line = &buffer[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut start = None;
    let ended = line.iter().copied().chain(std::iter::once(b' '));
    for (index, byte) in ended.enumerate() {
        match (byte.is_ascii_whitespace(), start) {
            (true, Some(from)) => {
                if args.len() == bounds.max_args {
                    return Parsed::Invalid("Protocol error: too many arguments in one command");
                }
                args.push(from..index);
                start = None;
            }
            (false, None) => start = Some(index),
            _ => {}
        }
    }
    Parsed::Command { len: newline + 1 }
}

/// Writes replies in the protocol the connection speaks (RESP3 after `HELLO 3`).
pub(crate) struct Reply<'a> {
    out: &'a mut BytesMut,
    resp3: bool,
}

impl<'a> Reply<'a> {
    pub(crate) fn new(out: &'a mut BytesMut, resp3: bool) -> Reply<'a> {
        Reply { out, resp3 }
    }

    /// The buffer the replies go to (to switch protocols mid-reply, as `HELLO 3` does).
    pub(crate) fn out(&mut self) -> &mut BytesMut {
        self.out
    }

    /// `+text`
    pub(crate) fn simple(&mut self, text: &str) {
        self.line(b'+', text.as_bytes());
    }

    /// `-text`: the first word is the error's kind (`ERR`, `WRONGPASS`, …).
    pub(crate) fn error(&mut self, text: &str) {
        // An error is one line: a client's bytes quoted in it must not break the framing.
        let clean: String = text
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .collect();
        self.line(b'-', clean.as_bytes());
    }

    /// `:n`
    pub(crate) fn integer(&mut self, n: i64) {
        let mut digits = itoa::Buffer::new();
        self.line(b':', digits.format(n).as_bytes());
    }

    /// `$len\r\nbytes\r\n`
    pub(crate) fn bulk(&mut self, bytes: &[u8]) {
        self.header(b'$', bytes.len());
        self.out.put_slice(bytes);
        self.out.put_slice(b"\r\n");
    }

    /// The null reply: `_` in RESP3, a null bulk string in RESP2.
    pub(crate) fn null(&mut self) {
        self.out
            .put_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// An array of `len` items; the items follow.
    pub(crate) fn array(&mut self, len: usize) {
        self.header(b'*', len);
    }

    /// A map of `len` pairs (RESP3), or an array of `2 × len` items (RESP2); the keys and
    /// values follow, alternating.
    pub(crate) fn map(&mut self, len: usize) {
        if self.resp3 {
            self.header(b'%', len);
        } else {
            self.header(b'*', 2 * len);
        }
    }

    fn header(&mut self, kind: u8, len: usize) {
        let mut digits = itoa::Buffer::new();
        self.line(kind, digits.format(len).as_bytes());
    }

    fn line(&mut self, kind: u8, text: &[u8]) {
        self.out.reserve(text.len() + 3);
        self.out.put_u8(kind);
        self.out.put_slice(text);
        self.out.put_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        max_args: 8,
        max_arg_bytes: 16,
    };

    fn words(input: &[u8]) -> Result<(Vec<String>, usize), Parsed> {
        let mut args = Vec::new();
        match parse(input, &BOUNDS, &mut args) {
            Parsed::Command { len } => Ok((
                args.iter()
                    .map(|r| String::from_utf8_lossy(&input[r.clone()]).into_owned())
                    .collect(),
                len,
            )),
            other => Err(other),
        }
    }

    #[test]
    fn arrays_of_bulk_strings_parse_in_place_and_wait_for_the_rest() {
        let request = b"*3\r\n$9\r\nRL.REDUCE\r\n$3\r\nkey\r\n$0\r\n\r\n*1\r\n";
        let (args, len) = words(request).unwrap();
        assert_eq!(args, ["RL.REDUCE", "key", ""]);
        assert_eq!(
            &request[len..],
            b"*1\r\n",
            "the next command is left for later"
        );
        for cut in 0..len {
            assert_eq!(
                words(&request[..cut]),
                Err(Parsed::Incomplete),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn inline_commands_are_words_on_a_line() {
        assert_eq!(words(b"PING\r\n").unwrap().0, ["PING"]);
        assert_eq!(
            words(b"  rl.get  a 1 2\n").unwrap().0,
            ["rl.get", "a", "1", "2"]
        );
        assert_eq!(
            words(b"\r\n").unwrap(),
            (vec![], 2),
            "an empty line: nothing to do"
        );
        assert_eq!(words(b"PIN"), Err(Parsed::Incomplete));
    }

    #[test]
    fn bounds_are_checked_before_anything_is_reserved() {
        for hostile in [
            &b"*1000000000\r\n"[..],
            b"*1\r\n$1000000000\r\n",
            b"*1\r\n$-5\r\n",
            b"*x\r\n",
            b"*1\r\n:5\r\n",
            b"*1\r\n$3\r\nabcXY",
            b"GET / HTTP/1.1 with far too many words in it\r\n",
            b"*99999999999999999999999999999\r\n",
        ] {
            assert!(
                matches!(words(hostile), Err(Parsed::Invalid(_))),
                "{hostile:?}"
            );
        }
        let long_line = vec![b'a'; 100];
        assert!(matches!(words(&long_line), Err(Parsed::Invalid(_))));
    }

    #[test]
    fn replies_speak_both_protocols() {
        let mut out = BytesMut::new();
        let mut reply = Reply::new(&mut out, false);
        reply.map(1);
        reply.bulk(b"proto");
        reply.integer(-2);
        reply.null();
        reply.error("ERR bad\r\nthing");
        assert_eq!(
            &out[..],
            b"*2\r\n$5\r\nproto\r\n:-2\r\n$-1\r\n-ERR bad  thing\r\n"
        );
        let mut out = BytesMut::new();
        let mut reply = Reply::new(&mut out, true);
        reply.map(1);
        reply.simple("OK");
        reply.null();
        assert_eq!(&out[..], b"%1\r\n+OK\r\n_\r\n");
    }

    #[test]
    fn decimals_read_as_redis_reads_them() {
        for (text, expected) in [
            ("0", Some(0)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("+1", None),
            ("", None),
            ("-", None),
            ("1 ", None),
            ("1e3", None),
        ] {
            assert_eq!(decimal(text.as_bytes()), expected, "{text:?}");
            assert_eq!(
                decimal(text.as_bytes()),
                text.parse().ok().filter(|_| !text.starts_with('+')),
                "agrees with std on {text:?}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever arrives, parsing answers without panicking, and a command it accepts
        /// lies within the bytes it was given.
        #[test]
        fn any_bytes_parse_without_panic(input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut args = Vec::new();
            if let Parsed::Command { len } = parse(&input, &BOUNDS, &mut args) {
                proptest::prop_assert!(len <= input.len());
                proptest::prop_assert!(args.iter().all(|r| r.end <= len));
            }
        }
    }
}
