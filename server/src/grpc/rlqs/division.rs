//! One bucket's budget divided among the Envoys reporting it, by their demand, within a
//! bound: the token-bucket assignments that may be in force at the Envoys never sum to more
//! than the rule's rate, and their `max_tokens` to more than its burst (or one token each,
//! where the burst divides to less).
//!
//! Each Envoy gets a floor (a tenth of the rate, split evenly) so a new one is not starved,
//! and the rest by demand — requests allowed plus denied per second, smoothed over its
//! reports. A share that moves by less than a twentieth of the rule's rate (and burst) is
//! not re-sent: Envoy starts a changed token bucket full, so every change is a burst given
//! again.
//!
//! What counts towards the bound is what *may* be in force, not what was last sent: a share
//! made smaller stays counted until the Envoy has reported twice since (it answers a new
//! assignment with a report), or its time to live has run out; an Envoy whose stream ended
//! keeps its share counted until its assignment's time to live has run out. Larger shares
//! are granted only from what that leaves. So when demand shifts, the shares move within
//! about two reporting intervals, and never overlap.
//!
//! Pure: time is passed in, nothing here sleeps or sends.

use std::collections::HashMap;
use std::time::Duration;

/// The longest fill interval given (a year): a share below one token a year rounds up to it.
const LONGEST_FILL_MS: f64 = 365.0 * 86_400_000.0;

/// Shares an Envoy may have been sent and not yet acknowledged, kept apart at most.
const MAX_SUPERSEDED: usize = 64;

/// Which Envoy (one RLQS stream).
pub(crate) type EnvoyId = u64;

/// What a bucket's rule allows, as RLQS can say it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Allowance {
    /// `per_second` tokens a second, `burst` at once, divided among the Envoys.
    Rate { per_second: f64, burst: u32 },
    /// No limit (no rule, an unlimited or a shadow rule): `ALLOW_ALL`.
    AllowAll,
}

/// One Envoy's share: a token bucket of `max_tokens`, `tokens_per_fill` every `fill_interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    pub(crate) max_tokens: u32,
    pub(crate) tokens_per_fill: u32,
    pub(crate) fill_interval: Duration,
}

impl Share {
    /// Tokens a second.
    pub(crate) fn per_second(&self) -> f64 {
        f64::from(self.tokens_per_fill) / self.fill_interval.as_secs_f64().max(1e-9)
    }

    /// The largest share of at most `per_second` (at least one token per fill) and
    /// `max_tokens` (at least 1): rounded down, so shares never sum to more than asked.
    fn at_most(per_second: f64, max_tokens: u32) -> Share {
        let per_second = per_second.max(1e-9);
        // A fill of at least one token, at least a second apart.
        let mut interval_ms = (1000.0 / per_second).ceil().clamp(1000.0, LONGEST_FILL_MS);
        let mut tokens = (per_second * interval_ms / 1000.0).floor();
        if tokens < 1.0 {
            // Rounding left the interval a hair short of one token: one more millisecond.
            interval_ms += 1.0;
            tokens = 1.0;
        }
        let tokens = tokens.min(f64::from(u32::MAX));
        Share {
            max_tokens: max_tokens.max(1),
            tokens_per_fill: tokens as u32,
            fill_interval: Duration::from_millis(interval_ms as u64),
        }
    }

    /// Whether `other` differs from this by more than `fraction` of the rule's rate
    /// (`per_second`) or burst (at least one token).
    fn moved(&self, other: &Share, fraction: f64, per_second: f64, burst: u32) -> bool {
        (self.per_second() - other.per_second()).abs() > fraction * per_second
            || f64::from(self.max_tokens.abs_diff(other.max_tokens))
                > (fraction * f64::from(burst)).max(1.0)
    }
}

/// What to tell one Envoy about one bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Action {
    /// Enforce this token bucket (for the time to live).
    Assign(Share),
    /// Allow everything.
    AllowAll,
    /// Forget the bucket (its rule is gone).
    Abandon,
}

/// The knobs of a division.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    /// How long an assignment holds unless renewed.
    pub(crate) ttl: Duration,
    /// The share of the rate split evenly, so a new or quiet Envoy is not starved.
    pub(crate) floor: f64,
    /// How much a share must move to be re-sent, as a part of the rule's rate (or burst).
    pub(crate) hysteresis: f64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            ttl: Duration::from_secs(15),
            floor: 0.1,
            hysteresis: 0.05,
        }
    }
}

