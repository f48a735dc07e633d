//! What one bucket remembers, in the general layout: any number of quotas, any algorithm.
//!
//! The state is self-describing: each quota's words are tagged with what measured them
//! (a GCRA interval, or a window's period and kind), so a bucket met after a reload that
//! changed its rule is recognised and its consumption carried over, and the time until it
//! has refilled can be read without the rules (what lossless sweeping needs).

use std::collections::VecDeque;

use crate::Quota;
use crate::algorithm::warmup::{self, Ramp, Warm};
use crate::algorithm::{Algorithm, Ask, CheckMode, discrete, gcra, log, subwindow, window};
use crate::decision::Decision;
use crate::store::CheckRequest;

pub(super) use super::words::{CALENDAR_BIT, FIXED_BIT, SLIDING_BIT, discrete_params};
use super::words::{KIND_BITS, in_rings, pack, tag, unpack, warm_of};

/// A bucket's state, self-describing so a reload that changes its rule can be detected and
/// carried over: each quota's state is tagged with what measured it.
///
/// - `One`: a single GCRA quota, inline: its TAT and its interval (the tag).
/// - `Many`: `n` quotas of any algorithm as three runs of `n` words: `a` (GCRA: TAT;
///   windows: window start), `b` (windows: previous count << 32 | current count), and the
///   tag (GCRA: interval; windows: period with a kind bit).
/// - `Discrete`: a caller-defined bucket (`RL.*`): the engine's three words (tokens,
///   refill mark, session start), then its numbers (max, refill, interval). Boxed, so the
///   other layouts do not grow.
/// - `Log`: a sliding log: its quotas' periods and its timestamps, oldest first.
/// - `Warm`: a warming token bucket (one quota): TAT, stored permits (`f64` bits), then
///   its numbers (interval, warm-up period).
#[derive(Clone)]
pub(super) enum State {
    One { tat: [u64; 1], interval: u64 },
    Many(Box<[u64]>),
    Discrete(Box<[u64; 6]>),
    Log(Box<Log>),
    Warm(Box<[u64; 4]>),
    Ring(Box<Rings>),
}

/// A sliding window counted in sub-windows (`resolution`): what measured each quota
/// (period, resolution), and the quotas' rings one after another (see
/// [`subwindow`](crate::algorithm::subwindow)).
#[derive(Clone, Debug, Default)]
pub(super) struct Rings {
    pub(super) periods: Box<[(u64, u64)]>,
    pub(super) words: Box<[u64]>,
}

impl Rings {
    fn new(quotas: &[Quota]) -> Rings {
        Rings {
            periods: quotas
                .iter()
                .map(|q| {
                    (
                        q.period_nanos(),
                        q.period_nanos() / subwindow::subwindows(q),
                    )
                })
                .collect(),
            words: vec![0; quotas.iter().map(subwindow::ring_words).sum()].into_boxed_slice(),
        }
    }
}

/// A sliding log's state: what measured it, and the timestamps it holds.
#[derive(Clone, Debug, Default)]
pub(super) struct Log {
    pub(super) periods: Box<[u64]>,
    pub(super) entries: VecDeque<u64>,
}

impl Log {
    fn new(quotas: &[Quota]) -> Log {
        Log {
            periods: quotas.iter().map(Quota::period_nanos).collect(),
            entries: VecDeque::new(),
        }
    }
}

