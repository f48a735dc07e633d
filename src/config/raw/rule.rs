//! One entry of `[limits]` as written — a bare rate, or a table of a rule's fields, with
//! its `also` limits, its cost and what settles it — and `per`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::algorithm::Algorithm;

use super::one_or_many::OneOrMany;

/// `per = "client" | "global"`
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// One bucket per client (the default).
    #[default]
    Client,
    /// One bucket shared by every client.
    Global,
}

/// One entry of `[limits]`: a bare rate string or a table.
#[derive(Clone, Debug, Default)]
pub(crate) struct RawRule {
    pub(crate) rate: Option<Spanned<OneOrMany<String>>>,
    pub(crate) burst: Option<Spanned<OneOrMany<i64>>>,
    pub(crate) cost: Option<Spanned<i64>>,
    pub(crate) per: Option<Per>,
    pub(crate) unlimited: Option<Spanned<bool>>,
    pub(crate) strict: Option<Spanned<bool>>,
    pub(crate) shadow: Option<Spanned<bool>>,
    pub(crate) algorithm: Option<Spanned<Algorithm>>,
    pub(crate) count_status: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    pub(crate) on_limit: Option<Spanned<String>>,
    pub(crate) max_delay: Option<Spanned<String>>,
    pub(crate) delay_after: Option<Spanned<i64>>,
    pub(crate) warmup: Option<Spanned<String>>,
    pub(crate) concurrency: Option<Spanned<toml::Value>>,
    pub(crate) plans: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawRule>>>>,
    pub(crate) calendar: Option<Spanned<String>>,
    pub(crate) resolution: Option<Spanned<String>>,
    /// `cost = { reserve, from, max }`: what is reserved is `cost`; this says where the
    /// actual figure comes from.
    pub(crate) settle: Option<Spanned<RawSettle>>,
    pub(crate) requests: Option<Spanned<OneOrMany<String>>>,
    /// `candidates`: limits decided beside the rule's, never enforced; each a rate or a
    /// list of rates.
    pub(crate) candidates: Option<Spanned<Vec<Spanned<OneOrMany<String>>>>>,
    /// `suggest = true`: measure each client's peak rate for suggestions.
    pub(crate) suggest: Option<Spanned<bool>>,
    /// `[limits."KEY".also]`: named limits applying beside the most specific rule to every
    /// request under the key.
    pub(crate) also: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawAlso>>>>,
}

/// One entry of `[limits."KEY".also]`: a limit applying to every request under the rule's
/// key beside its most specific rule, with a bucket per value of `per`.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAlso {
    /// The rate, or several (all must admit): "2000/s", ["100/min", "10000/h"].
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<String>>"))]
    pub(crate) rate: Option<Spanned<OneOrMany<String>>>,
    /// How many may pass at once (per rate); defaults to the rate's count.
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<i64>>"))]
    pub(crate) burst: Option<Spanned<OneOrMany<i64>>>,
    /// Whose bucket: "client" (the default), "global" (one for all), or a key part —
    /// "host", "method", "header:NAME", "query:NAME", "cookie:NAME" — one bucket per value.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) per: Option<Spanned<String>>,
    /// "gcra" (default), "sliding-window", "fixed-window" or "sliding-log".
    #[cfg_attr(feature = "schema", schemars(with = "Option<Algorithm>"))]
    pub(crate) algorithm: Option<Spanned<Algorithm>>,
    /// Count per calendar day, week or month in this IANA time zone.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) calendar: Option<Spanned<String>>,
    /// With algorithm = "sliding-window": the sub-window length.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) resolution: Option<Spanned<String>>,
    /// Tokens each request takes (default 1), or a reservation settled from the response.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<schema_parts::CostSetting>")
    )]
    pub(crate) cost: Option<Spanned<RawCost>>,
    /// Listed in the rate-limit headers (default true); false: enforced, never shown (a
    /// refusal still says Retry-After).
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    pub(crate) headers: Option<Spanned<bool>>,
    // Fields a rule takes that an `also` entry does not: read only to refuse them with a
    // reason, rather than as unknown.
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) on_limit: Option<Spanned<toml::Value>>,
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) max_delay: Option<Spanned<toml::Value>>,
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) delay_after: Option<Spanned<toml::Value>>,
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) warmup: Option<Spanned<toml::Value>>,
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub(crate) concurrency: Option<Spanned<toml::Value>>,
}

