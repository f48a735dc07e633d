//! Limits as people write them: TOML files (SPEC §3), parsed, validated and compiled.
//!
//! Parsing keeps spans; validation reports every problem with file, line and column;
//! compiling builds the immutable [`RuleSet`] the layer reads.

mod error;
mod rate;
mod raw;
pub(crate) mod rules;
mod store;

pub(crate) use error::Source;
pub use error::{ConfigError, Diagnostic};
pub use rate::{Rate, RateError, parse_duration};
pub use raw::Per;
pub use rules::{
    Explanation, GatewaySettings, Limit, MAX_CONFIG_BYTES, Origin, Rule, RuleSet, StatusSet, Step,
    parse_upstream,
};
pub use store::{Backend, OnBackendError, RedisSettings, StoreSettings};
