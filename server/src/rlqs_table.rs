//! The `[rlqs]` table (Envoy's rate limit quota service, served by `grpc`): which bucket-id entries, after `name`, make a bucket's key, and how
//! long an assignment lives. Read with the rules, so a reload changes it.
//!
//! ```toml
//! [rlqs]
//! key = ["client_id"]         # a bucket id {name = "api", client_id = "alice"} is api/alice
//! assignment_ttl = "15s"
//! ```

use std::any::Any;
use std::time::Duration;

use serde::Deserialize;
use tollgate::config::{Diagnostic, Document, Extension, RuleSet};

/// The `[rlqs]` table as written.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RlqsTableSettings {
    /// The bucket-id entries whose values follow `name`'s in a bucket's key, in this order
    /// [default: none: the key is `name`'s value alone].
    #[serde(default)]
    pub key: Vec<String>,
    /// How long an assignment holds unless renewed, e.g. `"15s"`: a departed Envoy's share
    /// returns after it [default: 15s; at least 1s].
    #[serde(default)]
    pub assignment_ttl: Option<String>,
}

/// What `[rlqs]` comes to.
#[derive(Clone, Debug, PartialEq)]
pub struct RlqsFile {
    /// Entries after `name`, in order.
    pub key: Vec<String>,
    /// An assignment's time to live.
    pub assignment_ttl: Duration,
}

impl Default for RlqsFile {
    fn default() -> RlqsFile {
        RlqsFile {
            key: Vec::new(),
            assignment_ttl: Duration::from_secs(15),
        }
    }
}

/// The `[rlqs]` table's reader, registered with the config loader.
#[derive(Clone, Copy, Debug, Default)]
pub struct RlqsTable;

impl Extension for RlqsTable {
    fn table(&self) -> &str {
        "rlqs"
    }

    fn compile(
        &self,
        documents: &[Document<'_>],
        _rules: &RuleSet,
    ) -> Result<Box<dyn Any + Send + Sync>, Vec<Diagnostic>> {
        let mut file = RlqsFile::default();
        let mut diagnostics = Vec::new();
        for document in documents {
            match document.table::<RlqsTableSettings>("rlqs") {
                Ok(Some(table)) => {
                    let line = document
                        .text()
                        .lines()
                        .position(|line| line.trim_start().starts_with("[rlqs]"))
                        .map_or(1, |index| index + 1);
                    let mut refuse = |message: String| {
                        diagnostics.push(Diagnostic {
                            file: document.name().to_path_buf(),
                            line,
                            column: 1,
                            message: format!("[rlqs]: {message}"),
                        });
                    };
                    if let Some(entry) = table
                        .key
                        .iter()
                        .find(|entry| entry.is_empty() || *entry == "name")
                    {
                        refuse(format!(
                            "key entry \"{entry}\": name is always first; entries must be non-empty"
                        ));
                    }
                    if !table.key.is_empty() {
                        file.key = table.key;
                    }
                    if let Some(ttl) = table.assignment_ttl {
                        match tollgate::config::parse_duration(&ttl) {
                            Some(ttl) if ttl >= Duration::from_secs(1) => file.assignment_ttl = ttl,
                            _ => refuse(format!(
                                "assignment_ttl \"{ttl}\" must be a duration of at least 1s, e.g. \"15s\""
                            )),
                        }
                    }
                }
                Ok(None) => {}
                Err(diagnostic) => diagnostics.push(diagnostic),
            }
        }
        if diagnostics.is_empty() {
            Ok(Box::new(file))
        } else {
            Err(diagnostics)
        }
    }
}

/// What the RLQS front end shows operators — each bucket's Envoys, their demand and
/// shares — as of its last tick (a second at most old). Shared by the front end, which
/// fills it, and the admin listener's `/rlqs`, which reads it.
///
/// ```
/// use tollgate_server::rlqs_table::{RlqsBoard, RlqsBucket};
///
/// let board = RlqsBoard::default();
/// assert!(board.buckets().is_empty());
/// board.replace(vec![RlqsBucket { key: "api".into(), rule: Some("api".into()), envoys: vec![], gateways: None, part_per_second: None }]);
/// assert_eq!(board.buckets()[0].key, "api");
/// ```
#[derive(Clone, Debug, Default)]
pub struct RlqsBoard(std::sync::Arc<parking_lot::Mutex<Vec<RlqsBucket>>>);

impl RlqsBoard {
    /// The buckets as last shown, by key.
    pub fn buckets(&self) -> Vec<RlqsBucket> {
        self.0.lock().clone()
    }

    /// Shows `buckets` from now on.
    pub fn replace(&self, buckets: Vec<RlqsBucket>) {
        *self.0.lock() = buckets;
    }
}

/// One RLQS bucket: its key, the rule dividing it and the Envoys reporting it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RlqsBucket {
    /// The key its bucket id makes.
    pub key: String,
    /// The rule that applies (`None`: no rule, allow-all).
    pub rule: Option<String>,
    /// The Envoys reporting it, busiest first.
    pub envoys: Vec<RlqsEnvoy>,
    /// With a Redis store: the gateways dividing the rule, this one included (`None`:
    /// this gateway alone divides it).
    pub gateways: Option<u32>,
    /// With a Redis store: this gateway's part of the rule, tokens a second, which its
    /// Envoys' shares divide (`None`: the whole rule).
    pub part_per_second: Option<f64>,
}

/// One Envoy's part in a bucket.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RlqsEnvoy {
    /// Its stream, numbered from 1 in the order they opened.
    pub stream: u64,
    /// Requests a second it saw (allowed and denied), smoothed over its reports.
    pub demand: f64,
    /// Its share: tokens a second and `max_tokens` (`None`: no token bucket assigned).
    pub tokens_per_second: Option<f64>,
    /// Its share of the burst.
    pub max_tokens: Option<u32>,
}
