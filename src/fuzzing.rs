//! Entry points for the fuzz targets in `fuzz/`: hidden, not part of the API, no semver
//! promise.
//!
//! The parsers below face bytes an attacker or a broken disk writes, but are private: a
//! response's cost is read inside the layer's body, a membership table only through a
//! reload, a disk value only inside the disk store. These functions hand them bytes the way
//! the request and reload paths do, so `fuzz/` can drive them and `cargo test` can replay
//! what fuzzing found, on stable, through the same code.

use std::path::Path;

use http::HeaderValue;

use crate::config::{CostSource, Diagnostic, RuleSet, Usage};

/// The largest token count a usage reader believes.
pub const MAX_USAGE_COUNT: u64 = crate::middleware::MAX_USAGE_COUNT;

/// What a response body said it cost, as the layer's reader read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostRead {
    /// A count within the reader's bound.
    Found(u64),
    /// Token usage, and the model the response named.
    Usage(Usage, Option<Box<str>>),
    /// Nothing said.
    Missing,
    /// Something said that cannot be believed, and why (the fault metric's reason).
    Bad(&'static str),
}

/// Reads `chunks` (a response body's frames, in order) for `source` as the layer reads a
/// body of `content_type`, with `max` the largest figure believed. `None` for a header
/// source, which is read from the response's head instead.
///
/// ```
/// use tollgate::config::CostSource;
/// use tollgate::fuzzing::{CostRead, read_cost};
///
/// let source: CostSource = "json:/usage/total_tokens".parse().unwrap();
/// let body: &[&[u8]] = &[br#"{"usage":{"total_"#, br#"tokens":42}}"#];
/// assert_eq!(read_cost(&source, None, 1_000, body), Some(CostRead::Found(42)));
/// ```
pub fn read_cost(
    source: &CostSource,
    content_type: Option<&HeaderValue>,
    max: u64,
    chunks: &[&[u8]],
) -> Option<CostRead> {
    use crate::middleware::{BodyReader, Figure};
    let mut reader = BodyReader::new(source, content_type, max)?;
    for chunk in chunks {
        reader.data(chunk);
    }
    Some(match reader.finish() {
        Figure::Found(n) => CostRead::Found(n),
        Figure::Usage(usage, model) => CostRead::Usage(usage, model),
        Figure::Missing => CostRead::Missing,
        Figure::Bad(fault) => CostRead::Bad(fault.reason()),
    })
}

/// Compiles a rule set from `sources`, each a name (its extension picks TOML or
/// envoyproxy/ratelimit's YAML), a text and whether it is a membership table (`[plans]
/// members`, `[identity.api_keys] members`, `[identity.jwt]`'s key set) rather than rules:
/// what a reload does with the texts it read.
///
/// ```
/// use std::path::Path;
/// use tollgate::fuzzing::compile;
///
/// let rules = compile(&[(Path::new("rules.toml"), "[limits]\napi = \"10/s\"\n", false)]).unwrap();
/// assert_eq!(rules.resolve("api/search", "192.0.2.1").unwrap().key(), "api");
/// ```
pub fn compile(sources: &[(&Path, &str, bool)]) -> Result<RuleSet, Vec<Diagnostic>> {
    RuleSet::compile_texts(sources)
}

/// A disk store value read back as the store reads it at `now` (Unix nanoseconds): the
/// bucket it holds, for a rule's bucket or a caller-defined (`RL.*`) one, and the value
/// written again from what was read. `None` for a value the store ignores (malformed, or
/// refilled by `now`).
///
/// ```
/// use tollgate::fuzzing::disk_value;
///
/// let mut value = u64::MAX.to_le_bytes().to_vec(); // refilled at: far in the future
/// value.push(1); // layout `one`: a TAT and an interval
/// value.extend_from_slice(&5_000u64.to_le_bytes());
/// value.extend_from_slice(&1_000u64.to_le_bytes());
/// let (_bucket, written) = disk_value(&value, 0, false).unwrap();
/// assert_eq!(written, value);
/// assert!(disk_value(&value[..12], 0, false).is_none());
/// ```
#[cfg(feature = "disk")]
pub fn disk_value(
    value: &[u8],
    now: u64,
    caller_defined: bool,
) -> Option<(crate::store::BucketState, Vec<u8>)> {
    crate::store::disk_value(value, now, caller_defined)
}