impl State {
    /// A bucket never used, for `algorithm` over `quotas` warming up over `warmup` ns (0:
    /// none).
    pub(super) fn fresh(algorithm: Algorithm, quotas: &[Quota], warmup: u64, now: u64) -> State {
        match (algorithm, quotas) {
            (Algorithm::SlidingLog, _) => State::Log(Box::new(Log::new(quotas))),
            _ if in_rings(algorithm, quotas) => State::Ring(Box::new(Rings::new(quotas))),
            (Algorithm::Gcra, [quota]) if warmup > 0 => {
                let ramp = Ramp::new(quota.interval_nanos(), warmup);
                let cold = Warm::fresh(&ramp);
                State::Warm(Box::new([
                    cold.tat,
                    cold.stored.to_bits(),
                    quota.interval_nanos(),
                    warmup,
                ]))
            }
            (Algorithm::DiscreteRefill, _) => {
                let params = discrete_params(quotas);
                let [amount, mark, session] = discrete::fresh(&params, now);
                State::Discrete(Box::new([
                    amount,
                    mark,
                    session,
                    params.max,
                    params.refill,
                    params.every,
                ]))
            }
            (Algorithm::Gcra, [quota]) => State::One {
                tat: [0],
                interval: quota.interval_nanos(),
            },
            _ => {
                let n = quotas.len();
                let mut words = vec![0; 3 * n].into_boxed_slice();
                for (slot, quota) in words[2 * n..].iter_mut().zip(quotas) {
                    *slot = tag(algorithm, quota);
                }
                State::Many(words)
            }
        }
    }

    /// Time until this bucket has refilled completely (0: it is as good as new).
    pub(super) fn refills_in(&self, now: u64) -> u64 {
        if let State::Discrete(words) = self {
            let [amount, mark, session, max, refill, every] = **words;
            let params = discrete::Params { max, refill, every };
            return discrete::refills_in(&[amount, mark, session], &params, now);
        }
        if let State::Log(log) = self {
            let longest = log.periods.iter().copied().max().unwrap_or(0);
            return log.entries.back().map_or(0, |&newest| {
                newest.saturating_add(longest).saturating_sub(now)
            });
        }
        if let State::Ring(rings) = self {
            return subwindow::refills_in(&rings.words, &rings.periods, now);
        }
        if let State::Warm(words) = self {
            let (state, ramp) = warm_of(words);
            let stored = state.stored_at(&ramp, now);
            return state
                .tat
                .saturating_sub(now)
                .saturating_add(ramp.until_cold(stored));
        }
        let (a, b, tags) = self.runs();
        a.iter()
            .zip(b)
            .zip(tags)
            .map(|((&a, &b), &tag)| {
                let mut period = tag & !KIND_BITS;
                if tag & CALENDAR_BIT != 0 {
                    // Longer than any calendar window of this nominal period (a 25-hour
                    // day, a 31-day month with an extra hour): never dropped early.
                    period += period / 4;
                }
                if tag & SLIDING_BIT != 0 {
                    // A window's counts stop mattering two windows after it began.
                    if b == 0 {
                        0
                    } else {
                        a.saturating_add(2 * period).saturating_sub(now)
                    }
                } else if tag & FIXED_BIT != 0 {
                    if b & u64::from(u32::MAX) == 0 {
                        0
                    } else {
                        a.saturating_add(period).saturating_sub(now)
                    }
                } else {
                    a.saturating_sub(now)
                }
            })
            .max()
            .unwrap_or(0)
    }

    /// The first word of each quota (GCRA: its TAT).
    pub(super) fn tats(&mut self) -> &mut [u64] {
        match self {
            State::One { tat, .. } => tat,
            State::Many(words) => {
                let n = words.len() / 3;
                &mut words[..n]
            }
            State::Warm(words) => &mut words[..1],
            State::Discrete(_) | State::Log(_) | State::Ring(_) => &mut [],
        }
    }

    /// The three runs of words: first words (GCRA: TATs), second words (window counts),
    /// tags. A single inline GCRA quota has no second word; it reads as 0.
    pub(super) fn runs(&self) -> (&[u64], &[u64], &[u64]) {
        match self {
            State::One { tat, interval } => (tat, &[0], std::slice::from_ref(interval)),
            State::Many(words) => {
                let n = words.len() / 3;
                (&words[..n], &words[n..2 * n], &words[2 * n..])
            }
            State::Warm(words) => (&words[..1], &[0], &words[2..3]),
            State::Discrete(_) | State::Log(_) | State::Ring(_) => (&[], &[], &[]),
        }
    }

    fn tags(&self) -> &[u64] {
        self.runs().2
    }

