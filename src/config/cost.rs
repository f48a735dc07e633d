//! What a request costs when the response says: a reservation settled from the response
//! (`cost = { reserve, from, max, weights }`), where the figure is read, and how token
//! counts are weighed into one cost.

use std::fmt;

/// A reservation settled when the response ends (`cost = { reserve = N, from = … }`):
/// where the actual cost is read, and the most that is believed.
///
/// ```
/// use tollgate::config::{CostSource, RuleSet};
///
/// let rules = RuleSet::from_toml(
///     "[limits]\nllm = { rate = \"60000/min\", cost = { reserve = 1000, from = \"json:/usage/total_tokens\" } }\n",
/// )?;
/// let llm = rules.get("llm").unwrap();
/// assert_eq!(llm.cost(), 1000, "reserved at admission");
/// let settle = llm.settle().unwrap();
/// assert_eq!(settle.from, CostSource::Json("/usage/total_tokens".into()));
/// assert_eq!(settle.from.to_string(), "json:/usage/total_tokens");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settle {
    /// Where the actual figure is read.
    pub from: CostSource,
    /// The largest figure believed; above it the reservation stands (and it is counted as
    /// a fault). For a rule reserving an estimate, the default (1,000,000,000): its
    /// written `max` caps the estimate instead.
    pub max: u64,
    /// How token counts weigh (`from = "usage"` and estimates).
    pub weights: Weights,
    /// `reserve = "estimate"` with its `max`: the reservation is estimated from the
    /// request's JSON body (its prompt text and output ceiling, weighted), at most this;
    /// without an estimate, this is reserved.
    pub estimate: Option<u64>,
    /// A money rule's unit (`rate = "$50/month"`): the usage is priced by `[prices]`, and
    /// `reserve` and `max` are counted in that unit.
    pub money: Option<super::money::Money>,
}

impl Settle {
    /// What a request reserves under this rule when it estimates (`reserve =
    /// "estimate"`): its prompt's tokens and output ceiling from `json`, weighed (or, for
    /// a money rule, priced by the request's model in `prices`), at least 1 and at most
    /// the rule's `max`. `Err` says why `max` is reserved instead; `None` for a rule that
    /// does not estimate.
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    /// use tollgate::key::RequestJson;
    ///
    /// let rules = RuleSet::from_toml(
    ///     "[limits]\nllm = { rate = \"60000/min\", cost = { reserve = \"estimate\", from = \"usage\", max = 8000, weights = { output = 4 } } }\n",
    /// )?;
    /// let settle = rules.get("llm").unwrap().settle().unwrap();
    /// let body = RequestJson::read(br#"{"max_tokens":100,"messages":[{"role":"user","content":"abcdefgh"}]}"#, &[]);
    /// assert_eq!(settle.estimate_for(Some(&body), rules.prices()), Some(Ok(2 + 4 * 100)));
    /// assert!(settle.estimate_for(None, rules.prices()).unwrap().is_err(), "no body: max");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn estimate_for(
        &self,
        json: Option<&crate::key::RequestJson>,
        prices: &super::money::Prices,
    ) -> Option<Result<u64, EstimateFallback>> {
        let cap = self.estimate?;
        let json = match json {
            None => return Some(Err(EstimateFallback::NotRead)),
            Some(json) if json.problem().is_some() => {
                return Some(Err(EstimateFallback::Unreadable));
            }
            Some(json) => json,
        };
        let Some(money) = self.money else {
            let usage = Usage {
                input: json.prompt_tokens(),
                cached: 0,
                output: json.output_ceiling().unwrap_or(cap),
            };
            return Some(Ok(self.weights.cost(usage).clamp(1, cap)));
        };
        // Money: the tokens priced by the request's model; without a ceiling, `max`.
        let Some(ceiling) = json.output_ceiling() else {
            return Some(Ok(cap));
        };
        let Some(price) = json.model().and_then(|model| prices.find(model)) else {
            return Some(Err(EstimateFallback::NoPrice));
        };
        let usage = Usage {
            input: json.prompt_tokens(),
            cached: 0,
            output: ceiling,
        };
        Some(Ok(money.units(price.micros(usage)).clamp(1, cap)))
    }
}

