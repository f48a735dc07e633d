//! The config file's JSON Schema (feature `schema`), derived with schemars from the very
//! types that parse it ([`raw`](super::raw)): a field added to the parser is in the schema,
//! and an unknown field is refused by both. (Written by hand, in `raw`, only where the
//! parser is: a rule written as a bare rate or a table, values written once or as an
//! array, and the `count_status`, `on_limit` and `concurrency` values the compiler reads.)
//!
//! TOML editors read it from a `#:schema` comment on a file's first line (taplo, Even Better
//! TOML): `gateway --print-schema > tollgate.schema.json`, then
//! `#:schema ./tollgate.schema.json` at the top of the config.

use super::raw::RawFile;

/// The JSON Schema of a tollgate config file, in draft-07: the draft every editor's
/// validator reads (taplo's among them).
///
/// ```
/// let schema = tollgate::config::json_schema();
/// assert_eq!(schema["title"], "tollgate configuration");
/// assert_eq!(schema["additionalProperties"], false);
/// assert!(schema["properties"]["limits"].is_object());
/// ```
pub fn json_schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<RawFile>();
    schema.insert("title".into(), "tollgate configuration".into());
    schema.insert(
        "description".into(),
        "A tollgate config file (TOML): rules under [limits], keyed by path prefix. See the README's configuration reference."
            .into(),
    );
    schema.to_value()
}