    /// Whether this state was measured by exactly `algorithm` over `quotas` warming up
    /// over `warmup` ns. A log fits any log: timestamps mean the same whatever the rates.
    pub(super) fn fits(&self, algorithm: Algorithm, quotas: &[Quota], warmup: u64) -> bool {
        match self {
            State::Discrete(words) => {
                let params = discrete_params(quotas);
                return algorithm == Algorithm::DiscreteRefill
                    && words[3..] == [params.max, params.refill, params.every];
            }
            State::Log(_) => return algorithm == Algorithm::SlidingLog,
            State::Ring(rings) => {
                return in_rings(algorithm, quotas)
                    && *rings.periods == *Rings::new(quotas).periods;
            }
            State::Warm(words) => {
                return algorithm == Algorithm::Gcra
                    && warmup == words[3]
                    && matches!(quotas, [q] if q.interval_nanos() == words[2]);
            }
            State::One { .. } | State::Many(_) => {}
        }
        if algorithm == Algorithm::DiscreteRefill
            || algorithm == Algorithm::SlidingLog
            || (algorithm == Algorithm::Gcra && warmup > 0)
            || in_rings(algorithm, quotas)
        {
            return false;
        }
        let tags = self.tags();
        tags.len() == quotas.len()
            && tags
                .iter()
                .zip(quotas)
                .all(|(&t, q)| t == tag(algorithm, q))
    }

    /// Units used per quota as of `now`, whatever measured them.
    fn used(&self, now: u64) -> Vec<(u64, f64)> {
        if let State::Ring(rings) = self {
            return rings
                .periods
                .iter()
                .map(|&(period, _)| period | SLIDING_BIT)
                .zip(subwindow::used(&rings.words, &rings.periods, now))
                .collect();
        }
        if let State::Log(log) = self {
            return log
                .periods
                .iter()
                .map(|&period| (period, log::inside(&log.entries, period, now) as f64))
                .collect();
        }
        let (a, b, tags) = self.runs();
        a.iter()
            .zip(b)
            .zip(tags)
            .map(|((&a, &b), &tag)| {
                let measure = tag & !KIND_BITS;
                let used = if tag & (SLIDING_BIT | FIXED_BIT) == 0 {
                    a.saturating_sub(now) as f64 / measure.max(1) as f64
                } else {
                    let counter = unpack(a, b);
                    let window = now - now % measure.max(1);
                    if window == counter.start {
                        let weight = if tag & SLIDING_BIT != 0 {
                            (measure - (now - window)) as f64 / measure as f64
                        } else {
                            0.0
                        };
                        counter.previous as f64 * weight + counter.current as f64
                    } else if tag & SLIDING_BIT != 0
                        && Some(window) == counter.start.checked_add(measure)
                    {
                        counter.current as f64 * (measure - (now - window)) as f64 / measure as f64
                    } else {
                        0.0
                    }
                };
                (tag, used)
            })
            .collect()
    }

