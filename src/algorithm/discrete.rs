//! smyte/ratelimit's bucket: whole refills at whole intervals (the `RL.*` commands).
//!
//! A bucket holds at most `max` tokens. Every `every` nanoseconds after the last refill mark,
//! `refill` tokens are added at once, up to `max`; the mark advances by whole intervals, so
//! refills never drift. A request arriving finds `available` tokens; a consuming one takes
//! `take` of them if there are that many — and if there are not, it still empties the
//! bucket (smyte's `max(available − take, 0)`): a client that asks for more than is left
//! waits for whole refills, as in smyte. `STRICT`: a request that leaves the bucket empty
//! moves the refill mark to now, so a client that keeps asking keeps it empty until it has
//! been quiet for a whole interval. A session (`RL.SESSIONIZE`) starts with a request that
//! found the tokens it asked for; the requests after it that do not belong to it.
//!
//! The state is three words: tokens after the last request, the refill mark, and when the
//! current session started. Times are nanoseconds; callers pass smyte's millisecond times
//! as whole milliseconds, so the arithmetic is smyte's exactly. A request older than the
//! refill mark refills nothing (smyte's `max(0, now − mark)`).

use super::CheckMode;
use crate::decision::Decision;

/// A caller-defined bucket's numbers: at most `max` tokens, `refill` more every `every` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) max: u64,
    pub(crate) refill: u64,
    pub(crate) every: u64,
}

/// The state of a bucket nobody has taken from: full, its refill mark at `now`, its
/// session starting now.
pub(crate) fn fresh(params: &Params, now: u64) -> [u64; 3] {
    [params.max, now, now]
}

/// Decides a request for `take` tokens at `now` against `words` (see [`fresh`]); writes
/// the bucket unless it is a peek or takes nothing (smyte writes only when `take > 0`).
pub(crate) fn decide(
    words: &mut [u64; 3],
    params: &Params,
    take: u64,
    now: u64,
    mode: CheckMode,
    strict: bool,
) -> Decision {
    let [amount, mark, session] = *words;
    let every = params.every.max(1);
    let refills = now.saturating_sub(mark) / every;
    let mark = mark.saturating_add(refills.saturating_mul(every));
    let available = refills
        .saturating_mul(params.refill)
        .saturating_add(amount)
        .min(params.max);
    let allowed = available >= take;
    let writes = mode != CheckMode::Peek && take > 0;
    let (left, mark) = if writes {
        let left = available.saturating_sub(take);
        let mark = if strict && left == 0 { now } else { mark };
        let session = match (mode, allowed) {
            (CheckMode::Session, true) => now,
            _ => session,
        };
        *words = [left, mark, session];
        (left, mark)
    } else {
        (available, mark)
    };
    // Time from now until the bucket, as it stands, holds `tokens`.
    let until = |tokens: u64| -> u64 {
        if left >= tokens {
            return 0;
        }
        if tokens > params.max {
            return u64::MAX;
        }
        let steps = (tokens - left).div_ceil(params.refill.max(1));
        mark.saturating_add(steps.saturating_mul(every))
            .saturating_sub(now)
    };
    let next = if left >= params.max {
        0
    } else {
        mark.saturating_add(every).saturating_sub(now)
    };
    let window = params
        .max
        .div_ceil(params.refill.max(1))
        .saturating_mul(every);
    let session = if mode == CheckMode::Session {
        words[2]
    } else {
        u64::MAX
    };
    let retry = if allowed { 0 } else { until(take) };
    Decision::counted(
        allowed,
        0,
        params.max,
        window,
        left,
        next,
        retry,
        until(params.max),
    )
    .with_refill(available, session)
}