/// `cost = { reserve = N | "estimate", from = "usage" | "header:NAME" | "trailer:NAME" |
/// "json:/pointer", max = M, weights = { input, output, cached } }`
#[derive(Clone, Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSettle {
    /// Tokens taken to admit the request (at least 1, at most each burst), or "estimate":
    /// estimated from the request's JSON body (prompt text ÷ 4 plus its output ceiling,
    /// weighted; `max` without one).
    #[cfg_attr(feature = "schema", schemars(with = "schema_parts::ReserveSetting"))]
    pub(crate) reserve: Spanned<RawReserve>,
    /// Where the actual cost is read when the response ends: "usage" (the token usage of
    /// an OpenAI, Anthropic or Gemini response), "header:NAME", "trailer:NAME", or
    /// "json:/pointer" (a JSON body's field, or the last server-sent event carrying it).
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub(crate) from: Spanned<String>,
    /// The largest figure believed (default 1000000000); above it, the reservation stands.
    /// With reserve = "estimate": what is reserved when the body gives no estimate.
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) max: Option<Spanned<i64>>,
    /// How input, output and cached tokens weigh in the cost (each 1 unless given).
    #[cfg_attr(feature = "schema", schemars(with = "Option<RawWeights>"))]
    pub(crate) weights: Option<Spanned<RawWeights>>,
}

/// `reserve`: a number of tokens, or `"estimate"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawReserve {
    Tokens(i64),
    Word(String),
}

/// `weights = { input = 1, output = 4, cached = 0.1 }`
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWeights {
    /// Input tokens not read from a cache (default 1).
    pub(crate) input: Option<f64>,
    /// Output tokens (default 1).
    pub(crate) output: Option<f64>,
    /// Input tokens read from a cache (default 1).
    pub(crate) cached: Option<f64>,
}

/// `cost`: a number of tokens, or a reservation settled from the response.
#[derive(Clone, Debug)]
pub(crate) enum RawCost {
    Fixed(i64),
    Settled(RawSettle),
}

impl RawCost {
    /// What a request takes at admission: the fixed cost, the reservation, or for an
    /// estimate its fallback `max` (required: the compiler says so when it is missing).
    pub(crate) fn taken_at_admission(cost: &Spanned<RawCost>) -> Spanned<i64> {
        match cost.get_ref() {
            RawCost::Fixed(n) => Spanned::new(cost.span(), *n),
            RawCost::Settled(settle) => Spanned::new(
                settle.reserve.span(),
                match (settle.reserve.get_ref(), &settle.max) {
                    (RawReserve::Tokens(n), _) => *n,
                    (RawReserve::Word(_), Some(max)) => *max.get_ref(),
                    (RawReserve::Word(_), None) => 1,
                },
            ),
        }
    }
}

impl<'de> Deserialize<'de> for RawCost {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CostVisitor;

        impl<'de> Visitor<'de> for CostVisitor {
            type Value = RawCost;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a number of tokens, or a table { reserve = N, from = \"header:NAME\" }",
                )
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawCost, E> {
                Ok(RawCost::Fixed(n))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawCost, E> {
                Ok(RawCost::Fixed(i64::try_from(n).unwrap_or(i64::MAX)))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawCost, A::Error> {
                RawSettle::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawCost::Settled)
            }
        }

        deserializer.deserialize_any(CostVisitor)
    }
}