    /// The same consumption, re-expressed for `algorithm` over `quotas` (after a reload
    /// changed them): units used stay used. A GCRA bucket whose rates changed keeps the
    /// exact integer arithmetic of [`gcra::carry_over`].
    pub(super) fn carried_over(
        &self,
        algorithm: Algorithm,
        quotas: &[Quota],
        warmup: u64,
        now: u64,
    ) -> State {
        let mut next = State::fresh(algorithm, quotas, warmup, now);
        // A caller-defined bucket's numbers are part of its name: it never meets others.
        if algorithm == Algorithm::DiscreteRefill || matches!(self, State::Discrete(_)) {
            return next;
        }
        let used = self.used(now);
        match &mut next {
            // Into rings: what each quota used is counted in its newest sub-window now.
            State::Ring(rings) => {
                let units: Vec<f64> = (0..quotas.len())
                    .map(|i| used.get(i).or(used.last()).map_or(0.0, |&(_, u)| u))
                    .collect();
                subwindow::carry_into(&mut rings.words, quotas, &units, now);
                return next;
            }
            // Into a log: what was used is logged now (it leaves a whole window later).
            State::Log(log) => {
                let units = used.iter().map(|&(_, u)| u).fold(0.0, f64::max);
                let entries = (units.ceil() as usize).min(log::capacity(quotas));
                log.entries.extend(std::iter::repeat_n(now, entries));
                return next;
            }
            // Into a warming bucket: the debt carries over, and a bucket in use is warm (a
            // warm-up added by a reload does not slow down the clients of the moment).
            State::Warm(words) => {
                let units = used
                    .first()
                    .map_or(0.0, |&(_, u)| u)
                    .min(quotas.first().map_or(0.0, |q| f64::from(q.burst())));
                if units > 0.0 {
                    words[0] = now.saturating_add((units * words[2] as f64) as u64);
                }
                words[1] = 0.0f64.to_bits();
                return next;
            }
            _ => {}
        }
        let all_gcra = !matches!(self, State::Log(_))
            && self
                .tags()
                .iter()
                .all(|t| t & (SLIDING_BIT | FIXED_BIT) == 0);
        if algorithm == Algorithm::Gcra && all_gcra {
            let old_tags = self.tags().to_vec();
            let mut old = self.clone();
            gcra::carry_over(old.tats(), &old_tags, quotas, now, next.tats());
            return next;
        }
        let n = quotas.len();
        for (index, quota) in quotas.iter().enumerate() {
            // Across algorithms, quota i inherits from old quota i (or the last one), at
            // most its burst.
            let Some(&(_, units)) = used.get(index).or(used.last()) else {
                continue;
            };
            let units = units.min(f64::from(quota.burst()));
            if units <= 0.0 {
                continue;
            }
            match (&mut next, algorithm) {
                (State::One { tat, .. }, _) => {
                    tat[0] = now.saturating_add((units * quota.interval_nanos() as f64) as u64);
                }
                (State::Many(words), Algorithm::Gcra) => {
                    words[index] =
                        now.saturating_add((units * quota.interval_nanos() as f64) as u64);
                }
                (State::Discrete(_) | State::Log(_) | State::Warm(_) | State::Ring(_), _) => {}
                (State::Many(words), _) => {
                    let period = quota.period_nanos();
                    let counter = window::Counter {
                        start: now - now % period,
                        previous: 0,
                        current: units.ceil() as u64,
                    };
                    words[index] = counter.start;
                    words[n + index] = pack(&counter);
                }
            }
        }
        next
    }

    /// Decides `request` against this state, first re-expressing it for the request's
    /// rule if that changed its algorithm, quotas or warm-up (units used stay used). A peek
    /// changes nothing, the re-expression included.
    pub(super) fn decide_carrying(&mut self, request: &CheckRequest<'_>, now: u64) -> Decision {
        let warmup = request.shaping.warmup_nanos();
        if !self.fits(request.algorithm, request.quotas, warmup) {
            let mut carried = self.carried_over(request.algorithm, request.quotas, warmup, now);
            if request.mode == CheckMode::Peek {
                return carried.decide(request, now);
            }
            *self = carried;
        }
        self.decide(request, now)
    }

