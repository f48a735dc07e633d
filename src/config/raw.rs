//! The config as written: serde structs as close to the TOML as possible.
//!
//! Nothing here judges values; `compile` and `settings` validate. Every table refuses
//! unknown fields, and values keep their spans so errors can point at them.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use serde::de::{self, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::algorithm::Algorithm;

/// One config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    #[serde(default)]
    pub(crate) key: RawKey,
    #[serde(default)]
    pub(crate) client: RawClient,
    #[serde(default)]
    pub(crate) response: RawResponse,
    #[serde(default)]
    pub(crate) limits: BTreeMap<Spanned<String>, Spanned<RawRule>>,
    #[serde(default)]
    pub(crate) gateway: RawGateway,
    #[serde(default)]
    pub(crate) store: RawStore,
    /// Kept spanned: a remote document may not set it, and the error points at it.
    pub(crate) reload: Option<Spanned<RawReload>>,
}

/// `[reload]`: how remote documents are fetched and kept.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReload {
    pub(crate) poll_interval: Option<Spanned<String>>,
    pub(crate) cache_dir: Option<Spanned<String>>,
    /// `[reload.headers."host"]`: header name → environment variable holding its value.
    #[serde(default)]
    pub(crate) headers: BTreeMap<Spanned<String>, BTreeMap<Spanned<String>, Spanned<String>>>,
}

/// `[store]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub(crate) max_buckets: Option<Spanned<i64>>,
    pub(crate) sweep_interval: Option<Spanned<String>>,
    pub(crate) snapshot: Option<Spanned<String>>,
    pub(crate) snapshot_interval: Option<Spanned<String>>,
    pub(crate) backend: Option<Spanned<String>>,
    pub(crate) url: Option<Spanned<OneOrMany<String>>>,
    pub(crate) key_prefix: Option<Spanned<String>>,
    pub(crate) timeout: Option<Spanned<String>>,
    pub(crate) connections: Option<Spanned<i64>>,
    pub(crate) on_backend_error: Option<Spanned<String>>,
    pub(crate) breaker_failures: Option<Spanned<i64>>,
    pub(crate) breaker_cooldown: Option<Spanned<String>>,
    pub(crate) sync: Option<Spanned<String>>,
    pub(crate) sync_interval: Option<Spanned<String>>,
    pub(crate) concurrency_lease: Option<Spanned<String>>,
}

/// `[gateway]`: settings of the example gateway, validated with the rest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGateway {
    pub(crate) listen: Option<Spanned<String>>,
    pub(crate) upstream: Option<Spanned<String>>,
    pub(crate) admin: Option<Spanned<String>>,
    pub(crate) upstream_timeout: Option<Spanned<String>>,
    pub(crate) admin_token: Option<Spanned<String>>,
    pub(crate) resp: Option<Spanned<String>>,
    pub(crate) resp_password_env: Option<Spanned<String>>,
    pub(crate) grpc: Option<Spanned<String>>,
    pub(crate) grpc_response_headers: Option<bool>,
}

/// `[key]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKey {
    pub(crate) case_insensitive: Option<bool>,
    pub(crate) max_depth: Option<Spanned<i64>>,
}

/// `[client]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClient {
    pub(crate) sources: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) trusted_proxies: Option<Vec<Spanned<String>>>,
    pub(crate) ipv6_prefix: Option<Spanned<i64>>,
}

/// `[response]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResponse {
    pub(crate) status: Option<Spanned<i64>>,
    pub(crate) headers: Option<HeaderStyle>,
    pub(crate) body: Option<String>,
    pub(crate) content_type: Option<Spanned<String>>,
}

/// Which rate-limit headers responses carry (`[response] headers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit` and `RateLimit-Policy` (the default).
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Legacy,
    /// Both of the above.
    Both,
    /// None; denials still carry `Retry-After`.
    None,
}

impl HeaderStyle {
    pub(crate) fn ietf(self) -> bool {
        matches!(self, HeaderStyle::Ietf | HeaderStyle::Both)
    }

    pub(crate) fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::Both)
    }
}

/// `per = "client" | "global"`
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// One bucket per client (the default).
    #[default]
    Client,
    /// One bucket shared by every client.
    Global,
}

/// One entry of `[limits]`: a bare rate string or a table.
#[derive(Debug, Default)]
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuleTable {
    rate: Option<Spanned<OneOrMany<String>>>,
    burst: Option<Spanned<OneOrMany<i64>>>,
    cost: Option<Spanned<i64>>,
    per: Option<Per>,
    unlimited: Option<Spanned<bool>>,
    strict: Option<Spanned<bool>>,
    shadow: Option<Spanned<bool>>,
    algorithm: Option<Spanned<Algorithm>>,
    count_status: Option<Spanned<Vec<Spanned<toml::Value>>>>,
    on_limit: Option<Spanned<String>>,
    max_delay: Option<Spanned<String>>,
    delay_after: Option<Spanned<i64>>,
    warmup: Option<Spanned<String>>,
    concurrency: Option<Spanned<toml::Value>>,
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
                    cost: table.cost,
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
                })
            }
        }

        deserializer.deserialize_any(RuleVisitor)
    }
}

/// A value that may be written once or as an array, each item with its span if known.
#[derive(Debug, Default)]
pub(crate) struct OneOrMany<T>(pub(crate) Vec<(T, Option<Range<usize>>)>);

impl<'de, T> Deserialize<'de> for OneOrMany<T>
where
    T: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
            type Value = OneOrMany<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or an array of values")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![(
                    T::deserialize(value.into_deserializer())?,
                    None,
                )]))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![(
                    T::deserialize(value.into_deserializer())?,
                    None,
                )]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<T>>()? {
                    let span = item.span();
                    items.push((item.into_inner(), Some(span)));
                }
                Ok(OneOrMany(items))
            }
        }

        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_table_rules_parse() {
        let file: RawFile = toml::from_str(
            r#"
            [limits]
            "api" = "100/min"
            "login" = { rate = ["5/min", "1/s"], burst = [5, 1], cost = 1, per = "global" }
            "#,
        )
        .unwrap();
        let api = file
            .limits
            .iter()
            .find(|(k, _)| k.get_ref() == "api")
            .unwrap()
            .1;
        let rates = &api.get_ref().rate.as_ref().unwrap().get_ref().0;
        assert_eq!(rates[0].0, "100/min");
        let login = file
            .limits
            .iter()
            .find(|(k, _)| k.get_ref() == "login")
            .unwrap()
            .1;
        let login = login.get_ref();
        assert_eq!(login.rate.as_ref().unwrap().get_ref().0.len(), 2);
        assert!(login.rate.as_ref().unwrap().get_ref().0[1].1.is_some());
        assert_eq!(login.per, Some(Per::Global));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = toml::from_str::<RawFile>("[limits.api]\nrate = \"1/s\"\nbrust = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `brust`"), "{err}");
        let err = toml::from_str::<RawFile>("[limitz]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `limitz`"), "{err}");
    }
}
