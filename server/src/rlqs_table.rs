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