/// One Envoy's part in a bucket.
#[derive(Clone, Debug)]
struct Holder {
    /// Requests a second (allowed + denied), smoothed; `None` before the first report.
    demand: Option<f64>,
    /// The share last sent, and when.
    sent: Option<(Share, Duration)>,
    /// Larger shares sent before and not yet known to be replaced, each with when it was
    /// sent and the reports since it was replaced: counted until acknowledged (two
    /// reports: Envoy answers an assignment with one, and one may cross it) or expired.
    superseded: Vec<(Share, Duration, u32)>,
    /// Whether its stream is open.
    connected: bool,
    /// When it last reported.
    last_report: Duration,
    /// The blanket action last sent (deny or allow), so it is renewed, not repeated.
    blanket: Option<(Action, Duration)>,
}

impl Holder {
    /// The share that may be in force at the Envoy now: the larger of the last sent and
    /// one not yet known to be replaced (componentwise).
    fn committed(&self, now: Duration, ttl: Duration) -> (f64, u32) {
        let live = |entry: &Option<(Share, Duration)>| {
            entry
                .filter(|(_, at)| now < *at + ttl)
                .map_or((0.0, 0), |(share, _)| {
                    (share.per_second(), share.max_tokens)
                })
        };
        let (rate, tokens) = live(&self.sent);
        self.superseded
            .iter()
            .map(|(share, at, _)| live(&Some((*share, *at))))
            .fold((rate, tokens), |(rate, tokens), (r, t)| {
                (rate.max(r), tokens.max(t))
            })
    }
}

/// One bucket: its allowance and its Envoys.
#[derive(Clone, Debug)]
pub(crate) struct Bucket {
    allowance: Allowance,
    holders: HashMap<EnvoyId, Holder>,
}

impl Bucket {
    /// A bucket under `allowance`, with no Envoy yet.
    pub(crate) fn new(allowance: Allowance) -> Bucket {
        Bucket {
            allowance,
            holders: HashMap::new(),
        }
    }

    /// The allowance now.
    pub(crate) fn allowance(&self) -> Allowance {
        self.allowance
    }

    /// The rule changed (a reload): the next division divides the new allowance.
    pub(crate) fn set_allowance(&mut self, allowance: Allowance) {
        self.allowance = allowance;
    }

    /// `envoy` reported `requests` (allowed + denied) over `elapsed`.
    pub(crate) fn report(
        &mut self,
        envoy: EnvoyId,
        requests: u64,
        elapsed: Duration,
        now: Duration,
    ) {
        let holder = self.holders.entry(envoy).or_insert(Holder {
            demand: None,
            sent: None,
            superseded: Vec::new(),
            connected: true,
            last_report: now,
            blanket: None,
        });
        let seen = requests as f64 / elapsed.as_secs_f64().max(0.001);
        holder.demand = Some(match holder.demand {
            Some(before) => 0.5 * before + 0.5 * seen,
            None => seen,
        });
        holder.connected = true;
        holder.last_report = now;
        for (_, _, reports) in &mut holder.superseded {
            *reports += 1;
        }
        holder.superseded.retain(|(_, _, reports)| *reports < 2);
    }

    /// `envoy`'s stream ended: its share stays counted until its assignment expires.
    pub(crate) fn left(&mut self, envoy: EnvoyId) {
        if let Some(holder) = self.holders.get_mut(&envoy) {
            holder.connected = false;
        }
    }

    /// Whether no Envoy holds or may hold a share any more.
    pub(crate) fn is_idle(&self) -> bool {
        self.holders.is_empty()
    }