/// Why an estimate fell back to the rule's `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EstimateFallback {
    /// The request's body was not read (no [`ReadBodyLayer`](crate::ReadBodyLayer)).
    NotRead,
    /// The body is not JSON, is larger than 1 MiB, or failed while read.
    Unreadable,
    /// A money rule, and the request's model has no price in `[prices]`.
    NoPrice,
}

impl fmt::Display for EstimateFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EstimateFallback::NotRead => {
                "the request's body was not read (put ReadBodyLayer outside the rate-limit layer)"
            }
            EstimateFallback::Unreadable => {
                "the request's body is not JSON, is larger than 1 MiB, or failed while read"
            }
            EstimateFallback::NoPrice => "the request's model has no price in [prices]",
        })
    }
}

/// Where a response says what it cost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostSource {
    /// `header:NAME`: a response header, read when the response starts.
    Header(http::HeaderName),
    /// `trailer:NAME`: an HTTP trailer, read when the body ends.
    Trailer(http::HeaderName),
    /// `json:/pointer`: a JSON body's field by JSON pointer (RFC 6901), read when the
    /// body ends; for `text/event-stream` bodies, the last event whose data holds it.
    Json(String),
    /// `usage`: the token usage of an OpenAI (Chat Completions or Responses), Anthropic
    /// Messages or Gemini response, as a JSON body or server-sent events, weighed by the
    /// rule's [`Weights`].
    Usage,
}

impl fmt::Display for CostSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostSource::Header(name) => write!(f, "header:{name}"),
            CostSource::Trailer(name) => write!(f, "trailer:{name}"),
            CostSource::Json(pointer) => write!(f, "json:{pointer}"),
            CostSource::Usage => f.write_str("usage"),
        }
    }
}

impl std::str::FromStr for CostSource {
    type Err = String;

    fn from_str(text: &str) -> Result<CostSource, String> {
        let text = text.trim();
        let header = |name: &str| {
            http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("\"{}\" is not a header name", name.escape_debug()))
        };
        if text == "usage" {
            return Ok(CostSource::Usage);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return header(name).map(CostSource::Header);
        }
        if let Some(name) = text.strip_prefix("trailer:") {
            return header(name).map(CostSource::Trailer);
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                return Err(format!(
                    "\"{}\" is not a JSON pointer (it starts with '/': \"json:/usage/total_tokens\")",
                    pointer.escape_debug()
                ));
            }
            return Ok(CostSource::Json(pointer.to_owned()));
        }
        Err(format!(
            "cost source \"{}\" must be \"usage\", \"header:NAME\", \"trailer:NAME\" or \"json:/pointer\"",
            text.escape_debug()
        ))
    }
}

/// Token counts of one response (or one request's estimate), normalised across APIs:
/// `input` is input not read from a cache, `cached` the input that was, `output` what was
/// generated.
///
/// ```
/// use tollgate::config::Usage;
///
/// let usage = Usage { input: 100, cached: 900, output: 50 };
/// assert_eq!(usage.total(), 1050);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens not read from a cache.
    pub input: u64,
    /// Input tokens read from a cache.
    pub cached: u64,
    /// Output tokens (including reasoning tokens where the API counts them apart).
    pub output: u64,
}

impl Usage {
    /// All three counts together.
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.cached)
            .saturating_add(self.output)
    }
}

impl super::money::Price {
    /// What `usage` costs, in micro-units of the currency, rounded up.
    pub fn micros(&self, usage: Usage) -> u128 {
        let sum = u128::from(usage.input) * u128::from(self.input)
            + u128::from(usage.cached) * u128::from(self.cached)
            + u128::from(usage.output) * u128::from(self.output);
        sum.div_ceil(u128::from(super::money::MICROS))
    }
}

