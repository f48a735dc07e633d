//! A decision as Envoy reads it: a descriptor's status, and the request's overall code.

use std::time::Duration;

use super::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use tollgate::Decision;

/// The units a rate is reported in, with their length in nanoseconds.
const UNITS: [(Unit, u64); 4] = [
    (Unit::Second, 1_000_000_000),
    (Unit::Minute, 60_000_000_000),
    (Unit::Hour, 3_600_000_000_000),
    (Unit::Day, 86_400_000_000_000),
];

/// One descriptor's status. A shadow rule's refusal is `OK` (it only measures); a key no
/// rule limits, or an unlimited rule, is `OK` without a limit (`limit_remaining` 0 when no
/// rule matched, the largest count for an unlimited rule).
pub(super) fn descriptor_status(decision: &Decision) -> DescriptorStatus {
    let Some(name) = decision.rule() else {
        return ok_without_limit(0);
    };
    if decision.limit() == u64::MAX {
        return ok_without_limit(u32::MAX);
    }
    let code = if decision.allowed() || decision.shadow() {
        Code::Ok
    } else {
        Code::OverLimit
    };
    let (unit, requests_per_unit) = closest_unit(decision.limit(), decision.window());
    DescriptorStatus {
        code: code.into(),
        current_limit: Some(RateLimit {
            name: name.to_owned(),
            requests_per_unit,
            unit: unit.into(),
        }),
        limit_remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(decision.reset())),
    }
}

/// `OVER_LIMIT` if any descriptor is, else `OK`.
pub(super) fn overall(statuses: &[DescriptorStatus]) -> Code {
    if statuses
        .iter()
        .any(|status| status.code == i32::from(Code::OverLimit))
    {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

fn ok_without_limit(remaining: u32) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok.into(),
        current_limit: None,
        limit_remaining: remaining,
        duration_until_reset: None,
    }
}

/// `limit` per `window` as a count per the unit closest to the window (on a log scale), so
/// `100/min` is 100 a minute, `10/s` with a burst of 40 is 10 a second, and `5/10s` is 30 a
/// minute. Never 0: a rate below one a day is one a day.
fn closest_unit(limit: u64, window: Duration) -> (Unit, u32) {
    let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
    let distance = |unit_ns: u64| {
        let (long, short) = if unit_ns > window_ns {
            (unit_ns, window_ns)
        } else {
            (window_ns, unit_ns)
        };
        long as f64 / short as f64
    };
    let closest = UNITS
        .iter()
        .position(|&(_, unit_ns)| {
            UNITS
                .iter()
                .all(|&(_, other)| distance(unit_ns) <= distance(other))
        })
        .unwrap_or(0);
    for &(unit, unit_ns) in &UNITS[closest..] {
        let per_unit = (u128::from(limit) * u128::from(unit_ns) + u128::from(window_ns) / 2)
            / u128::from(window_ns);
        if per_unit >= 1 {
            return (unit, u32::try_from(per_unit).unwrap_or(u32::MAX));
        }
    }
    (Unit::Day, 1)
}

/// `duration` as protobuf's.
fn duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_reported_in_the_closest_unit() {
        let s = Duration::from_secs;
        let table = [
            ((100, s(60)), (Unit::Minute, 100)),
            ((40, s(4)), (Unit::Second, 10)),
            ((5, s(10)), (Unit::Minute, 30)),
            ((1, s(3_600)), (Unit::Hour, 1)),
            ((1_000, s(86_400)), (Unit::Day, 1_000)),
            ((1, s(30 * 86_400)), (Unit::Day, 1)),
            ((5, Duration::from_millis(100)), (Unit::Second, 50)),
        ];
        for ((limit, window), expected) in table {
            assert_eq!(
                closest_unit(limit, window),
                expected,
                "{limit} per {window:?}"
            );
        }
    }
}