#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRuleTable {
    /// The rate, or several (all must admit): "100/min", ["10/s", "1000/h"].
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<String>>"))]
    rate: Option<Spanned<OneOrMany<String>>>,
    /// How many may pass at once (per rate); defaults to the rate's count.
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<i64>>"))]
    burst: Option<Spanned<OneOrMany<i64>>>,
    /// Tokens each request takes (default 1), or a reservation settled from the response:
    /// { reserve = 1000, from = "json:/usage/total_tokens" }.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<schema_parts::CostSetting>")
    )]
    cost: Option<Spanned<RawCost>>,
    /// "client" (a bucket per client, the default) or "global" (one bucket for all).
    per: Option<Per>,
    /// No limit under this prefix (no bucket, no headers).
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    unlimited: Option<Spanned<bool>>,
    /// Refused requests also count: a client that keeps trying never refills.
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    strict: Option<Spanned<bool>>,
    /// Measure and report only; never refuse.
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    shadow: Option<Spanned<bool>>,
    /// "gcra" (default), "sliding-window", "fixed-window" or "sliding-log".
    #[cfg_attr(feature = "schema", schemars(with = "Option<Algorithm>"))]
    algorithm: Option<Spanned<Algorithm>>,
    /// Only responses with these statuses count: [401, 403, "5xx"].
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<Vec<schema_parts::StatusItem>>")
    )]
    count_status: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<schema_parts::OnLimit>"))]
    on_limit: Option<Spanned<String>>,
    /// With on_limit = "delay": the longest a request is held ("2s").
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    max_delay: Option<Spanned<String>>,
    /// With on_limit = "delay": how many of a burst pass at once before holding starts.
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    delay_after: Option<Spanned<i64>>,
    /// After idleness, start at a third of the rate and ramp up over this long ("30s").
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    warmup: Option<Spanned<String>>,
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<schema_parts::ConcurrencySetting>")
    )]
    concurrency: Option<Spanned<toml::Value>>,
    /// The rule's limits per plan: `pro = "1000/min"`, `enterprise = { unlimited = true }`
    /// (rate, burst, cost or unlimited; the rest is the rule's).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<BTreeMap<String, RawRule>>")
    )]
    plans: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawRule>>>>,
    /// Count per calendar day, week (from Monday) or month in this IANA time zone
    /// ("Europe/Berlin"): rates "N/day", "N/week", "N/month", counted as fixed windows.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    calendar: Option<Spanned<String>>,
    /// With algorithm = "sliding-window": count the period in sub-windows this long
    /// ("10s" for "100/min": six), the oldest weighted by how much of it is still inside.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    resolution: Option<Spanned<String>>,
    /// Requests counted beside the cost, one each: "500/min" beside token rates, taken at
    /// admission and never settled.
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<String>>"))]
    requests: Option<Spanned<OneOrMany<String>>>,
    /// Limits decided beside the rule's on their own buckets, never refusing anything:
    /// ["20/min", ["100/min", "10/s"]] (each a rate or a list of rates; the rest is the
    /// rule's). What each would have refused is reported, to choose a limit by.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<OneOrMany<String>>>"))]
    candidates: Option<Spanned<Vec<Spanned<OneOrMany<String>>>>>,
    /// Measure each client's peak rate at the rule's window, for suggested limits
    /// (on by itself for a rule with candidates).
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    suggest: Option<Spanned<bool>>,
    /// Limits applying beside the most specific rule to every request under this key, by
    /// name: `everyone = { rate = "2000/s", per = "global" }`, `org = { rate =
    /// "10000/hour", per = "header:x-org" }`. A request is admitted only if all admit.
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<BTreeMap<String, RawAlso>>")
    )]
    also: Option<Spanned<BTreeMap<Spanned<String>, Spanned<RawAlso>>>>,
}

impl<'de> Deserialize<'de> for RawRule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RuleVisitor;

        impl<'de> Visitor<'de> for RuleVisitor {
            type Value = RawRule;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate string such as \"100/min\" or a table with `rate`")
            }

            fn visit_str<E: de::Error>(self, rate: &str) -> Result<RawRule, E> {
                // The bare form has no inner span; the rule's own span stands in (0..0 here).
                Ok(RawRule {
                    rate: Some(Spanned::new(0..0, OneOrMany(vec![(rate.to_owned(), None)]))),
                    ..RawRule::default()
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawRule, A::Error> {
                let table = RawRuleTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawRule {
                    rate: table.rate,
                    burst: table.burst,
                    cost: table.cost.as_ref().map(RawCost::taken_at_admission),
                    settle: table.cost.and_then(|cost| {
                        let span = cost.span();
                        match cost.into_inner() {
                            RawCost::Settled(settle) => Some(Spanned::new(span, settle)),
                            RawCost::Fixed(_) => None,
                        }
                    }),
                    per: table.per,
                    unlimited: table.unlimited,
                    strict: table.strict,
                    shadow: table.shadow,
                    algorithm: table.algorithm,
                    count_status: table.count_status,
                    on_limit: table.on_limit,
                    max_delay: table.max_delay,
                    delay_after: table.delay_after,
                    warmup: table.warmup,
                    concurrency: table.concurrency,
                    plans: table.plans,
                    calendar: table.calendar,
                    resolution: table.resolution,
                    requests: table.requests,
                    candidates: table.candidates,
                    suggest: table.suggest,
                    also: table.also,
                })
            }
        }

        deserializer.deserialize_any(RuleVisitor)
    }
}

