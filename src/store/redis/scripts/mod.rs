//! The decision script's wire format: the arguments one `EVALSHA` of the decision script (`decide/`) takes,
//! and its reply read back as a [`Decision`] described exactly as the in-memory engines
//! describe theirs.

use crate::Quota;
use crate::algorithm::{Algorithm, CheckMode, Shaping, keep_most_restrictive};
use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::store::StoreError;

/// The decision script: see the module docs of [`super`].
pub(super) const SCRIPT: &str = concat!(
    include_str!("decide/begin.lua"),
    include_str!("decide/log.lua"),
    include_str!("decide/subwindow.lua"),
    include_str!("decide/counters.lua"),
);

/// Microseconds as the script reads them: exact, fractions included.
fn micros(nanos: u64) -> String {
    if nanos.is_multiple_of(1_000) {
        (nanos / 1_000).to_string()
    } else {
        (nanos as f64 / 1_000.0).to_string()
    }
}

/// The script's arguments for a decision of `quotas` at `now` (`None`: the server's time).
pub(super) fn script_args(
    now: Option<Timestamp>,
    mode: CheckMode,
    cost: u64,
    strict: bool,
    algorithm: Algorithm,
    quotas: &[Quota],
    shaping: &Shaping,
) -> Vec<String> {
    let mut args = Vec::with_capacity(6 + 3 * quotas.len());
    args.push(now.map_or_else(String::new, |t| {
        let nanos = t.as_unix_nanos();
        format!("{}:{}", nanos / 1_000, nanos % 1_000)
    }));
    args.push(
        match mode {
            CheckMode::Consume | CheckMode::Session => "c",
            CheckMode::Peek => "p",
            CheckMode::Charge => "g",
            CheckMode::Refund => "u",
        }
        .to_owned(),
    );
    if quotas.iter().any(Quota::counts_requests) {
        let mask: String = quotas
            .iter()
            .map(|q| if q.counts_requests() { '1' } else { '0' })
            .collect();
        args.push(format!("{cost}:{mask}"));
    } else {
        args.push(cost.to_string());
    }
    args.push(if strict { "1" } else { "0" }.to_owned());
    let sub_windows =
        algorithm == Algorithm::SlidingWindow && quotas.iter().any(|q| q.resolution_nanos() > 0);
    args.push(
        match algorithm {
            // Caller-defined (discrete-refill) buckets never reach Redis: RedisStore::check
            // keeps them in its local store. Were one sent, it would be a GCRA bucket.
            Algorithm::Gcra | Algorithm::DiscreteRefill => "G",
            Algorithm::SlidingWindow if sub_windows => "r",
            Algorithm::SlidingWindow => "s",
            Algorithm::FixedWindow => "f",
            Algorithm::SlidingLog => "L",
        }
        .to_owned(),
    );
    args.push(quotas.len().to_string());
    let warmup = shaping.warmup_nanos();
    for quota in quotas {
        match algorithm {
            Algorithm::Gcra | Algorithm::DiscreteRefill => {
                args.push(quota.interval_nanos().to_string());
                args.push(shaping.tolerance(quota).to_string());
                args.push(quota.burst().to_string());
            }
            Algorithm::SlidingWindow if sub_windows => {
                let k = crate::algorithm::subwindow::subwindows(quota);
                args.push(micros(quota.period_nanos()));
                args.push(quota.rate().count().to_string());
                args.push(micros(quota.period_nanos() / k));
            }
            Algorithm::SlidingWindow | Algorithm::FixedWindow | Algorithm::SlidingLog => {
                args.push(micros(quota.period_nanos()));
                args.push(quota.rate().count().to_string());
                // A calendar window is computed here, where the time-zone rules are: the
                // script counts in it as given ("start:end", microseconds).
                args.push(match quota.calendar() {
                    Some(_) => {
                        let at = now.unwrap_or_else(|| std::time::SystemTime::now().into());
                        let (start, length) = quota.window_at(at.as_unix_nanos());
                        format!("{}:{}", start / 1_000, (start + length) / 1_000)
                    }
                    None => "0".to_owned(),
                });
            }
        }
    }
    // The warm-up period follows the quotas (a lease call puts its terms there instead).
    if warmup > 0 && algorithm == Algorithm::Gcra {
        args.push(warmup.to_string());
    }
    args
}

/// The arguments of one call deciding several buckets: `"*"`, their number, then each
/// bucket's own arguments (as [`script_args`] makes them) preceded by their count.
pub(super) fn many_args(each: Vec<Vec<String>>) -> Vec<String> {
    let mut args = Vec::with_capacity(2 + each.iter().map(|a| a.len() + 1).sum::<usize>());
    args.push("*".to_owned());
    args.push(each.len().to_string());
    for bucket in each {
        args.push(bucket.len().to_string());
        args.extend(bucket);
    }
    args
}

/// What a lease call (`mode "l"`) carries besides the request: tokens given back, tokens
/// admitted without Redis to charge, how many instances share the bucket, the most to
/// lease, and the settlement's mark: the instance and its sequence number, so that a
/// charge sent again (its reply was lost) is applied once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LeaseTerms<'a> {
    pub(super) returned: u64,
    pub(super) pending: u64,
    pub(super) shares: u64,
    pub(super) cap: u64,
    pub(super) mark: Option<(&'a str, u64)>,
}

