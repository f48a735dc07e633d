//! A rule's shaping fields — `on_limit`, `max_delay`, `delay_after`, `warmup` — checked
//! against the rest of the rule, and the sliding log's size limit.
//!
//! Every check here refuses a combination that could not do what it says: a delay on a
//! counter that cannot schedule, a burst that could not all be held. (How long a program
//! serving the rules may hold a request is its own business: a service checks `max_delay`
//! against its upstream timeout through a [`config::Extension`](super::super::Extension).)

use std::time::Duration;

use super::super::error::Diagnostic;
use super::super::raw::RawRule;
use super::super::source::SourceText;
use crate::algorithm::{Algorithm, Delay, Shaping};
use crate::quota::{Quota, parse_duration};

/// The longest a request may be held: beyond this a client has long given up.
const MAX_DELAY_CEILING: Duration = Duration::from_secs(3600);

/// The largest count a `sliding-log` rate may allow: a log keeps one timestamp (8 bytes)
/// per request in the window, so 1000 is 8 KB per client.
pub(crate) const MAX_LOG_LIMIT: u32 = 1000;

/// What the shaping checks need to know about the rest of the rule and the config.
pub(super) struct Context<'a> {
    pub(super) name: &'a str,
    pub(super) algorithm: Algorithm,
    pub(super) quotas: &'a [Quota],
    pub(super) counts_status: bool,
}