/// How much each kind of token weighs in a cost: `weights = { input = 1, output = 4,
/// cached = 0.1 }`. A kind without a weight weighs 1; weights are kept exactly to a
/// millionth, and a weighted sum is rounded up.
///
/// ```
/// use tollgate::config::{RuleSet, Usage};
///
/// let rules = RuleSet::from_toml(
///     "[limits]\nllm = { rate = \"60000/min\", cost = { reserve = 1000, from = \"usage\", weights = { output = 4, cached = 0.1 } } }\n",
/// )?;
/// let weights = rules.get("llm").unwrap().settle().unwrap().weights;
/// // 100 input + 4 × 50 output + 0.1 × 905 cached = 390.5, rounded up.
/// assert_eq!(weights.cost(Usage { input: 100, cached: 905, output: 50 }), 391);
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weights {
    /// Millionths: input, cached, output.
    micros: [u64; 3],
}

/// A weight of 1, in millionths.
const ONE: u64 = 1_000_000;

impl Default for Weights {
    fn default() -> Weights {
        Weights { micros: [ONE; 3] }
    }
}

impl Weights {
    /// The largest weight accepted.
    pub const MAX: f64 = 1_000_000.0;

    /// Weights of `input`, `cached` and `output` tokens; `None` if one is negative, not
    /// finite or above [`Weights::MAX`].
    pub fn new(input: f64, cached: f64, output: f64) -> Option<Weights> {
        let micros = |weight: f64| {
            (weight.is_finite() && (0.0..=Weights::MAX).contains(&weight))
                // In range: at most 10^12 millionths, exact in an f64.
                .then(|| (weight * ONE as f64).round() as u64)
        };
        Some(Weights {
            micros: [micros(input)?, micros(cached)?, micros(output)?],
        })
    }

    /// Whether every weight is 1 (the cost is the total).
    pub fn is_unit(&self) -> bool {
        self.micros == [ONE; 3]
    }

    /// The weighted sum of `usage`, rounded up (saturating at `u64::MAX`).
    pub fn cost(&self, usage: Usage) -> u64 {
        let counts = [usage.input, usage.cached, usage.output];
        let micros: u128 = counts
            .iter()
            .zip(self.micros)
            .map(|(&count, weight)| u128::from(count) * u128::from(weight))
            .sum();
        u64::try_from(micros.div_ceil(u128::from(ONE))).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let weight = |micros: u64| micros as f64 / ONE as f64;
        write!(
            f,
            "input {} · cached {} · output {}",
            weight(self.micros[0]),
            weight(self.micros[1]),
            weight(self.micros[2])
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_exact_and_round_up() {
        let tenth = Weights::new(1.0, 0.1, 1.0).unwrap();
        // 0.1 × 10 is exactly 1, not 1.0000000000000002 rounded up to 2.
        assert_eq!(
            tenth.cost(Usage {
                input: 0,
                cached: 10,
                output: 0
            }),
            1
        );
        assert_eq!(
            tenth.cost(Usage {
                input: 0,
                cached: 11,
                output: 0
            }),
            2
        );
        assert_eq!(
            Weights::default().cost(Usage {
                input: 3,
                cached: 4,
                output: 5
            }),
            12
        );
        let huge = Usage {
            input: u64::MAX,
            cached: u64::MAX,
            output: u64::MAX,
        };
        assert_eq!(
            Weights::new(Weights::MAX, 1.0, 1.0).unwrap().cost(huge),
            u64::MAX
        );
    }

    #[test]
    fn bad_weights_are_refused() {
        for bad in [-0.5, f64::NAN, f64::INFINITY, Weights::MAX * 2.0] {
            assert_eq!(Weights::new(bad, 1.0, 1.0), None, "{bad}");
        }
        assert!(Weights::new(0.0, 0.0, 0.0).is_some());
    }
}
