//! Limits as people write them: TOML files, parsed, validated and compiled.
//!
//! The pipeline, one file a stage: `source` reads the texts (a file today) →
//! `raw` parses each into serde structs that keep spans → `settings` folds the settings
//! tables (`[key]`, `[client]`, `[response]`, `[store]`, `[reload]`) over the files in order
//! → `compile` validates every rule into a [`Limit`] and assembles the immutable
//! [`RuleSet`], whose `prefix` trie finds a request's [`Rule`]; `explain` shows that search
//! step by step. Every problem is reported at once, with file, line and column
//! ([`Diagnostic`]); nothing of a refused set is applied.
//!
//! ```
//! use tollgate::config::RuleSet;
//!
//! let rules = RuleSet::from_toml("[limits]\n\"/\" = \"20/s\"\nlogin = \"5/min\"\n")?;
//! assert_eq!(rules.resolve("login", "203.0.113.7").unwrap().name(), "login");
//! assert!(RuleSet::from_toml("[limits]\nlogin = \"5/fortnight\"\n").is_err());
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```

mod also;
mod changes;
mod compile;
mod cost;
mod env;
#[cfg(feature = "yaml")]
mod envoy_yaml;
mod error;
mod explain;
pub mod extension;
mod identity;
mod members;
mod money;
mod plans;
mod prefix;
mod raw;
mod rule;
mod rule_set;
#[cfg(feature = "schema")]
mod schema;
mod settings;
pub(crate) mod source;

pub use also::{AlsoBy, AlsoLimit};
pub use changes::RuleChange;
pub use cost::{CostSource, EstimateFallback, Settle, Usage, Weights};
pub use error::{ConfigError, Diagnostic};
pub use explain::{AlsoStep, Explanation, PartValue, Step};
pub use extension::{Document, Extension};
pub(crate) use members::membership_sources;
pub use money::{Currency, Money, Price, Prices};
pub use plans::{MAX_MEMBERS_BYTES, PlanSource, Plans};
pub use raw::{HeaderStyle, Per};
pub use rule::{Limit, Origin, Rule, RuleId, StatusSet};
pub use rule_set::{BodyNeeds, RuleSet};
#[cfg(feature = "schema")]
pub use schema::json_schema;
pub use settings::{
    Backend, BodyTemplate, DiskSettings, DiskSync, OnBackendError, RedisConnection, RedisSettings,
    RedisTls, ReloadSettings, RemoteHeader, ResponseSettings, Secret, StoreSettings, SyncMode,
};
pub use source::{MAX_CONFIG_BYTES, Validator};

pub use crate::quota::{Calendar, CalendarError, CalendarUnit, Rate, RateError, parse_duration};
