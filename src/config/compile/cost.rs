//! A rule's cost table, compiled: a reservation settled from the response (`cost =
//! { reserve, from, max, weights }`) and money rates (`rate = "$50/month"`).

use toml::Spanned;

use super::super::cost::{CostSource, Weights};
use super::super::error::Diagnostic;
use super::super::money::{self, Money};
use super::super::raw::{RawReserve, RawRule};
use super::at::{At, Written};

/// `cost = { reserve, from, max }`: where the actual figure is read, and the most believed.
pub(super) fn settle(
    at: &At<'_>,
    field: &Spanned<crate::config::raw::RawSettle>,
    counts_status: bool,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<crate::config::Settle> {
    /// The largest figure believed unless `max` says.
    const DEFAULT_MAX: u64 = 1_000_000_000;
    let raw = field.get_ref();
    if counts_status {
        diagnostics.push(at.source.at(
            field.span(),
            format!(
                "rule \"{}\" charges by status (count_status) and by the response's own figure (cost.from): choose one",
                at.name
            ),
        ));
        return None;
    }
    let from = match raw.from.get_ref().parse::<CostSource>() {
        Ok(from) => from,
        Err(message) => {
            diagnostics.push(at.source.at(raw.from.span(), message));
            return None;
        }
    };
    let (reserved, estimate) = match raw.reserve.get_ref() {
        RawReserve::Tokens(n) => (*n, false),
        RawReserve::Word(word) if word == "estimate" => match &raw.max {
            Some(max) => (*max.get_ref(), true),
            None => {
                diagnostics.push(at.source.at(
                    raw.reserve.span(),
                    format!(
                        "rule \"{}\" reserves an estimate: give it a max (reserved when a request's body gives no estimate, and the output ceiling when it names none)",
                        at.name
                    ),
                ));
                return None;
            }
        },
        RawReserve::Word(word) => {
            diagnostics.push(at.source.at(
                raw.reserve.span(),
                format!(
                    "reserve must be a number of tokens or \"estimate\", found \"{}\"",
                    word.escape_debug()
                ),
            ));
            return None;
        }
    };
    let max = match &raw.max {
        None => DEFAULT_MAX,
        Some(max) => match u64::try_from(*max.get_ref()) {
            Ok(n) if n >= 1 && i64::try_from(n).is_ok_and(|n| n >= reserved) => n,
            _ => {
                diagnostics.push(at.source.at(
                    max.span(),
                    format!(
                        "max must be at least the reservation ({reserved}), found {}",
                        max.get_ref()
                    ),
                ));
                return None;
            }
        },
    };
    let weights = match &raw.weights {
        None => Weights::default(),
        Some(weights) => {
            let given = weights.get_ref();
            let one = |weight: Option<f64>| weight.unwrap_or(1.0);
            match Weights::new(one(given.input), one(given.cached), one(given.output)) {
                Some(weights) => weights,
                None => {
                    diagnostics.push(at.source.at(
                        weights.span(),
                        format!(
                            "weights must be numbers from 0 to {}, found {{ input = {}, output = {}, cached = {} }}",
                            Weights::MAX,
                            one(given.input),
                            one(given.output),
                            one(given.cached)
                        ),
                    ));
                    return None;
                }
            }
        }
    };
    if !weights.is_unit() && !matches!(from, CostSource::Usage) && !estimate {
        diagnostics.push(at.source.at(
            raw.weights.as_ref().map_or(field.span(), Spanned::span),
            format!(
                "rule \"{}\" weighs token counts, but reads one figure from {from}: weights need from = \"usage\" or reserve = \"estimate\"",
                at.name
            ),
        ));
        return None;
    }
    Some(crate::config::Settle {
        from,
        // An estimate's `max` caps what is reserved; figures are believed up to the default.
        max: if estimate { DEFAULT_MAX } else { max },
        weights,
        estimate: estimate.then_some(max),
        money: None,
    })
}

/// Money rates (`rate = "$50/month"`): the rule's [`Money`] and its rates rewritten as
/// counts of the bucket's unit; `None` for a rule counting tokens.
pub(super) fn money_rates(
    at: &At<'_>,
    raw: &RawRule,
    rates: &Spanned<&Written<String>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<(Money, Written<String>)> {
    let read: Vec<_> = rates
        .get_ref()
        .iter()
        .map(|(text, _)| money::money_rate(text))
        .collect();
    if read.iter().all(Option::is_none) {
        return None;
    }
    let mut parsed = Vec::new();
    for ((text, span), money) in rates.get_ref().iter().zip(read) {
        let span = at.field(span.as_ref(), rates.span());
        match money {
            Some(Ok(money)) => parsed.push(money),
            Some(Err(message)) => diagnostics.push(at.source.at(span, message)),
            None => diagnostics.push(at.source.at(
                span,
                format!(
                    "rule \"{}\" mixes money and token rates (\"{}\"): a bucket counts one or the other",
                    at.name,
                    text.escape_debug()
                ),
            )),
        }
    }
    if let Some(burst) = &raw.burst {
        diagnostics.push(at.source.at(
            burst.span(),
            format!(
                "rule \"{}\" counts money: its burst is its amount (leave burst out)",
                at.name
            ),
        ));
    }
    if parsed.len() != rates.get_ref().len() {
        return None;
    }
    match money::bucket_rates(&parsed) {
        Ok((money, texts)) => Some((
            money,
            texts
                .into_iter()
                .zip(rates.get_ref().iter())
                .map(|(text, (_, span))| (text, span.clone()))
                .collect(),
        )),
        Err(message) => {
            diagnostics.push(at.source.at(rates.span(), message));
            None
        }
    }
}
