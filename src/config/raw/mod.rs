//! The config as written: serde structs as close to the TOML as possible.
//!
//! Nothing here judges values; `compile` and `settings` validate. Every table refuses
//! unknown fields, and values keep their spans so errors can point at them.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

mod one_or_many;
mod rule;

pub(crate) use one_or_many::OneOrMany;
pub use rule::Per;
pub(crate) use rule::{RawAlso, RawCost, RawReserve, RawRule, RawSettle};

/// One config file. Unknown tables are refused by `compile`, which also knows the tables
/// an embedding program's [`Extension`](crate::config::Extension)s own.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub(crate) struct RawFile {
    #[serde(default)]
    pub(crate) key: RawKey,
    #[serde(default)]
    pub(crate) client: RawClient,
    #[serde(default)]
    pub(crate) response: RawResponse,
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(with = "BTreeMap<String, RawRule>"))]
    pub(crate) limits: BTreeMap<Spanned<String>, Spanned<RawRule>>,
    #[serde(default)]
    pub(crate) store: RawStore,
    /// Kept spanned: a remote document may not set it, and the error points at it.
    #[cfg_attr(feature = "schema", schemars(with = "Option<RawReload>"))]
    pub(crate) reload: Option<Spanned<RawReload>>,
    #[serde(default)]
    pub(crate) plans: RawPlans,
    /// Each model's price: `[prices."gpt-4o*"] input = "2.50/1M"`.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(with = "BTreeMap<String, RawPrice>"))]
    pub(crate) prices: BTreeMap<Spanned<String>, Spanned<RawPrice>>,
    /// Verified identities: `[identity.api_keys]`, `on_invalid`.
    #[serde(default)]
    pub(crate) identity: super::identity::RawIdentity,
}

impl RawFile {
    /// The top-level tables tollgate reads.
    pub(crate) const TABLES: [&'static str; 9] = [
        "key", "client", "response", "limits", "store", "reload", "plans", "prices", "identity",
    ];
}

/// One model's price (`[prices."MODEL"]`): an amount per million ("2.50/1M") or thousand
/// ("0.0025/1K") tokens of each kind; a kind left out costs nothing.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrice {
    /// Input tokens not read from a cache.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) input: Option<Spanned<String>>,
    /// Output tokens.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) output: Option<Spanned<String>>,
    /// Input tokens read from a cache.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) cached: Option<Spanned<String>>,
}

/// `[plans]`: which plan a client is on, and the plan of clients no source names.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlans {
    /// The plan of a client no source names ("free").
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) default: Option<Spanned<String>>,
    /// Membership files or URLs: TOML tables of identity = "plan".
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) members: Option<Spanned<Vec<Spanned<String>>>>,
    /// A claim of the verified token (`[identity.jwt]`) naming the client's plan.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) claim: Option<Spanned<String>>,
    /// A header a trusted authenticator sets to the client's plan, believed only from
    /// `[client] trusted_proxies`.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) header: Option<Spanned<String>>,
}

/// `[reload]`: how remote documents are fetched and kept.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReload {
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) poll_interval: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) cache_dir: Option<Spanned<String>>,
    /// `[reload.headers."host"]`: header name → environment variable holding its value.
    #[serde(default)]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "BTreeMap<String, BTreeMap<String, String>>")
    )]
    pub(crate) headers: BTreeMap<Spanned<String>, BTreeMap<Spanned<String>, Spanned<String>>>,
}

/// `[store]`
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) max_buckets: Option<Spanned<i64>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) sweep_interval: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) snapshot: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) snapshot_interval: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) backend: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<String>>"))]
    pub(crate) url: Option<Spanned<OneOrMany<String>>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) key_prefix: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) timeout: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) connections: Option<Spanned<i64>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) on_backend_error: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) breaker_failures: Option<Spanned<i64>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) breaker_cooldown: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) sync: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) sync_interval: Option<Spanned<String>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) concurrency_lease: Option<Spanned<String>>,
    /// The environment variable holding the Redis ACL user's name.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) username_env: Option<Spanned<String>>,
    /// The environment variable holding the Redis password.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) password_env: Option<Spanned<String>>,
    /// `backend = "redis-sentinel"`: the sentinels to ask for the master.
    #[cfg_attr(feature = "schema", schemars(with = "Option<OneOrMany<String>>"))]
    pub(crate) sentinels: Option<Spanned<OneOrMany<String>>>,
    /// `backend = "redis-sentinel"`: the name the sentinels monitor the master under.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) master_name: Option<Spanned<String>>,
    /// The environment variable holding the sentinels' ACL user's name.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) sentinel_username_env: Option<Spanned<String>>,
    /// The environment variable holding the sentinels' password.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) sentinel_password_env: Option<Spanned<String>>,
    /// `backend = "disk"`: the directory the buckets live in.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) path: Option<Spanned<String>>,
    /// `backend = "disk"`: the most buckets kept in memory; the rest are read from disk.
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) cache_buckets: Option<Spanned<i64>>,
    /// `[store.tls]`: how `rediss://` connections are verified.
    #[cfg_attr(feature = "schema", schemars(with = "Option<RawRedisTls>"))]
    pub(crate) tls: Option<Spanned<RawRedisTls>>,
}

/// `[store.tls]`
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedisTls {
    /// PEM file of the CA certificates Redis's certificate must chain to (default: the
    /// system's roots).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) ca_file: Option<Spanned<String>>,
    /// PEM file of the client certificate to present (with `key_file`).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) cert_file: Option<Spanned<String>>,
    /// PEM file of the client certificate's private key.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) key_file: Option<Spanned<String>>,
    /// Accept any certificate from Redis, unverified: for a test bench, never in production.
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    pub(crate) danger_accept_invalid_certificates: Option<Spanned<bool>>,
    /// The name Redis's certificate must be for, and the SNI sent (default: each URL's
    /// host): for servers reached by address whose certificates name a DNS host, on every
    /// node of a Cluster and the sentinels and master of Sentinel.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) server_name: Option<Spanned<String>>,
}

/// `[key]`
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKey {
    pub(crate) case_insensitive: Option<bool>,
    /// What a key is made of, in order: "route" and "client" once each, "client" last;
    /// also "method", "host", "header:NAME", "query:NAME", "cookie:NAME".
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) parts: Option<Spanned<Vec<Spanned<String>>>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) max_depth: Option<Spanned<i64>>,
}

/// `[client]`
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClient {
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) sources: Option<Spanned<Vec<Spanned<String>>>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) trusted_proxies: Option<Vec<Spanned<String>>>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) ipv6_prefix: Option<Spanned<i64>>,
}

/// `[response]`
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResponse {
    #[cfg_attr(feature = "schema", schemars(with = "Option<i64>"))]
    pub(crate) status: Option<Spanned<i64>>,
    pub(crate) headers: Option<HeaderStyle>,
    pub(crate) body: Option<String>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) content_type: Option<Spanned<String>>,
}

/// Which rate-limit headers responses carry (`[response] headers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
        // Top-level tables are checked by `compile`, which also knows extensions' tables.
        let err = crate::config::RuleSet::from_toml("[limitz]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "<inline>:1:2: unknown field `limitz`, expected one of `key`, `client`"
            ),
            "{err}"
        );
    }
}