/// The JSON Schema of what `RawRule`, `OneOrMany` and the values the compiler reads itself
/// accept, written by hand where their deserialisers are (feature `schema`).
#[cfg(feature = "schema")]
pub(crate) mod schema_parts {
    use std::borrow::Cow;

    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    use super::{OneOrMany, RawRule, RawRuleTable, RawSettle};

    impl JsonSchema for RawRule {
        fn schema_name() -> Cow<'static, str> {
            "Rule".into()
        }

        fn json_schema(generator: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "A rule: a rate such as \"100/min\", or a table.",
                "anyOf": [
                    { "type": "string", "description": "A rate: count/period, e.g. \"100/min\", \"5/10s\"." },
                    generator.subschema_for::<RawRuleTable>()
                ]
            })
        }
    }

    impl<T: JsonSchema> JsonSchema for OneOrMany<T> {
        fn schema_name() -> Cow<'static, str> {
            format!("OneOrMany_{}", T::schema_name()).into()
        }

        fn json_schema(generator: &mut SchemaGenerator) -> Schema {
            let one = generator.subschema_for::<T>();
            json_schema!({
                "anyOf": [one.clone(), { "type": "array", "items": one, "minItems": 1 }]
            })
        }
    }

    /// `reserve`: a number of tokens, or "estimate".
    pub(crate) struct ReserveSetting;

    impl JsonSchema for ReserveSetting {
        fn schema_name() -> Cow<'static, str> {
            "ReserveSetting".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "anyOf": [
                    { "type": "integer", "minimum": 1 },
                    { "const": "estimate" }
                ]
            })
        }
    }

    /// `cost`: a number, or a reservation table.
    pub(crate) struct CostSetting;

    impl JsonSchema for CostSetting {
        fn schema_name() -> Cow<'static, str> {
            "CostSetting".into()
        }

        fn json_schema(generator: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "anyOf": [
                    { "type": "integer", "minimum": 1 },
                    generator.subschema_for::<RawSettle>()
                ]
            })
        }
    }

    /// One entry of `count_status`: a status code (`401`) or a class (`"5xx"`).
    pub(crate) struct StatusItem;

    impl JsonSchema for StatusItem {
        fn schema_name() -> Cow<'static, str> {
            "StatusItem".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "A status code (401) or a class (\"5xx\").",
                "anyOf": [
                    { "type": "integer", "minimum": 100, "maximum": 599 },
                    { "type": "string", "pattern": "^[1-5]xx$" }
                ]
            })
        }
    }

    /// `on_limit`: refuse at once (the default) or hold the request until its turn.
    pub(crate) struct OnLimit;

    impl JsonSchema for OnLimit {
        fn schema_name() -> Cow<'static, str> {
            "OnLimit".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "What happens over the rate: \"reject\" (the default) or \"delay\" (hold until the request's turn, at most max_delay).",
                "enum": ["reject", "delay"]
            })
        }
    }

    /// `concurrency`: a cap, `"adaptive"`, or a table of both kinds' numbers.
    pub(crate) struct ConcurrencySetting;

    impl JsonSchema for ConcurrencySetting {
        fn schema_name() -> Cow<'static, str> {
            "Concurrency".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "Requests in flight at once: a number, \"adaptive\", or { limit, min, max, initial }.",
                "anyOf": [
                    { "type": "integer", "minimum": 1 },
                    { "const": "adaptive" },
                    {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "limit": { "anyOf": [{ "type": "integer", "minimum": 1 }, { "const": "adaptive" }] },
                            "min": { "type": "integer", "minimum": 1 },
                            "max": { "type": "integer", "minimum": 1 },
                            "initial": { "type": "integer", "minimum": 1 }
                        }
                    }
                ]
            })
        }
    }
}
