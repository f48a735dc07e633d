//! Money budgets: a rule written `rate = "$50/month"` counts what responses cost, priced
//! per model by `[prices]`, exactly, in integers.
//!
//! Amounts are kept in micro-units of the currency (a millionth of a dollar, euro or
//! pound). A money rule's bucket counts a unit of its own — one micro-unit, or ten, a
//! hundred… when the budget is larger than 4,294,967,295 micro-units — fixed when the
//! rule is compiled, so every figure stays a whole number and nothing is floating point.
//!
//! ```
//! use tollgate::config::{RuleSet, Usage};
//!
//! let rules = RuleSet::from_toml(concat!(
//!     "[prices.\"gpt-4o*\"]\ninput = \"2.50/1M\"\noutput = \"10.00/1M\"\ncached = \"1.25/1M\"\n",
//!     "[prices.\"*\"]\ninput = \"1/1M\"\noutput = \"1/1M\"\n",
//!     "[limits]\nllm = { rate = \"$50/month\", cost = { reserve = 5, from = \"usage\" } }\n",
//! ))?;
//! let price = rules.prices().find("gpt-4o-2024-08-06").unwrap();
//! // 1M input tokens at $2.50, 100k output at $10 a million: $3.50.
//! assert_eq!(price.micros(Usage { input: 1_000_000, cached: 0, output: 100_000 }), 3_500_000);
//! let money = rules.get("llm").unwrap().settle().unwrap().money.unwrap();
//! assert_eq!(money.cents(money.units(3_500_000)), 350);
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```

use std::fmt;

/// A micro-unit is a millionth of the currency; a cent is 10,000 of them.
const MICROS_PER_CENT: u64 = 10_000;
pub(super) const MICROS: u64 = 1_000_000;

/// The currencies a budget may be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Currency {
    /// `$`
    Dollar,
    /// `€`
    Euro,
    /// `£`
    Pound,
}

impl Currency {
    /// The currency whose symbol starts `text`, and the rest.
    fn split(text: &str) -> Option<(Currency, &str)> {
        let text = text.trim_start();
        [
            ('$', Currency::Dollar),
            ('€', Currency::Euro),
            ('£', Currency::Pound),
        ]
        .into_iter()
        .find_map(|(symbol, currency)| Some((currency, text.strip_prefix(symbol)?)))
    }

    /// Its symbol.
    pub fn symbol(self) -> char {
        match self {
            Currency::Dollar => '$',
            Currency::Euro => '€',
            Currency::Pound => '£',
        }
    }
}

/// What a money rule's bucket counts: its currency, and how many micro-units one token of
/// the bucket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Money {
    /// The currency.
    pub currency: Currency,
    /// Micro-units a token of the bucket stands for (1, 10, 100…).
    pub unit_micros: u64,
}

impl Money {
    /// Tokens of the bucket for `micros` micro-units, rounded up (a response never costs
    /// less than it did).
    pub fn units(&self, micros: u128) -> u64 {
        u64::try_from(micros.div_ceil(u128::from(self.unit_micros))).unwrap_or(u64::MAX)
    }

    /// Tokens of the bucket for `cents`.
    pub fn units_of_cents(&self, cents: u64) -> u64 {
        self.units(u128::from(cents) * u128::from(MICROS_PER_CENT))
    }

    /// `units` tokens of the bucket as an amount, `$12.5` (exact: trailing zeros left out).
    pub fn amount(&self, units: u64) -> String {
        let micros = u128::from(units) * u128::from(self.unit_micros);
        let whole = micros / u128::from(MICROS);
        let fraction = micros % u128::from(MICROS);
        let symbol = self.currency.symbol();
        if fraction == 0 {
            return format!("{symbol}{whole}");
        }
        let digits = format!("{fraction:06}");
        format!("{symbol}{whole}.{}", digits.trim_end_matches('0'))
    }

    /// Whole cents for `units` tokens of the bucket (rounded down): what headers report.
    pub fn cents(&self, units: u64) -> u64 {
        let cents = u128::from(units) * u128::from(self.unit_micros) / u128::from(MICROS_PER_CENT);
        u64::try_from(cents).unwrap_or(u64::MAX)
    }
}

/// A money rate (`"$50/month"`) as the rate the bucket counts: `None` if `text` is not
/// money; the amount's micro-units and its period otherwise.
pub(crate) fn money_rate(text: &str) -> Option<Result<(Currency, u64, &str), String>> {
    let (currency, rest) = Currency::split(text)?;
    let Some((amount, period)) = rest.split_once('/') else {
        return Some(Err(format!(
            "expected a money rate like \"$50/month\", found \"{}\"",
            text.escape_debug()
        )));
    };
    Some(match micros_of(amount.trim()) {
        Some(0) | None => Err(format!(
            "\"{}\" is not an amount of money above 0 with at most 6 decimals (\"$50\", \"€0.25\")",
            amount.trim().escape_debug()
        )),
        Some(micros) => Ok((currency, micros, period)),
    })
}

/// Money rates (each currency, micro-units and period) as rates of one bucket: the unit
/// (a power of ten of micro-units, so the largest amount fits the rate grammar's count)
/// and each rate's text.
pub(crate) fn bucket_rates(
    rates: &[(Currency, u64, &str)],
) -> Result<(Money, Vec<String>), String> {
    let Some(&(currency, _, _)) = rates.first() else {
        return Err("no money rate".into());
    };
    if rates.iter().any(|(c, _, _)| *c != currency) {
        return Err("a rule's money rates must all be in one currency".into());
    }
    let largest = rates
        .iter()
        .map(|(_, micros, _)| *micros)
        .max()
        .unwrap_or(1);
    let mut unit_micros: u64 = 1;
    while largest.div_ceil(unit_micros) > u64::from(u32::MAX) {
        unit_micros = unit_micros.saturating_mul(10);
    }
    let money = Money {
        currency,
        unit_micros,
    };
    let texts = rates
        .iter()
        .map(|(_, micros, period)| format!("{}/{period}", micros.div_ceil(unit_micros)))
        .collect();
    Ok((money, texts))
}

/// A decimal amount (`"2.50"`) in micro-units; `None` if it is not one (or has more than
/// six decimals, or is too large).
fn micros_of(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 6
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u64>().ok()? * 10u64.pow(6 - fraction.len() as u32)
    };
    whole.checked_mul(MICROS)?.checked_add(fraction)
}

/// What a model's tokens cost: micro-units of the currency per million tokens of each
/// kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Price {
    /// Per million input tokens not cached.
    pub input: u64,
    /// Per million cached input tokens.
    pub cached: u64,
    /// Per million output tokens.
    pub output: u64,
}

impl Price {
    /// A price as written, `"2.50/1M"` (per million tokens) or `"0.0025/1K"` (per
    /// thousand), in micro-units per million tokens.
    pub(crate) fn parse_one(text: &str) -> Result<u64, String> {
        let bad = || {
            format!(
                "price \"{}\" must be an amount per million or thousand tokens, like \"2.50/1M\" or \"0.0025/1K\"",
                text.escape_debug()
            )
        };
        let text = text.trim();
        let text = Currency::split(text).map_or(text, |(_, rest)| rest);
        let (amount, per) = text.split_once('/').ok_or_else(bad)?;
        let micros = micros_of(amount.trim()).ok_or_else(bad)?;
        match per.trim() {
            "1M" | "1m" | "M" => Ok(micros),
            "1K" | "1k" | "K" => micros.checked_mul(1000).ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

/// `[prices]`: each model's [`Price`], by exact name or by prefix (a key ending in `*`),
/// the longest match winning, `"*"` alone for any other model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prices {
    /// (pattern without its `*`, whether it is a prefix, price), longest first.
    entries: Vec<(String, bool, Price)>,
}

impl Prices {
    /// Adds (or replaces) the price of `pattern`.
    pub(crate) fn insert(&mut self, pattern: &str, price: Price) {
        let (name, prefix) = match pattern.strip_suffix('*') {
            Some(stem) => (stem.to_owned(), true),
            None => (pattern.to_owned(), false),
        };
        self.entries
            .retain(|(n, p, _)| !(n == &name && *p == prefix));
        self.entries.push((name, prefix, price));
        // Longest first; an exact name before a prefix of the same length.
        self.entries
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
    }

    /// The price of `model`: its exact entry, else the longest prefix entry matching it.
    pub fn find(&self, model: &str) -> Option<&Price> {
        self.entries
            .iter()
            .find(|(name, prefix, _)| {
                if *prefix {
                    model.starts_with(name.as_str())
                } else {
                    model == name
                }
            })
            .map(|(_, _, price)| price)
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (cents)", self.currency.symbol())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_exact() {
        assert_eq!(micros_of("2.50"), Some(2_500_000));
        assert_eq!(micros_of(".5"), Some(500_000));
        assert_eq!(micros_of("0.000001"), Some(1));
        assert_eq!(micros_of("0.0000001"), None, "seven decimals");
        assert_eq!(micros_of("-1"), None);
        assert_eq!(micros_of("1e3"), None);
        assert_eq!(Price::parse_one("0.0025/1K"), Ok(2_500_000));
        assert_eq!(Price::parse_one("$10.00/1M"), Ok(10_000_000));
        assert!(Price::parse_one("ten/1M").is_err());
        assert!(Price::parse_one("10/hour").is_err());
    }

    #[test]
    fn large_budgets_count_a_coarser_unit() {
        let (money, rates) = bucket_rates(&[(Currency::Dollar, 50_000_000, "month")]).unwrap();
        assert_eq!(
            (money.unit_micros, rates[0].as_str()),
            (1, "50000000/month")
        );
        let (money, rates) = bucket_rates(&[
            (Currency::Euro, 10_000 * MICROS, "month"),
            (Currency::Euro, 500 * MICROS, "day"),
        ])
        .unwrap();
        assert_eq!(money.unit_micros, 10);
        assert_eq!(rates, ["1000000000/month", "50000000/day"]);
        assert_eq!(money.cents(money.units_of_cents(1234)), 1234);
        assert!(bucket_rates(&[(Currency::Euro, 1, "s"), (Currency::Dollar, 1, "s")]).is_err());
    }

    #[test]
    fn the_longest_pattern_prices_a_model() {
        let mut prices = Prices::default();
        let price = |n| Price {
            input: n,
            cached: 0,
            output: 0,
        };
        prices.insert("*", price(1));
        prices.insert("gpt-4o*", price(2));
        prices.insert("gpt-4o-mini*", price(3));
        prices.insert("gpt-4o", price(4));
        assert_eq!(prices.find("gpt-4o-mini-2024").unwrap().input, 3);
        assert_eq!(prices.find("gpt-4o-2024").unwrap().input, 2);
        assert_eq!(prices.find("gpt-4o").unwrap().input, 4);
        assert_eq!(prices.find("claude").unwrap().input, 1);
        prices.entries.retain(|(name, _, _)| !name.is_empty());
        assert_eq!(prices.find("claude"), None);
    }
}