/// Time from `now` until a bucket in state `words` is full again: 0 when it is as good as
/// new (what sweeping needs).
pub(crate) fn refills_in(words: &[u64; 3], params: &Params, now: u64) -> u64 {
    let [amount, mark, _] = *words;
    if amount >= params.max {
        return 0;
    }
    let steps = (params.max - amount).div_ceil(params.refill.max(1));
    mark.saturating_add(steps.saturating_mul(params.every.max(1)))
        .saturating_sub(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    /// smyte's `RL.REDUCE` / `RL.GET`: the tokens the bucket held before this request.
    fn ask(words: &mut [u64; 3], params: &Params, take: u64, at: u64, strict: bool) -> u64 {
        let mode = if take == 0 {
            CheckMode::Peek
        } else {
            CheckMode::Consume
        };
        decide(words, params, take, at, mode, strict)
            .available_before()
            .unwrap()
    }

    #[test]
    fn adjusts_by_whole_refills_from_the_mark() {
        // smyte's AdjustAmount: max 1000, refill 100 every 60 s, 100 left, marked at 2 s.
        let params = Params {
            max: 1000,
            refill: 100,
            every: 60 * S,
        };
        let at = |now: u64| {
            let mut words = [100, 2 * S, 0];
            let available = ask(&mut words, &params, 0, now, false);
            let mut after = words;
            decide(&mut after, &params, 1, now, CheckMode::Consume, false);
            (available, after[1])
        };
        assert_eq!(at(53 * S), (100, 2 * S), "no refill yet");
        assert_eq!(
            at(123 * S),
            (300, 122 * S),
            "two refills, the mark moved by two"
        );
        assert_eq!(
            at(1_312 * S),
            (1000, 1_262 * S),
            "capped at max; the mark still advances"
        );
    }

    #[test]
    fn replays_smytes_get_and_reduce_sequence() {
        // smyte's GetReduceCommands: max 10, refill 3 every 5 s, times in seconds.
        let params = Params {
            max: 10,
            refill: 3,
            every: 5 * S,
        };
        let mut words = fresh(&params, 2 * S);
        let steps: [(u64, u64, bool, u64); 15] = [
            // (take, at seconds, strict, reply)
            (1, 2, false, 10),
            (1, 2, false, 9),
            (0, 2, false, 8),
            (0, 2, false, 8),
            (5, 2, false, 8),
            (5, 2, false, 3), // 3 left, 5 asked: refused, and the bucket is emptied
            (0, 2, false, 0),
            (0, 8, false, 3), // one refill
            (2, 8, false, 3),
            (1, 8, false, 1),
            (1, 9, false, 0),
            (0, 13, false, 3), // refilled again
            (4, 14, true, 3),  // drained in strict mode: the mark moves to 14
            (4, 16, true, 0),
            (1, 18, true, 0), // 18 < 16 + 5: still nothing in strict mode
        ];
        for (step, (take, at, strict, reply)) in steps.into_iter().enumerate() {
            assert_eq!(
                ask(&mut words, &params, take, at * S, strict),
                reply,
                "step {step}"
            );
        }
        assert_eq!(
            ask(&mut words, &params, 2, 23 * S, true),
            3,
            "a whole interval of quiet"
        );
    }

    #[test]
    fn replays_smytes_sessions() {
        // smyte's SessionizeCommands: max 1, refill 1 every 3600 s, always strict.
        let params = Params {
            max: 1,
            refill: 1,
            every: 3_600 * S,
        };
        let mut words = fresh(&params, 0);
        let mut sessionize = |at: u64| {
            let decision = decide(&mut words, &params, 1, at * S, CheckMode::Session, true);
            let started = decision.session_started_at().unwrap().as_unix_nanos() / MS;
            (decision.available_before().unwrap(), started)
        };
        assert_eq!(sessionize(0), (1, 0), "a new session at 0");
        assert_eq!(sessionize(1), (0, 0), "the same session");
        assert_eq!(sessionize(1_000), (0, 0));
        assert_eq!(
            sessionize(3_605),
            (0, 0),
            "strict: no refill while it keeps coming"
        );
        assert_eq!(
            sessionize(7_205),
            (1, 7_205_000),
            "an hour of quiet: a new session"
        );
    }

    #[test]
    fn figures_say_when_to_come_back() {
        let params = Params {
            max: 2,
            refill: 1,
            every: 10 * S,
        };
        let mut words = fresh(&params, 0);
        let first = decide(&mut words, &params, 1, 0, CheckMode::Consume, false);
        assert!(first.allowed());
        assert_eq!((first.remaining(), first.next_token().as_secs()), (1, 10));
        decide(&mut words, &params, 1, S, CheckMode::Consume, false);
        let denied = decide(&mut words, &params, 2, 2 * S, CheckMode::Consume, false);
        assert!(!denied.allowed());
        assert_eq!(
            denied.retry_after().as_secs(),
            18,
            "two refills from the mark at 0"
        );
        assert_eq!(denied.reset().as_secs(), 18);
        let never = decide(&mut words, &params, 3, 2 * S, CheckMode::Peek, false);
        assert_eq!(
            never.retry_after(),
            std::time::Duration::from_nanos(u64::MAX)
        );
        assert_eq!(refills_in(&words, &params, 2 * S), 18 * S);
        assert_eq!(refills_in(&fresh(&params, 0), &params, 0), 0);
    }
}
