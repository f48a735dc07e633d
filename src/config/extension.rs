//! Tables that belong to the program embedding tollgate, not to tollgate: a service's
//! `[gateway]`, say. The program registers an [`Extension`] on the
//! [`LimitsBuilder`](crate::LimitsBuilder); tollgate then accepts its table in every config
//! file (instead of refusing it as unknown), and runs the extension on every load and
//! reload, after its own checks and before the new rules are swapped in. What the extension
//! refuses refuses the whole config, with file, line and column, like a bad rule; what it
//! accepts is kept with the rules ([`RuleSet::extension`]), so the program reads its settings
//! from the same generation that is enforcing.
//!
//! ```
//! use std::any::Any;
//! use tollgate::Limits;
//! use tollgate::config::{Diagnostic, Document, Extension, RuleSet};
//!
//! /// `[app] greeting = "…"`, at most 16 characters.
//! struct Greeting;
//!
//! #[derive(serde::Deserialize)]
//! struct AppTable {
//!     greeting: toml::Spanned<String>,
//! }
//!
//! impl Extension for Greeting {
//!     fn table(&self) -> &str {
//!         "app"
//!     }
//!
//!     fn compile(
//!         &self,
//!         documents: &[Document<'_>],
//!         _rules: &RuleSet,
//!     ) -> Result<Box<dyn Any + Send + Sync>, Vec<Diagnostic>> {
//!         let mut greeting = String::from("hello");
//!         for document in documents {
//!             let Some(table) = document.table::<AppTable>("app").map_err(|d| vec![d])? else {
//!                 continue;
//!             };
//!             if table.greeting.get_ref().chars().count() > 16 {
//!                 return Err(vec![document.at(table.greeting.span(), "greeting is too long")]);
//!             }
//!             greeting = table.greeting.into_inner();
//!         }
//!         Ok(Box::new(greeting))
//!     }
//! }
//!
//! let limits = Limits::builder()
//!     .extension(Greeting)
//!     .from_toml("[app]\ngreeting = \"hi\"\n[limits]\n\"/\" = \"1/s\"\n")?;
//! assert_eq!(limits.rules().extension::<String>().map(String::as_str), Some("hi"));
//!
//! let error = Limits::builder()
//!     .extension(Greeting)
//!     .from_toml("[app]\ngreeting = \"far too long a greeting\"\n")
//!     .unwrap_err();
//! assert_eq!(error.to_string(), "<inline>:2:12: greeting is too long");
//!
//! // Without the extension, the table is unknown.
//! assert!(Limits::from_toml("[app]\ngreeting = \"hi\"\n").is_err());
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::error::Diagnostic;
use super::rule_set::RuleSet;
use super::source::SourceText;

/// A top-level table of the config that the embedding program reads and checks itself.
/// See the [module docs](self).
pub trait Extension: Send + Sync + 'static {
    /// The table's name: `[NAME]` in a config file is this extension's.
    fn table(&self) -> &str;

    /// Reads the table from `documents` (in layering order: later ones override earlier
    /// ones) and checks it against `rules`, which have passed tollgate's own checks. Runs
    /// on every load and reload. `Err` refuses the config: the rules in force stay. `Ok`
    /// is kept with `rules`, for [`RuleSet::extension`].
    fn compile(
        &self,
        documents: &[Document<'_>],
        rules: &RuleSet,
    ) -> Result<Box<dyn Any + Send + Sync>, Vec<Diagnostic>>;
}

/// The extensions registered on one limiter.
#[derive(Clone, Default)]
pub(crate) struct Extensions(Vec<Arc<dyn Extension>>);

impl Extensions {
    pub(crate) fn push(&mut self, extension: Arc<dyn Extension>) {
        self.0.push(extension);
    }

    /// The tables the extensions own, as config files may name them.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|extension| extension.table())
    }

    /// Runs every extension over `sources` and `rules`; each one's output, in order.
    pub(crate) fn compile(
        &self,
        sources: &[&SourceText],
        rules: &RuleSet,
    ) -> Result<Vec<Arc<dyn Any + Send + Sync>>, Vec<Diagnostic>> {
        let documents: Vec<Document<'_>> =
            sources.iter().map(|&source| Document { source }).collect();
        let mut outputs = Vec::with_capacity(self.0.len());
        let mut diagnostics = Vec::new();
        for extension in &self.0 {
            match extension.compile(&documents, rules) {
                Ok(output) => outputs.push(Arc::from(output)),
                Err(mut problems) => diagnostics.append(&mut problems),
            }
        }
        if diagnostics.is_empty() {
            Ok(outputs)
        } else {
            Err(diagnostics)
        }
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tables()).finish()
    }
}

/// One config document as an [`Extension`] sees it: its name and text, a way to read a
/// table from it, and a way to point at a place in it.
#[derive(Clone, Copy)]
pub struct Document<'a> {
    source: &'a SourceText,
}

impl<'a> Document<'a> {
    /// The file or URL it was read from (`<inline>` for text given directly).
    pub fn name(&self) -> &'a Path {
        &self.source.path
    }

    /// Its text.
    pub fn text(&self) -> &'a str {
        &self.source.text
    }

    /// Whether it was fetched from a URL rather than read from a local file.
    pub fn is_remote(&self) -> bool {
        self.source.remote
    }

    /// The top-level table `name`, deserialised as `T`; `None` when the document has no
    /// such table (an envoyproxy/ratelimit YAML document never has). `T` may hold
    /// [`toml::Spanned`] values to point at them later with [`at`](Self::at); an error
    /// names the file, line and column.
    pub fn table<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Diagnostic> {
        if self.source.is_yaml() {
            return Ok(None);
        }
        let at_error = |error: toml::de::Error| {
            self.source
                .at(error.span().unwrap_or(0..0), error.message().trim_end())
        };
        let deserializer = toml::Deserializer::parse(&self.source.text).map_err(at_error)?;
        TableSeed::<T> {
            name,
            found: std::marker::PhantomData,
        }
        .deserialize(deserializer)
        .map_err(at_error)
    }

    /// A diagnostic at the start of `span` (a byte range of [`text`](Self::text), as
    /// [`toml::Spanned::span`] gives).
    pub fn at(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        self.source.at(span, message)
    }
}

impl fmt::Debug for Document<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("name", &self.source.path)
            .finish_non_exhaustive()
    }
}

/// Reads one top-level table of a document and skips the rest.
struct TableSeed<'n, T> {
    name: &'n str,
    found: std::marker::PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for TableSeed<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for TableSeed<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a config document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}
