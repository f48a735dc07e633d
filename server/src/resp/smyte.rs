//! smyte/ratelimit's commands, with its semantics (its `RateLimitHandler`, its tests, its
//! README): `RL.REDUCE`, `RL.GET`, `RL.SESSIONIZE` in seconds and `RL.PREDUCE`, `RL.PGET`,
//! `RL.PSESSIONIZE` in milliseconds.
//!
//! ```text
//! RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT timestamp] [STRICT]
//! RL.GET    key max refilltime [REFILL n] [AT timestamp] [STRICT]
//! ```
//!
//! The reply is the tokens the bucket held *before* the request (a reduce was granted if
//! that is at least `TAKE`, default 1); `RL.SESSIONIZE` replies `[tokens, session start in
//! milliseconds]` and is always strict. `REFILL` defaults to `max`; `AT` replaces the
//! server's clock. Options are case-insensitive and come in any order; a value is read
//! before its option is recognised, as smyte does, so the same input gives the same error:
//! `ERR value is not an integer or out of range` for a value that is not an integer, or a
//! number below its minimum; `ERR syntax error` for an unknown option, an option without
//! its value, or `TAKE` on a `GET`. Beyond smyte: `max` and `REFILL` must fit 32 bits.

use std::time::Duration;

use tollgate::TakeOptions;
use tollgate::clock::Timestamp;

/// `ERR value is not an integer or out of range`, Redis's words.
pub(super) const INVALID_INTEGER: &str = "ERR value is not an integer or out of range";
/// `ERR syntax error`
pub(super) const SYNTAX_ERROR: &str = "ERR syntax error";

/// Which `RL.*` command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Command {
    /// Takes tokens (`REDUCE`, `SESSIONIZE`) or only looks (`GET`).
    pub(super) reduce: bool,
    /// Answers with the session's start too.
    pub(super) session: bool,
    /// Times in milliseconds (`P…`) rather than seconds.
    pub(super) millis: bool,
}

impl Command {
    /// `RL.REDUCE`.
    pub(super) const REDUCE: Command = Command {
        reduce: true,
        session: false,
        millis: false,
    };
    /// `RL.GET`.
    pub(super) const GET: Command = Command {
        reduce: false,
        session: false,
        millis: false,
    };
    /// `RL.SESSIONIZE`.
    pub(super) const SESSIONIZE: Command = Command {
        reduce: true,
        session: true,
        millis: false,
    };

    /// The `P…` form: times in milliseconds.
    pub(super) const fn in_millis(self) -> Command {
        Command {
            millis: true,
            ..self
        }
    }
}

/// A parsed `RL.*` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) max: u32,
    pub(super) refill: u32,
    pub(super) every: Duration,
    pub(super) take: u64,
    pub(super) options: TakeOptions,
}

/// Parses `args` (after the command name: key, max, refill time, options) as smyte does;
/// the error is the reply.
pub(super) fn parse(
    command: Command,
    args: &[&[u8]],
    now: Timestamp,
) -> Result<Request, &'static str> {
    let unit: i64 = if command.millis { 1 } else { 1_000 };
    let max = integer(args.get(1))?;
    // smyte reads the refill time as a 32-bit number of seconds or milliseconds.
    let every =
        i64::from(i32::try_from(integer(args.get(2))?).map_err(|_| INVALID_INTEGER)?) * unit;
    let mut refill = max;
    let mut take = i64::from(command.reduce);
    let mut at_ms: i64 = i64::try_from(now.as_unix_nanos() / 1_000_000).unwrap_or(i64::MAX);
    let mut strict = false;
    let mut i = 3;
    while let Some(option) = args.get(i) {
        if option.eq_ignore_ascii_case(b"strict") {
            strict = true;
            i += 1;
            continue;
        }
        let Some(value) = args.get(i + 1) else {
            return Err(SYNTAX_ERROR);
        };
        let value = integer(Some(value))?;
        i += 2;
        if option.eq_ignore_ascii_case(b"refill") {
            refill = value;
        } else if option.eq_ignore_ascii_case(b"take") {
            if !command.reduce {
                return Err(SYNTAX_ERROR);
            }
            take = value;
        } else if option.eq_ignore_ascii_case(b"at") {
            at_ms = value.checked_mul(unit).ok_or(INVALID_INTEGER)?;
        } else {
            return Err(SYNTAX_ERROR);
        }
    }
    if max < 1 || every < 1 || refill < 1 || take < 0 || at_ms < 0 {
        return Err(INVALID_INTEGER);
    }
    let fits = |n: i64| u32::try_from(n).map_err(|_| INVALID_INTEGER);
    let mut options = TakeOptions::default();
    options.at = Some(Timestamp::from_unix_nanos(
        at_ms.unsigned_abs().saturating_mul(1_000_000),
    ));
    // Sessions are always strict, whatever the command says.
    options.strict = strict || command.session;
    options.session = command.session;
    Ok(Request {
        max: fits(max)?,
        refill: fits(refill)?,
        every: Duration::from_millis(every.unsigned_abs()),
        take: take.unsigned_abs(),
        options,
    })
}