    /// The Envoys reporting it now, with their smoothed demand and the share last sent.
    pub(crate) fn envoys(&self) -> impl Iterator<Item = (EnvoyId, f64, Option<Share>)> + '_ {
        self.holders
            .iter()
            .filter(|(_, holder)| holder.connected)
            .map(|(envoy, holder)| {
                (
                    *envoy,
                    holder.demand.unwrap_or(0.0),
                    holder.sent.map(|(share, _)| share),
                )
            })
    }

    /// What may be in force now, summed: tokens a second and `max_tokens`.
    pub(crate) fn committed(&self, now: Duration, ttl: Duration) -> (f64, u32) {
        self.holders
            .values()
            .fold((0.0, 0), |(rate, tokens), holder| {
                let (r, t) = holder.committed(now, ttl);
                (rate + r, tokens.saturating_add(t))
            })
    }

    /// Divides the allowance among the Envoys as `tuning` says, and returns what to send
    /// to whom. Envoys gone for longer than an assignment lives are forgotten.
    pub(crate) fn divide(&mut self, now: Duration, tuning: &Tuning) -> Vec<(EnvoyId, Action)> {
        let ttl = tuning.ttl;
        self.holders.retain(|_, holder| {
            let silent_for = now.saturating_sub(holder.last_report);
            // A closed stream's share lives out its time; a silent open one, twice that.
            if holder.connected {
                silent_for < ttl * 2
            } else {
                holder.sent.is_some_and(|(_, at)| now < at + ttl)
                    || holder.superseded.iter().any(|(_, at, _)| now < *at + ttl)
            }
        });
        for holder in self.holders.values_mut() {
            holder.superseded.retain(|(_, at, _)| now < *at + ttl);
        }
        let (per_second, burst) = match self.allowance {
            Allowance::Rate { per_second, burst } => (per_second, burst),
            Allowance::AllowAll => return self.blanket(Action::AllowAll, now, ttl),
        };
        for holder in self.holders.values_mut() {
            holder.blanket = None;
        }
        let (rate_limit, burst_limit) = (per_second, burst);
        // What Envoys whose streams ended may still enforce is not divided until it expires.
        let (gone_rate, gone_tokens) = self
            .holders
            .values()
            .filter(|holder| !holder.connected)
            .fold((0.0, 0u32), |(rate, tokens), holder| {
                let (r, t) = holder.committed(now, ttl);
                (rate + r, tokens.saturating_add(t))
            });
        let per_second = (per_second - gone_rate).max(0.0);
        let burst = burst.saturating_sub(gone_tokens);
        let connected: Vec<EnvoyId> = self
            .holders
            .iter()
            .filter(|(_, holder)| holder.connected)
            .map(|(envoy, _)| *envoy)
            .collect();
        if connected.is_empty() {
            return Vec::new();
        }
        let n = connected.len() as f64;
        let total_demand: f64 = connected
            .iter()
            .map(|envoy| self.holders[envoy].demand.unwrap_or(0.0))
            .sum();
        let weight = |envoy: &EnvoyId| -> f64 {
            let demand = self.holders[envoy].demand.unwrap_or(0.0);
            if total_demand > 0.0 {
                tuning.floor / n + (1.0 - tuning.floor) * demand / total_demand
            } else {
                1.0 / n
            }
        };
        let targets: Vec<(EnvoyId, Share)> = connected
            .iter()
            .map(|envoy| {
                let w = weight(envoy);
                let tokens = (f64::from(burst) * w).floor() as u32;
                (*envoy, Share::at_most(per_second * w, tokens))
            })
            .collect();
        let mut actions = Vec::new();
        // Over the allowance — a reload lowered it, or an Envoy without a share (or far
        // below its target) finds no room — every share above its target shrinks, however
        // little; otherwise only those that moved noticeably (every change refills a
        // bucket, so a share is not nudged for rounding).
        let live = |holder: &Holder| holder.sent.filter(|(_, at)| now < *at + ttl);
        let (sent_rate, sent_tokens) = connected
            .iter()
            .filter_map(|envoy| live(&self.holders[envoy]))
            .fold((0.0, 0u32), |sum, (share, _)| {
                (
                    sum.0 + share.per_second(),
                    sum.1.saturating_add(share.max_tokens),
                )
            });
        let (committed_now, _) = self.committed(now, ttl);
        let wanting: f64 = targets
            .iter()
            .map(|(envoy, target)| match live(&self.holders[envoy]) {
                None => target.per_second(),
                Some((sent, _))
                    if target.per_second() - sent.per_second() > tuning.hysteresis * rate_limit =>
                {
                    target.per_second() - sent.per_second()
                }
                Some(_) => 0.0,
            })
            .sum();
        let over_rule = sent_rate > per_second + 1e-9
            || sent_tokens > burst.saturating_add(targets.len() as u32);
        let starved = wanting > (rate_limit - committed_now).max(0.0) + 1e-9;
        // Shrinking first: the old share stays counted until acknowledged.
        for (envoy, target) in &targets {
            let Some(holder) = self.holders.get_mut(envoy) else {
                continue;
            };
            // An expired share is no longer in force: the Envoy's next share is a fresh one.
            let Some((sent, at)) = holder.sent.filter(|(_, at)| now < *at + ttl) else {
                continue;
            };
            let smaller =
                target.per_second() < sent.per_second() || target.max_tokens < sent.max_tokens;
            // A share shrunk and not yet acknowledged is not nudged again for a starved
            // Envoy (its room comes with the acknowledgement): only past the rule, or by a
            // noticeable move — every change refills the Envoy's bucket.
            let pending = !holder.superseded.is_empty();
            let moved = sent.moved(target, tuning.hysteresis, rate_limit, burst_limit);
            if smaller && (over_rule || (starved && !pending) || moved) {
                // Grow no part while shrinking another: take the smaller of each.
                let shrunk = Share::at_most(
                    target.per_second().min(sent.per_second()),
                    target.max_tokens.min(sent.max_tokens),
                );
                // Still counted until acknowledged or expired (a few at most: a change
                // waits for its acknowledgement before the next growth). Past a bound, the
                // oldest two merge into one that counts at least as much, as long.
                holder.superseded.push((sent, at, 0));
                if holder.superseded.len() > MAX_SUPERSEDED {
                    let (a, a_at, a_reports) = holder.superseded.remove(0);
                    let (b, b_at, b_reports) = holder.superseded.remove(0);
                    let larger = Share {
                        max_tokens: a.max_tokens.max(b.max_tokens),
                        ..if a.per_second() >= b.per_second() {
                            a
                        } else {
                            b
                        }
                    };
                    holder
                        .superseded
                        .insert(0, (larger, a_at.max(b_at), a_reports.min(b_reports)));
                }
                holder.sent = Some((shrunk, now));
                actions.push((*envoy, Action::Assign(shrunk)));
            }
        }
        // Then growing (and first shares), from what is left.
        let (committed_rate, committed_tokens) = self.committed(now, ttl);
        let mut rate_room = (rate_limit - committed_rate).max(0.0);
        let mut token_room = burst_limit.saturating_sub(committed_tokens);
        for (envoy, target) in &targets {
            let Some(holder) = self.holders.get_mut(envoy) else {
                continue;
            };
            let (current_rate, current_tokens) = holder.committed(now, ttl);
            let fresh = holder.sent.is_none_or(|(_, at)| now >= at + ttl);
            let acknowledged = holder.superseded.is_empty();
            let grows = match holder.sent {
                Some(_) if !fresh && !acknowledged => false,
                Some((sent, _)) if !fresh => {
                    (target.per_second() > sent.per_second() || target.max_tokens > sent.max_tokens)
                        && sent.moved(target, tuning.hysteresis, rate_limit, burst_limit)
                }
                _ => true,
            };
            if !grows {
                // Unchanged: renewed (the same strategy extends it) once half its life is gone.
                if let Some((sent, at)) = holder.sent
                    && now >= at + ttl / 2
                {
                    holder.sent = Some((sent, now));
                    actions.push((*envoy, Action::Assign(sent)));
                }
                continue;
            }
            let rate = target
                .per_second()
                .min(current_rate + rate_room)
                .max(if fresh {
                    0.0
                } else {
                    current_rate.min(target.per_second())
                });
            if rate * LONGEST_FILL_MS / 1000.0 < 1.0 {
                // Not one token a year: nothing to give.
                continue;
            }
            let tokens = target
                .max_tokens
                .min(current_tokens.saturating_add(token_room))
                .max(1);
            let granted = Share::at_most(rate, tokens);
            rate_room = (rate_room - (granted.per_second() - current_rate).max(0.0)).max(0.0);
            token_room =
                token_room.saturating_sub(granted.max_tokens.saturating_sub(current_tokens));
            if let Some((sent, _)) = holder.sent
                && !fresh
                && granted == sent
            {
                continue;
            }
            holder.sent = Some((granted, now));
            // One action per Envoy: a share shrunk above and grown here is sent once.
            match actions.iter_mut().find(|(to, _)| to == envoy) {
                Some(action) => action.1 = Action::Assign(granted),
                None => actions.push((*envoy, Action::Assign(granted))),
            }
        }
        actions
    }

    /// A blanket action for every Envoy, sent once and renewed at half its life.
    fn blanket(&mut self, action: Action, now: Duration, ttl: Duration) -> Vec<(EnvoyId, Action)> {
        let mut actions = Vec::new();
        for (envoy, holder) in &mut self.holders {
            if !holder.connected {
                continue;
            }
            let due = match holder.blanket {
                Some((sent, at)) => sent != action || now >= at + ttl / 2,
                None => true,
            };
            if due {
                holder.blanket = Some((action, now));
                // A token bucket no longer in force once the blanket rule is.
                holder.sent = None;
                actions.push((*envoy, action));
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TUNING: Tuning = Tuning {
        ttl: Duration::from_secs(15),
        floor: 0.1,
        hysteresis: 0.05,
    };

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn shares(actions: &[(EnvoyId, Action)]) -> HashMap<EnvoyId, Share> {
        actions
            .iter()
            .filter_map(|(envoy, action)| match action {
                Action::Assign(share) => Some((*envoy, *share)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn one_envoy_gets_the_whole_rate_and_burst() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 100.0,
            burst: 20,
        });
        bucket.report(1, 0, secs(5), secs(0));
        let sent = shares(&bucket.divide(secs(0), &TUNING));
        let share = sent[&1];
        assert!((share.per_second() - 100.0).abs() < 1.0, "{share:?}");
        assert_eq!(share.max_tokens, 20);
    }

    #[test]
    fn a_busy_envoy_gets_most_and_an_idle_one_its_floor_within_two_reports() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 100.0,
            burst: 100,
        });
        // Both join idle: half each.
        bucket.report(1, 0, secs(5), secs(0));
        bucket.report(2, 0, secs(5), secs(0));
        let first = shares(&bucket.divide(secs(0), &TUNING));
        assert!((first[&1].per_second() - 50.0).abs() < 1.0, "{first:?}");
        // Envoy 1 gets busy; 2 stays idle. Two reporting intervals later the shares moved.
        let mut now = secs(0);
        for _ in 0..3 {
            now += secs(5);
            bucket.report(1, 5_000, secs(5), now);
            bucket.report(2, 0, secs(5), now);
            bucket.divide(now, &TUNING);
        }
        let envoys: HashMap<EnvoyId, Share> = bucket
            .envoys()
            .filter_map(|(envoy, _, share)| Some((envoy, share?)))
            .collect();
        assert!(envoys[&1].per_second() > 85.0, "{envoys:?}");
        assert!(envoys[&2].per_second() <= 6.0, "{envoys:?}");
        assert!(envoys[&2].per_second() >= 4.0, "the floor: {envoys:?}");
        let (rate, _) = bucket.committed(now, TUNING.ttl);
        assert!(rate <= 100.0 + 1e-9);
    }

    #[test]
    fn a_newcomer_finds_room_when_the_rate_is_all_given_out() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 100.0,
            burst: 100,
        });
        let mut now = secs(0);
        for envoy in 0..8 {
            bucket.report(envoy, 500, secs(5), now);
        }
        bucket.divide(now, &TUNING);
        // A ninth joins, as busy: the others' shares are nudged down to make it room.
        for _ in 0..4 {
            now += secs(5);
            for envoy in 0..9 {
                bucket.report(envoy, 500, secs(5), now);
            }
            bucket.divide(now, &TUNING);
        }
        let newcomer = bucket
            .envoys()
            .find(|(envoy, _, _)| *envoy == 8)
            .and_then(|(_, _, share)| share)
            .expect("the ninth has a share");
        assert!(newcomer.per_second() >= 9.0, "{newcomer:?}");
        assert!(bucket.committed(now, TUNING.ttl).0 <= 100.0 + 1e-9);
    }

    #[test]
    fn a_shrunk_share_is_not_nudged_again_while_a_newcomer_waits_for_its_room() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 13.0,
            burst: 77,
        });
        bucket.report(7, 8630, secs(5), secs(0));
        bucket.divide(secs(0), &TUNING);
        // A newcomer reports again and again within one interval, busier each time: the
        // old Envoy is shrunk once, not once per report (every change refills its bucket).
        let mut changes = 0;
        for requests in [0, 219, 452, 465, 648, 794, 945] {
            bucket.report(0, requests, secs(5), secs(8));
            changes += bucket
                .divide(secs(8), &TUNING)
                .iter()
                .filter(|(envoy, _)| *envoy == 7)
                .count();
        }
        assert!(changes <= 2, "{changes} changes");
        let (rate, tokens) = bucket.committed(secs(8), TUNING.ttl);
        assert!(rate <= 13.0 + 1e-9 && tokens <= 77 + 2, "{rate} {tokens}");
    }

    #[test]
    fn a_closed_streams_share_returns_after_its_time_to_live() {
        let mut bucket = Bucket::new(Allowance::Rate {
            per_second: 10.0,
            burst: 10,
        });
        bucket.report(1, 0, secs(5), secs(0));
        bucket.divide(secs(0), &TUNING);
        bucket.left(1);
        bucket.report(2, 100, secs(5), secs(1));
        // Envoy 1's assignment may still be in force: 2 gets nothing yet.
        assert!(shares(&bucket.divide(secs(1), &TUNING)).is_empty());
        // Once it has expired, 2 gets it all.
        bucket.report(2, 100, secs(5), secs(16));
        let sent = shares(&bucket.divide(secs(16), &TUNING));
        assert!((sent[&2].per_second() - 10.0).abs() < 0.5, "{sent:?}");
    }

    #[test]
    fn allow_all_is_a_blanket_rule_renewed_not_repeated() {
        let mut bucket = Bucket::new(Allowance::AllowAll);
        bucket.report(1, 3, secs(5), secs(0));
        assert_eq!(bucket.divide(secs(0), &TUNING), [(1, Action::AllowAll)]);
        assert!(bucket.divide(secs(1), &TUNING).is_empty());
        bucket.report(1, 3, secs(5), secs(8));
        assert_eq!(bucket.divide(secs(8), &TUNING), [(1, Action::AllowAll)]);
        // A limit again: a token bucket at once.
        bucket.set_allowance(Allowance::Rate {
            per_second: 10.0,
            burst: 5,
        });
        assert!(matches!(
            bucket.divide(secs(9), &TUNING)[..],
            [(1, Action::Assign(_))]
        ));
    }

    #[derive(Clone, Debug)]
    enum Step {
        Report(EnvoyId, u64),
        Leave(EnvoyId),
        Wait(u64),
        Reload(u32, u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..8u64, 0..10_000u64).prop_map(|(e, n)| Step::Report(e, n)),
            1 => (0..8u64).prop_map(Step::Leave),
            2 => (0..20u64).prop_map(Step::Wait),
            1 => (1..500u32, 1..200u32).prop_map(|(r, b)| Step::Reload(r, b)),
        ]
    }

    proptest! {
        /// Whatever the Envoys do — join, report skewed demand, leave — what may be in
        /// force never sums to more than the rate, nor `max_tokens` to more than the burst
        /// (or one token each, where the burst divides to less).
        #[test]
        fn the_shares_in_force_never_exceed_the_rate_or_the_burst(
            steps in proptest::collection::vec(step(), 1..200)
        ) {
            let (mut rate, mut burst) = (100.0, 50u32);
            let mut bucket = Bucket::new(Allowance::Rate { per_second: rate, burst });
            let mut now = Duration::ZERO;
            // A reload may lower the rate below what is in force: the bound then holds for
            // the new rule once the old shares are acknowledged or expired.
            let mut settled_after = Duration::ZERO;
            for step in steps {
                match step {
                    Step::Report(envoy, requests) => bucket.report(envoy, requests, secs(5), now),
                    Step::Leave(envoy) => bucket.left(envoy),
                    Step::Wait(s) => now += secs(s),
                    Step::Reload(r, b) => {
                        rate = f64::from(r);
                        burst = b;
                        bucket.set_allowance(Allowance::Rate { per_second: rate, burst });
                        settled_after = now + TUNING.ttl;
                    }
                }
                bucket.divide(now, &TUNING);
                if now >= settled_after {
                    let (in_force, tokens) = bucket.committed(now, TUNING.ttl);
                    prop_assert!(in_force <= rate + 1e-6, "{in_force} > {rate}");
                    let holders = bucket.holders.len() as u32;
                    prop_assert!(tokens <= burst.max(holders) + holders, "{tokens} > {burst}");
                }
            }
        }
    }
}
