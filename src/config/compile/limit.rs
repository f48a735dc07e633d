//! One rule's table → its [`Limit`], in steps: an unlimited rule, the fields that only one
//! algorithm takes, the rates and their bursts, the cost, the quotas they come to, then the
//! shaping and concurrency fields (their own files). Every problem is reported; a rule with
//! any is left out.

use std::num::NonZeroU32;
use std::ops::Range;

use toml::Spanned;

use super::super::cost::CostSource;
use super::super::error::Diagnostic;
use super::super::raw::{OneOrMany, RawRule};
use super::super::rule::{Limit, StatusSet};
use super::super::source::SourceText;
use super::at::{At, Written};
use super::cost::{money_rates, settle};
use super::{concurrency, shaping};
use crate::algorithm::Algorithm;
use crate::quota::{Quota, Rate};

/// Validates `rule` (written under `key`) into a [`Limit`]; `None`, with `diagnostics`
/// saying why, if it has problems.
pub(super) fn compile_limit(
    source: &SourceText,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Limit> {
    let at = At {
        source,
        name: key.get_ref(),
        rule: rule.span(),
    };
    let raw = rule.get_ref();
    if raw.unlimited.as_ref().is_some_and(|u| *u.get_ref()) {
        return unlimited(&at, raw, diagnostics);
    }
    let before = diagnostics.len();
    let calendar_zone = raw.calendar.as_ref();
    let algorithm = match (&raw.algorithm, calendar_zone) {
        (Some(algorithm), _) => *algorithm.get_ref(),
        // Calendar periods are counted as fixed windows.
        (None, Some(_)) => Algorithm::FixedWindow,
        (None, None) => Algorithm::Gcra,
    };
    if let Some(zone) = calendar_zone
        && algorithm != Algorithm::FixedWindow
    {
        diagnostics.push(source.at(
            zone.span(),
            format!(
                "calendar quotas count per calendar period, as fixed windows; a {algorithm} cannot (leave algorithm out, or write \"fixed-window\")"
            ),
        ));
    }
    check_algorithm_fields(&at, raw, algorithm, diagnostics);
    let count_status = raw
        .count_status
        .as_ref()
        .and_then(|list| compile_statuses(source, list, diagnostics));
    let concurrency = raw
        .concurrency
        .as_ref()
        .and_then(|field| concurrency::compile_concurrency(source, field, diagnostics));
    let no_rate = OneOrMany(Vec::new());
    let rate_field = match &raw.rate {
        Some(field) => Spanned::new(field.span(), &field.get_ref().0),
        // A cap on requests in flight alone needs no rate; nor does a rule that only
        // carries `also` limits for the requests under it.
        None if (raw.concurrency.is_some() || raw.also.is_some()) && raw.burst.is_none() => {
            Spanned::new(at.rule.clone(), &no_rate.0)
        }
        None => {
            diagnostics.push(source.at(
                at.rule.clone(),
                format!(
                    "rule \"{}\" needs a rate such as \"100/min\", a concurrency, also limits, or unlimited = true",
                    at.name
                ),
            ));
            return None;
        }
    };
    let money_rates = money_rates(&at, raw, &rate_field, diagnostics);
    let rate_field = match &money_rates {
        Some((_, rewritten)) => Spanned::new(rate_field.span(), rewritten),
        None => rate_field,
    };
    let money = money_rates.as_ref().map(|(money, _)| *money);
    let rates = rates(&at, raw, &rate_field, diagnostics);
    let bursts = bursts(&at, raw, &rates, rate_field.get_ref().len(), diagnostics);
    let cost = match money {
        // A money rule's reservation is written in cents.
        Some(money) => money.units_of_cents(cost(source, raw, diagnostics)),
        None => cost(source, raw, diagnostics),
    };
    let mut quotas = if diagnostics.len() == before {
        quotas(&at, raw, &rates, &bursts, cost, diagnostics)
    } else {
        Vec::new()
    };
    if let Some(zone) = calendar_zone
        && diagnostics.len() == before
    {
        calendar(&at, zone, &mut quotas, diagnostics);
    }
    if let Some(field) = &raw.requests
        && diagnostics.len() == before
    {
        requests(
            &at,
            field,
            algorithm,
            count_status.is_some(),
            &mut quotas,
            diagnostics,
        );
    }
    if let Some(field) = &raw.resolution
        && diagnostics.len() == before
    {
        resolution(&at, field, algorithm, &mut quotas, diagnostics);
    }
    let mut settle = raw
        .settle
        .as_ref()
        .and_then(|field| settle(&at, field, count_status.is_some(), diagnostics));
    if let Some(money) = money {
        match settle.as_mut() {
            Some(spec) if spec.from == CostSource::Usage && spec.weights.is_unit() => {
                spec.max = money.units_of_cents(spec.max);
                spec.estimate = spec.estimate.map(|cap| money.units_of_cents(cap));
                spec.money = Some(money);
            }
            Some(spec) if spec.from == CostSource::Usage => diagnostics.push(at.source.at(
                at.rule.clone(),
                format!(
                    "rule \"{}\" counts money: [prices] weighs its tokens, so it takes no weights",
                    at.name
                ),
            )),
            _ => diagnostics.push(at.source.at(
                at.rule.clone(),
                format!(
                    "rule \"{}\" counts money, priced from each response's token usage: give it cost = {{ reserve = CENTS or \"estimate\", from = \"usage\" }}",
                    at.name
                ),
            )),
        }
    }
    let per = raw.per.unwrap_or_default();
    let shaping = if diagnostics.len() == before {
        let context = shaping::Context {
            name: at.name,
            algorithm,
            quotas: &quotas,
            counts_status: count_status.is_some(),
        };
        shaping::compile_shaping(source, raw, at.rule.clone(), &context, diagnostics)
    } else {
        crate::Shaping::NONE
    };
    (diagnostics.len() == before).then(|| Limit::Limited {
        quotas,
        cost,
        per,
        algorithm,
        strict: raw.strict.as_ref().is_some_and(|s| *s.get_ref()),
        shaping,
        concurrency,
        shadow: raw.shadow.as_ref().is_some_and(|s| *s.get_ref()),
        count_status,
        settle,
    })
}

/// `calendar = "ZONE"`: each rate of a day, a week or a month counts per calendar period in
/// that zone; shorter rates keep windows from the epoch; other lengths are refused.
fn calendar(
    at: &At<'_>,
    zone: &Spanned<String>,
    quotas: &mut [Quota],
    diagnostics: &mut Vec<Diagnostic>,
) {
    use crate::quota::{Calendar, CalendarUnit};
    const DAY: u64 = 86_400_000_000_000;
    for quota in quotas.iter_mut() {
        let unit = match quota.period_nanos() {
            DAY => CalendarUnit::Day,
            period if period == 7 * DAY => CalendarUnit::Week,
            period if period == 30 * DAY => CalendarUnit::Month,
            period if period < DAY => continue,
            _ => {
                diagnostics.push(at.source.at(
                    at.rule.clone(),
                    format!(
                        "rule \"{}\" has a calendar, so its rates count per \"day\", \"week\" or \"month\" (or less than a day, from the epoch); {} is none of these",
                        at.name,
                        quota.rate()
                    ),
                ));
                continue;
            }
        };
        match Calendar::new(zone.get_ref(), unit) {
            Ok(calendar) => *quota = quota.with_calendar(calendar),
            Err(error) => {
                diagnostics.push(at.source.at(zone.span(), error.to_string()));
                return;
            }
        }
    }
}

/// `requests = "500/min"` (or several): quotas counting requests, one each, beside the
/// rule's rates of cost — taken at admission, never settled.
fn requests(
    at: &At<'_>,
    field: &Spanned<OneOrMany<String>>,
    algorithm: Algorithm,
    counts_status: bool,
    quotas: &mut Vec<Quota>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    if algorithm == Algorithm::SlidingLog || counts_status {
        diagnostics.push(at.source.at(
            field.span(),
            if counts_status {
                "requests counts every admitted request; count_status charges only some responses: choose one".to_owned()
            } else {
                "requests needs a counter per rate; a sliding-log keeps one log for the rule (use another algorithm)".to_owned()
            },
        ));
        return;
    }
    for (text, span) in &field.get_ref().0 {
        let span = at.field(span.as_ref(), field.span());
        let rate = match text.parse::<Rate>() {
            Ok(rate) => rate,
            Err(error) => {
                diagnostics.push(at.source.at(span, error.to_string()));
                continue;
            }
        };
        match NonZeroU32::new(rate.count()).and_then(|burst| Quota::new(rate, burst)) {
            Some(quota) => quotas.push(quota.counting_requests()),
            None => diagnostics.push(
                at.source
                    .at(span, format!("requests rate \"{rate}\" is out of range")),
            ),
        }
    }
}

/// `resolution = "10s"`: a sliding window counted in sub-windows of that length, each rate's
/// period a whole number of them, at most [`MAX_SUBWINDOWS`](crate::algorithm::subwindow::MAX_SUBWINDOWS).
fn resolution(
    at: &At<'_>,
    field: &Spanned<String>,
    algorithm: Algorithm,
    quotas: &mut [Quota],
    diagnostics: &mut Vec<Diagnostic>,
) {
    use crate::algorithm::subwindow::MAX_SUBWINDOWS;
    if algorithm != Algorithm::SlidingWindow {
        diagnostics.push(at.source.at(
            field.span(),
            format!("resolution applies to algorithm = \"sliding-window\"; a {algorithm} has no sub-windows"),
        ));
        return;
    }
    let Some(length) = crate::quota::parse_duration(field.get_ref())
        .map(crate::clock::duration_nanos)
        .filter(|&n| n > 0)
    else {
        diagnostics.push(at.source.at(
            field.span(),
            format!(
                "resolution \"{}\" is not a duration such as \"10s\"",
                field.get_ref()
            ),
        ));
        return;
    };
    for quota in quotas.iter_mut() {
        let period = quota.period_nanos();
        let k = period / length;
        if !period.is_multiple_of(length) || !(1..=MAX_SUBWINDOWS).contains(&k) {
            diagnostics.push(at.source.at(
                field.span(),
                format!(
                    "resolution {} must divide {}'s period into 1 to {MAX_SUBWINDOWS} equal sub-windows",
                    field.get_ref(),
                    quota.rate()
                ),
            ));
            return;
        }
        *quota = quota.with_resolution(length);
    }
}

/// `unlimited = true`, which may not be combined with anything that limits or counts.
fn unlimited(at: &At<'_>, raw: &RawRule, diagnostics: &mut Vec<Diagnostic>) -> Option<Limit> {
    let others = raw.rate.is_some()
        || raw.burst.is_some()
        || raw.cost.is_some()
        || raw.strict.is_some()
        || raw.shadow.is_some()
        || raw.algorithm.is_some()
        || raw.count_status.is_some()
        || raw.on_limit.is_some()
        || raw.max_delay.is_some()
        || raw.delay_after.is_some()
        || raw.warmup.is_some()
        || raw.concurrency.is_some()
        || raw.calendar.is_some()
        || raw.resolution.is_some()
        || raw.requests.is_some()
        || raw.candidates.is_some()
        || raw.suggest.is_some();
    if others {
        diagnostics.push(at.source.at(
            at.rule.clone(),
            format!(
                "rule \"{}\" is unlimited and cannot also set a rate or how it is counted",
                at.name
            ),
        ));
        return None;
    }
    Some(Limit::Unlimited)
}

/// `burst` and `strict` belong to GCRA (`strict` to the sliding log too).
fn check_algorithm_fields(
    at: &At<'_>,
    raw: &RawRule,
    algorithm: Algorithm,
    diagnostics: &mut Vec<Diagnostic>,
) {
    if algorithm == Algorithm::Gcra {
        return;
    }
    if let Some(burst) = &raw.burst {
        diagnostics.push(at.source.at(
            burst.span(),
            format!("burst applies to algorithm = \"gcra\"; a {algorithm} allows each rate's count per period"),
        ));
    }
    if let Some(strict) = raw
        .strict
        .as_ref()
        .filter(|s| *s.get_ref() && algorithm != Algorithm::SlidingLog)
    {
        diagnostics.push(at.source.at(
            strict.span(),
            format!(
                "strict applies to algorithm = \"gcra\": a {algorithm} has no refill to hold back"
            ),
        ));
    }
}

/// Each rate of `rate = "…"` or `rate = [ … ]`, with where it is written.
fn rates(
    at: &At<'_>,
    raw: &RawRule,
    field: &Spanned<&Written<String>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(Rate, Range<usize>)> {
    let mut rates = Vec::new();
    for (text, span) in field.get_ref().iter() {
        let span = at.field(span.as_ref(), field.span());
        match text.parse::<Rate>() {
            Ok(rate) => rates.push((rate, span)),
            Err(error) => diagnostics.push(at.source.at(span, error.to_string())),
        }
    }
    if raw.rate.is_some() && field.get_ref().is_empty() {
        diagnostics.push(at.source.at(field.span(), "rate list is empty"));
    }
    rates
}

/// Each rate's burst: given one per rate, or each rate's own count.
fn bursts(
    at: &At<'_>,
    raw: &RawRule,
    rates: &[(Rate, Range<usize>)],
    rates_written: usize,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(i64, Range<usize>)> {
    let Some(field) = &raw.burst else {
        return rates
            .iter()
            .map(|(rate, span)| (i64::from(rate.count()), span.clone()))
            .collect();
    };
    let OneOrMany(items) = field.get_ref();
    if items.len() != rates_written {
        diagnostics.push(at.source.at(
            field.span(),
            format!(
                "rule \"{}\" has {rates_written} rate(s) but {} burst value(s); give one burst per rate, or none",
                at.name,
                items.len()
            ),
        ));
        return Vec::new();
    }
    items
        .iter()
        .map(|(burst, span)| (*burst, at.field(span.as_ref(), field.span())))
        .collect()
}

/// `cost`: at least 1, by default 1.
fn cost(source: &SourceText, raw: &RawRule, diagnostics: &mut Vec<Diagnostic>) -> u64 {
    match &raw.cost {
        None => 1,
        Some(cost) if *cost.get_ref() < 1 => {
            diagnostics.push(source.at(
                cost.span(),
                format!(
                    "cost must be at least 1, found {} (to exempt a route use unlimited = true)",
                    cost.get_ref()
                ),
            ));
            1
        }
        Some(cost) => u64::try_from(*cost.get_ref()).unwrap_or(1),
    }
}

/// The quotas the rates and bursts come to, refusing a burst no request of `cost` fits.
fn quotas(
    at: &At<'_>,
    raw: &RawRule,
    rates: &[(Rate, Range<usize>)],
    bursts: &[(i64, Range<usize>)],
    cost: u64,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<Quota> {
    let mut quotas = Vec::new();
    for ((rate, _), (burst, burst_span)) in rates.iter().zip(bursts) {
        let Some(burst) = u32::try_from(*burst).ok().and_then(NonZeroU32::new) else {
            diagnostics.push(at.source.at(
                burst_span.clone(),
                format!("burst must be between 1 and 4294967295, found {burst}"),
            ));
            continue;
        };
        if cost > u64::from(burst.get()) {
            let span = raw.cost.as_ref().map_or(at.rule.clone(), Spanned::span);
            diagnostics.push(at.source.at(
                span,
                format!(
                    "cost {cost} is larger than burst {burst} of rate \"{rate}\": such a request could never pass"
                ),
            ));
            continue;
        }
        match Quota::new(*rate, burst) {
            Some(quota) => quotas.push(quota),
            None => diagnostics.push(at.source.at(
                burst_span.clone(),
                format!("burst {burst} at \"{rate}\" takes longer than 584 years to refill"),
            )),
        }
    }
    quotas
}

/// `count_status = [401, 403, "5xx"]`.
fn compile_statuses(
    source: &SourceText,
    list: &Spanned<Vec<Spanned<toml::Value>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<StatusSet> {
    let (mut codes, mut classes) = (Vec::new(), Vec::new());
    for item in list.get_ref() {
        match item.get_ref() {
            toml::Value::Integer(code @ 100..=599) => codes.push(*code as u16),
            toml::Value::String(class)
                if class.len() == 3
                    && class.ends_with("xx")
                    && matches!(class.as_bytes()[0], b'1'..=b'5') =>
            {
                classes.push(char::from(class.as_bytes()[0]));
            }
            other => {
                let found = match other {
                    toml::Value::String(text) => format!("\"{text}\""),
                    toml::Value::Integer(number) => number.to_string(),
                    other => other.type_str().to_owned(),
                };
                diagnostics.push(source.at(
                    item.span(),
                    format!(
                        "count_status takes status codes (401) or classes (\"5xx\"), found {found}"
                    ),
                ));
            }
        }
    }
    if list.get_ref().is_empty() {
        diagnostics.push(source.at(
            list.span(),
            "count_status is empty: list the statuses that take tokens",
        ));
        return None;
    }
    Some(StatusSet::new(codes, classes))
}