/// A signed 64-bit decimal, as Redis reads one.
pub(super) fn integer(bytes: Option<&&[u8]>) -> Result<i64, &'static str> {
    bytes
        .and_then(|b| super::protocol::decimal(b))
        .ok_or(INVALID_INTEGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_unix_nanos(1_700_000_000_123_456_789);

    fn parsed(line: &str) -> Result<Request, &'static str> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let name = line.split(' ').next().unwrap().to_lowercase();
        let Some((_, spec)) = super::super::table::find(&name) else {
            panic!("{name} is not a command");
        };
        let super::super::table::Handler::Smyte(command) = spec.handler else {
            panic!("{name} is not one of smyte's");
        };
        parse(command, &words[1..], NOW)
    }

    fn at_ms(request: &Request) -> u64 {
        request.options.at.unwrap().as_unix_nanos() / 1_000_000
    }

    #[test]
    fn replays_smytes_argument_cases() {
        // smyte's ParseRateLimitArgsWithOutErrors, case by case.
        let r = parsed("rl.get abc 10 60").unwrap();
        assert_eq!(
            (r.max, r.every, r.refill, r.take),
            (10, Duration::from_secs(60), 10, 0)
        );
        assert_eq!(
            at_ms(&r),
            1_700_000_000_123,
            "the server's time, in whole ms"
        );
        assert!(!r.options.strict);
        let r = parsed("rl.pget abc 10 500").unwrap();
        assert_eq!(
            (r.max, r.every, r.refill, r.take),
            (10, Duration::from_millis(500), 10, 0)
        );
        let r = parsed("rl.reduce abc 10 500 REFILL 5 take 2 at 1005").unwrap();
        assert_eq!(
            (r.every.as_millis(), r.refill, r.take, at_ms(&r)),
            (500_000, 5, 2, 1_005_000)
        );
        let r = parsed("rl.preduce abc 20 500 at 1005 take 2").unwrap();
        assert_eq!(
            (r.max, r.every.as_millis(), r.take, at_ms(&r), r.refill),
            (20, 500, 2, 1_005, 20)
        );
        let r = parsed("rl.get abc 10 700 REFILL 3 at 2005").unwrap();
        assert_eq!(
            (r.every.as_millis(), at_ms(&r), r.refill, r.take),
            (700_000, 2_005_000, 3, 0)
        );
        let r = parsed("rl.pget abc 20 700 at 3005").unwrap();
        assert_eq!(
            (r.every.as_millis(), at_ms(&r), r.refill, r.take),
            (700, 3_005, 20, 0)
        );
        let r = parsed("rl.preduce abc 20 700 STRICT at 3005 REFILL 4").unwrap();
        assert_eq!((r.refill, r.take, r.options.strict), (4, 1, true));
        let r = parsed("rl.preduce abc 20 700000 at 3005000 REFILL 4 TAKE 3 STRICT").unwrap();
        assert_eq!(
            (
                r.every.as_millis(),
                at_ms(&r),
                r.refill,
                r.take,
                r.options.strict
            ),
            (700_000, 3_005_000, 4, 3, true)
        );
    }

    #[test]
    fn replays_smytes_argument_errors() {
        // smyte's ParseRateLimitArgsWithErrors: the same inputs, the same errors.
        assert_eq!(parsed("rl.get abc 10 abc"), Err(INVALID_INTEGER));
        assert_eq!(parsed("rl.pget abc 0 60"), Err(INVALID_INTEGER));
        assert_eq!(
            parsed("rl.reduce abc 10 60 refill strict 1"),
            Err(INVALID_INTEGER)
        );
        assert_eq!(parsed("rl.pget abc 0 60 take 2"), Err(SYNTAX_ERROR));
        assert_eq!(parsed("rl.reduce abc 10 60 refill"), Err(SYNTAX_ERROR));
        assert_eq!(
            parsed("rl.preduce abc 10 60 refill 1 strict abc"),
            Err(SYNTAX_ERROR)
        );
        // And around them.
        assert_eq!(parsed("rl.get abc 10 60 bogus 5"), Err(SYNTAX_ERROR));
        assert_eq!(
            parsed("rl.get abc 10 60 bogus five"),
            Err(INVALID_INTEGER),
            "the value is read first"
        );
        assert_eq!(
            parsed("rl.get abc 10 3000000000"),
            Err(INVALID_INTEGER),
            "refill time is 32-bit"
        );
        assert_eq!(parsed("rl.reduce abc 10 60 take -1"), Err(INVALID_INTEGER));
        assert_eq!(parsed("rl.reduce abc +10 60"), Err(INVALID_INTEGER));
        assert_eq!(
            parsed("rl.reduce abc 10 60 at 9223372036854775807"),
            Err(INVALID_INTEGER)
        );
        assert_eq!(
            parsed("rl.reduce abc 5000000000 60"),
            Err(INVALID_INTEGER),
            "beyond 32 bits"
        );
        assert!(
            parsed("rl.sessionize abc 1 3600 at 0")
                .unwrap()
                .options
                .strict,
            "sessions are strict"
        );
    }
}