/// The script's arguments for a lease call: the request (cost 0 for a settlement alone)
/// decided as a consumption, then `terms` (see `decide/begin.lua`). GCRA only.
pub(super) fn lease_args(
    now: Option<Timestamp>,
    cost: u64,
    strict: bool,
    quotas: &[Quota],
    terms: LeaseTerms<'_>,
) -> Vec<String> {
    let mut args = script_args(
        now,
        CheckMode::Consume,
        cost,
        strict,
        Algorithm::Gcra,
        quotas,
        &Shaping::NONE,
    );
    args[1] = "l".to_owned();
    for figure in [terms.returned, terms.pending, terms.shares, terms.cap] {
        args.push(figure.to_string());
    }
    if let Some((instance, sequence)) = terms.mark {
        args.push(format!("{instance}:{sequence}"));
    }
    args
}

/// A lease call's answer: the request's decision, the tokens leased, and each quota's
/// debt (nanoseconds until full) once the lease is charged.
#[derive(Clone, Debug)]
pub(super) struct Leased {
    pub(super) decision: Decision,
    pub(super) tokens: u64,
    pub(super) debts: Vec<u64>,
}

/// Reads a lease call's reply.
pub(super) fn leased_from(reply: &[i64], quotas: &[Quota]) -> Result<Leased, StoreError> {
    let Some((&tokens, decided)) = reply.split_last() else {
        return Err(StoreError::Unavailable {
            reason: "an empty reply from the decision script".into(),
        });
    };
    let decision = decision_from(decided, Algorithm::Gcra, quotas, None)?;
    let tokens = u64::try_from(tokens).unwrap_or(0);
    let debts = quotas
        .iter()
        .zip(decided[2..].chunks_exact(3))
        .map(|(quota, figures)| {
            u64::try_from(figures[0])
                .unwrap_or(0)
                .saturating_add(tokens.saturating_mul(quota.interval_nanos()))
        })
        .collect();
    Ok(Leased {
        decision,
        tokens,
        debts,
    })
}

/// The script's reply, as a [`Decision`] described exactly as the in-memory engines do.
/// `held`: the rule's shaping when the request consumed (an admission under a delay is held
/// for the debt beyond what passes at once); `None` for peeks and charges.
pub(super) fn decision_from(
    reply: &[i64],
    algorithm: Algorithm,
    quotas: &[Quota],
    held: Option<&Shaping>,
) -> Result<Decision, StoreError> {
    if reply.len() != 2 + 3 * quotas.len() {
        return Err(StoreError::Unavailable {
            reason: format!("unexpected reply from the decision script: {reply:?}"),
        });
    }
    // Nanoseconds; -1 means "never".
    let nanos = |ns: i64| u64::try_from(ns).unwrap_or(u64::MAX);
    let allowed = reply[0] == 1;
    let mut described = None;
    let mut hold = 0;
    for (index, (quota, figures)) in quotas.iter().zip(reply[2..].chunks_exact(3)).enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let candidate = match algorithm {
            Algorithm::Gcra | Algorithm::DiscreteRefill => {
                // A warming bucket names the debt its delay is measured from (its own
                // warm cost is paid by the next request); others, their debt.
                if let Some(shaping) = held.filter(|_| allowed) {
                    let basis = if figures[2] > 0 {
                        figures[2]
                    } else {
                        figures[0]
                    };
                    hold = hold.max(shaping.hold(quota, nanos(basis)));
                }
                Decision::bucket(
                    allowed,
                    index,
                    u64::from(quota.burst()),
                    quota.interval_nanos(),
                    nanos(figures[0]),
                    nanos(figures[1]),
                )
            }
            Algorithm::SlidingWindow | Algorithm::FixedWindow | Algorithm::SlidingLog => {
                Decision::counted(
                    allowed,
                    index,
                    u64::from(quota.rate().count()),
                    quota.period_nanos(),
                    u64::try_from(figures[0]).unwrap_or(0),
                    nanos(figures[1]),
                    nanos(figures[2]),
                    0,
                )
            }
        };
        keep_most_restrictive(&mut described, candidate);
    }
    Ok(described.map_or(Decision::unlimited(), |d| {
        d.with_reset(nanos(reply[1])).with_delay(hold)
    }))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    #[test]
    fn arguments_are_exact() {
        let quota = Quota::new("3/s".parse().unwrap(), NonZeroU32::new(3).unwrap()).unwrap();
        let args = script_args(
            Some(Timestamp::from_unix_nanos(1_500_000_999)),
            CheckMode::Charge,
            2,
            true,
            Algorithm::Gcra,
            &[quota],
            &Shaping::NONE,
        );
        assert_eq!(
            args,
            [
                "1500000:999",
                "g",
                "2",
                "1",
                "G",
                "1",
                "333333333",
                "999999999",
                "3"
            ]
        );
    }

    #[test]
    fn a_malformed_reply_is_an_error_not_a_decision() {
        let quota = Quota::new("3/s".parse().unwrap(), NonZeroU32::new(3).unwrap()).unwrap();
        assert!(decision_from(&[1, 0], Algorithm::Gcra, &[quota], None).is_err());
        let decision =
            decision_from(&[0, 2_000, 1_000, 500, 0], Algorithm::Gcra, &[quota], None).unwrap();
        assert!(!decision.allowed());
        assert_eq!(decision.retry_after(), Duration::from_nanos(500));
    }
}