/// Reads and checks `raw`'s shaping fields; problems go to `diagnostics`.
pub(super) fn compile_shaping(
    source: &SourceText,
    raw: &RawRule,
    rule_span: std::ops::Range<usize>,
    context: &Context<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Shaping {
    let mut shaping = Shaping::NONE;
    let name = context.name;
    let delaying = match &raw.on_limit {
        None => false,
        Some(value) => match value.get_ref().as_str() {
            "reject" => false,
            "delay" => true,
            other => {
                diagnostics.push(source.at(
                    value.span(),
                    format!("on_limit is \"reject\" (the default) or \"delay\", found \"{other}\""),
                ));
                false
            }
        },
    };
    let max_delay = raw
        .max_delay
        .as_ref()
        .and_then(|text| match parse_duration(text.get_ref()) {
            Some(max) if !max.is_zero() && max <= MAX_DELAY_CEILING => Some((max, text.span())),
            _ => {
                diagnostics.push(source.at(
                    text.span(),
                    format!(
                        "max_delay \"{}\" is not a duration between 1ms and 1h like \"2s\"",
                        text.get_ref()
                    ),
                ));
                None
            }
        });
    if !delaying {
        for (field, span) in [
            ("max_delay", raw.max_delay.as_ref().map(|f| f.span())),
            ("delay_after", raw.delay_after.as_ref().map(|f| f.span())),
        ] {
            if let Some(span) = span {
                diagnostics.push(source.at(
                    span,
                    format!(
                        "{field} applies with on_limit = \"delay\"; rule \"{name}\" refuses at once"
                    ),
                ));
            }
        }
    }
    if delaying
        && let Some(delay) = check_delay(
            source,
            raw,
            rule_span.clone(),
            context,
            max_delay,
            diagnostics,
        )
    {
        shaping = shaping.with_delay(delay);
    }
    if let Some(text) = &raw.warmup {
        match parse_duration(text.get_ref()) {
            Some(period) if !period.is_zero() => {
                if context.algorithm != Algorithm::Gcra {
                    diagnostics.push(source.at(
                        text.span(),
                        format!(
                            "warmup applies to algorithm = \"gcra\": a {} has no stored tokens to warm",
                            context.algorithm
                        ),
                    ));
                } else if context.quotas.len() > 1 {
                    diagnostics.push(source.at(
                        text.span(),
                        format!(
                            "warmup applies to a rule with one rate; rule \"{name}\" has {}",
                            context.quotas.len()
                        ),
                    ));
                } else {
                    shaping = shaping.with_warmup(period);
                }
            }
            _ => diagnostics.push(source.at(
                text.span(),
                format!(
                    "warmup \"{}\" is not a duration like \"30s\"",
                    text.get_ref()
                ),
            )),
        }
    }
    if context.algorithm == Algorithm::SlidingLog {
        for quota in context.quotas {
            let count = quota.rate().count();
            if count > MAX_LOG_LIMIT {
                let at = raw.rate.as_ref().map_or(rule_span.clone(), |r| r.span());
                diagnostics.push(source.at(
                    at,
                    format!(
                        "rate \"{}\" is too large for a sliding-log, which keeps a timestamp per request \
                         ({} KB per client); use algorithm = \"sliding-window\" (two counters, nearly exact) \
                         or a count of at most {MAX_LOG_LIMIT}",
                        quota.rate(),
                        u64::from(count) * 8 / 1024
                    ),
                ));
            }
        }
    }
    shaping
}

/// `on_limit = "delay"`: `max_delay` and `delay_after`, and whether the rule can hold.
fn check_delay(
    source: &SourceText,
    raw: &RawRule,
    rule_span: std::ops::Range<usize>,
    context: &Context<'_>,
    max_delay: Option<(Duration, std::ops::Range<usize>)>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Delay> {
    let name = context.name;
    let at = raw.on_limit.as_ref().map_or(rule_span, |f| f.span());
    if context.algorithm != Algorithm::Gcra {
        diagnostics.push(source.at(
            at,
            format!(
                "on_limit = \"delay\" applies to algorithm = \"gcra\": a {} cannot schedule a request for later",
                context.algorithm
            ),
        ));
        return None;
    }
    if context.counts_status {
        diagnostics.push(source.at(
            at,
            "on_limit = \"delay\" cannot be combined with count_status: a held request has no response yet to count",
        ));
        return None;
    }
    let Some((max, max_span)) = max_delay else {
        if raw.max_delay.is_none() {
            diagnostics.push(source.at(
                at,
                format!("rule \"{name}\" has on_limit = \"delay\" but no max_delay: say how long a request may wait, e.g. max_delay = \"2s\""),
            ));
        }
        return None;
    };
    let after = match &raw.delay_after {
        None => None,
        Some(field) => {
            let smallest_burst = context.quotas.iter().map(Quota::burst).min().unwrap_or(1);
            match u32::try_from(*field.get_ref()) {
                Ok(n) if (1..=smallest_burst).contains(&n) => Some(n),
                _ => {
                    diagnostics.push(source.at(
                        field.span(),
                        format!(
                            "delay_after must be between 1 and the burst ({smallest_burst}), found {}",
                            field.get_ref()
                        ),
                    ));
                    return None;
                }
            }
        }
    };
    let delay = Delay::new(max, after);
    // The bucket's own burst must fit in the wait: what passes at once plus max_delay.
    for quota in context.quotas {
        let spaced =
            u64::from(quota.burst() - after.map_or(quota.burst(), |n| n.min(quota.burst())));
        let needed = Duration::from_nanos(spaced.saturating_mul(quota.interval_nanos()));
        if needed > max {
            let at = raw
                .delay_after
                .as_ref()
                .map_or(max_span.clone(), |f| f.span());
            diagnostics.push(source.at(
                at,
                format!(
                    "burst {} at \"{}\" with delay_after = {} spaces {spaced} requests over {needed:?}, longer than max_delay ({max:?}): raise max_delay or delay_after",
                    quota.burst(),
                    quota.rate(),
                    after.unwrap_or(0),
                ),
            ));
            return None;
        }
    }
    Some(delay)
}

#[cfg(test)]
mod tests {
    use crate::config::Limit;

    use crate::config::compile::compile_for_test as compile;

    #[test]
    fn shaping_fields_compile_into_the_rule() {
        let set = compile(
            "[limits.upload]\nrate = \"5/s\"\nburst = 4\non_limit = \"delay\"\nmax_delay = \"2s\"\ndelay_after = 2\n\
             [limits.upstream]\nrate = \"100/s\"\nper = \"global\"\nwarmup = \"30s\"\n\
             [limits.login]\nrate = \"5/h\"\nalgorithm = \"sliding-log\"\nstrict = true\n",
        )
        .unwrap();
        let limit = |key: &str| set.get(key).unwrap().limit().clone();
        let Limit::Limited { shaping, .. } = limit("upload") else {
            panic!()
        };
        let delay = shaping.delay().unwrap();
        assert_eq!((delay.max().as_secs(), delay.after()), (2, Some(2)));
        let Limit::Limited { shaping, .. } = limit("upstream") else {
            panic!()
        };
        assert_eq!(shaping.warmup().unwrap().as_secs(), 30);
        let Limit::Limited {
            algorithm, strict, ..
        } = limit("login")
        else {
            panic!()
        };
        assert_eq!((algorithm, strict), (crate::Algorithm::SlidingLog, true));
    }

    #[test]
    fn impossible_combinations_are_refused_with_file_line_and_column() {
        let cases = [
            (
                "[limits.a]\nrate = \"5/s\"\non_limit = \"queue\"\n",
                "limits.toml:3:12: on_limit is \"reject\" (the default) or \"delay\", found \"queue\"",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\non_limit = \"delay\"\n",
                "limits.toml:3:12: rule \"a\" has on_limit = \"delay\" but no max_delay",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\nmax_delay = \"1s\"\n",
                "limits.toml:3:13: max_delay applies with on_limit = \"delay\"",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\non_limit = \"delay\"\nmax_delay = \"soon\"\n",
                "limits.toml:4:13: max_delay \"soon\" is not a duration",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\nalgorithm = \"fixed-window\"\non_limit = \"delay\"\nmax_delay = \"1s\"\n",
                "limits.toml:4:12: on_limit = \"delay\" applies to algorithm = \"gcra\": a fixed-window cannot schedule",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\ncount_status = [401]\non_limit = \"delay\"\nmax_delay = \"1s\"\n",
                "limits.toml:4:12: on_limit = \"delay\" cannot be combined with count_status",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\nburst = 20\non_limit = \"delay\"\nmax_delay = \"1s\"\ndelay_after = 2\n",
                "limits.toml:6:15: burst 20 at \"5/1s\" with delay_after = 2 spaces 18 requests over 3.6s, longer than max_delay (1s)",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\nburst = 3\non_limit = \"delay\"\nmax_delay = \"1s\"\ndelay_after = 4\n",
                "limits.toml:6:15: delay_after must be between 1 and the burst (3), found 4",
            ),
            (
                "[limits.a]\nrate = [\"5/s\", \"100/h\"]\nwarmup = \"30s\"\n",
                "limits.toml:3:10: warmup applies to a rule with one rate; rule \"a\" has 2",
            ),
            (
                "[limits.a]\nrate = \"5/s\"\nalgorithm = \"sliding-window\"\nwarmup = \"30s\"\n",
                "limits.toml:4:10: warmup applies to algorithm = \"gcra\"",
            ),
            (
                "[limits.a]\nrate = \"5000/h\"\nalgorithm = \"sliding-log\"\n",
                "limits.toml:2:8: rate \"5000/1h\" is too large for a sliding-log, which keeps a timestamp per request (39 KB per client); use algorithm = \"sliding-window\"",
            ),
            (
                "[limits.a]\nunlimited = true\nwarmup = \"1s\"\n",
                "rule \"a\" is unlimited and cannot also set a rate",
            ),
        ];
        for (text, expected) in cases {
            let error = compile(text).expect_err(text);
            assert!(
                error.contains(expected),
                "{text}\n{error}\nwanted: {expected}"
            );
        }
    }
}