    /// Decides against this state.
    pub(super) fn decide(&mut self, request: &CheckRequest<'_>, now: u64) -> Decision {
        if request.mode == CheckMode::Refund {
            self.give_back(request.quotas, request.cost, now);
            let peek = CheckRequest {
                mode: CheckMode::Peek,
                cost: 0,
                ..*request
            };
            return self.decide(&peek, now);
        }
        let quotas = request.quotas;
        match request.algorithm {
            Algorithm::Gcra => {
                if let State::Warm(words) = self {
                    let (mut state, ramp) = warm_of(words);
                    let Some(quota) = quotas.first() else {
                        return Decision::unlimited();
                    };
                    let decision = warmup::decide(&mut state, quota, &ramp, ask(request, now));
                    words[0] = state.tat;
                    words[1] = state.stored.to_bits();
                    return decision;
                }
                decide_gcra(self.tats(), request, now)
            }
            Algorithm::SlidingLog => {
                let State::Log(state) = self else {
                    return Decision::unlimited();
                };
                if state.periods.len() != quotas.len()
                    || state
                        .periods
                        .iter()
                        .zip(quotas)
                        .any(|(&p, q)| p != q.period_nanos())
                {
                    state.periods = quotas.iter().map(Quota::period_nanos).collect();
                }
                log::decide(
                    &mut state.entries,
                    quotas,
                    request.cost,
                    now,
                    request.mode,
                    request.strict,
                )
            }
            Algorithm::DiscreteRefill => {
                let State::Discrete(words) = self else {
                    return Decision::unlimited();
                };
                let [amount, mark, session, max, refill, every] = **words;
                let mut state = [amount, mark, session];
                let params = discrete::Params { max, refill, every };
                let decision = discrete::decide(
                    &mut state,
                    &params,
                    request.cost,
                    now,
                    request.mode,
                    request.strict,
                );
                words[..3].copy_from_slice(&state);
                decision
            }
            Algorithm::SlidingWindow if in_rings(request.algorithm, quotas) => {
                let State::Ring(rings) = self else {
                    return Decision::unlimited();
                };
                subwindow::decide(&mut rings.words, quotas, request.cost, now, request.mode)
            }
            algorithm => {
                let kind = if algorithm == Algorithm::FixedWindow {
                    window::Kind::Fixed
                } else {
                    window::Kind::Sliding
                };
                let State::Many(words) = self else {
                    return Decision::unlimited();
                };
                let n = words.len() / 3;
                let mut buffer = [window::Counter::default(); 4];
                let mut spill = Vec::new();
                let counters: &mut [window::Counter] = if n <= buffer.len() {
                    &mut buffer[..n]
                } else {
                    spill.resize(n, window::Counter::default());
                    &mut spill
                };
                for (i, counter) in counters.iter_mut().enumerate() {
                    *counter = unpack(words[i], words[n + i]);
                }
                let decision =
                    window::decide(kind, counters, quotas, request.cost, now, request.mode);
                for (i, counter) in counters.iter().enumerate() {
                    words[i] = counter.start;
                    words[n + i] = pack(counter);
                }
                decision
            }
        }
    }
}

impl State {
    /// Gives `cost` tokens back to every quota (a refund), never past full; a caller-defined
    /// bucket takes none back.
    fn give_back(&mut self, quotas: &[Quota], cost: u64, now: u64) {
        match self {
            State::One { tat, .. } => gcra::give_back(tat, quotas, cost, now),
            State::Warm(words) => gcra::give_back(&mut words[..1], quotas, cost, now),
            State::Log(log) => {
                for _ in 0..cost.min(log.entries.len() as u64) {
                    log.entries.pop_back();
                }
            }
            State::Ring(rings) => subwindow::give_back(&mut rings.words, quotas, cost, now),
            State::Discrete(_) => {}
            State::Many(words) => {
                let n = words.len() / 3;
                let windows = words[2 * n..]
                    .iter()
                    .any(|tag| tag & (SLIDING_BIT | FIXED_BIT) != 0);
                if !windows {
                    gcra::give_back(&mut words[..n], quotas, cost, now);
                    return;
                }
                let mut counters: Vec<window::Counter> =
                    (0..n).map(|i| unpack(words[i], words[n + i])).collect();
                window::give_back(&mut counters, quotas, cost, now);
                for (i, counter) in counters.iter().enumerate() {
                    words[i] = counter.start;
                    words[n + i] = pack(counter);
                }
            }
        }
    }
}

/// Decides `request` against GCRA `tats` (one per quota): the engine, fed from the request.
pub(super) fn decide_gcra(tats: &mut [u64], request: &CheckRequest<'_>, now: u64) -> Decision {
    gcra::decide(tats, request.quotas, ask(request, now))
}

/// What `request` asks of a bucket's engine at `now`.
#[inline]
fn ask<'a>(request: &CheckRequest<'a>, now: u64) -> Ask<'a> {
    Ask {
        cost: request.cost,
        now,
        mode: request.mode,
        strict: request.strict,
        shaping: request.shaping,
    }
}
