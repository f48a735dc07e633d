//! The service's config file schema: the library's
//! ([`tollgate::config::json_schema`]) with the `[gateway]` table added, derived from
//! [`Settings`], the type that reads it.

use crate::Settings;

/// The JSON Schema of a config file the service reads (draft-07, what editors read):
/// tollgate's tables, `[gateway]`, `[telemetry]` and `[rlqs]`.
///
/// ```
/// let schema = tollgate_server::json_schema();
/// assert_eq!(schema["additionalProperties"], false);
/// assert!(schema["properties"]["limits"].is_object());
/// assert_eq!(schema["properties"]["gateway"]["additionalProperties"], false);
/// assert_eq!(schema["properties"]["telemetry"]["additionalProperties"], false);
/// assert_eq!(schema["properties"]["rlqs"]["additionalProperties"], false);
/// ```
pub fn json_schema() -> serde_json::Value {
    let mut schema = tollgate::config::json_schema();
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut gateway = generator.into_root_schema_for::<Settings>().to_value();
    if let Some(table) = gateway.as_object_mut() {
        table.remove("$schema");
        // Its own definitions (`ListenerTls`) join the document's, where its references
        // (`#/definitions/…`) look for them.
        if let Some(serde_json::Value::Object(definitions)) = table.remove("definitions")
            && let Some(shared) = schema
                .as_object_mut()
                .map(|root| {
                    root.entry("definitions")
                        .or_insert_with(|| serde_json::json!({}))
                })
                .and_then(serde_json::Value::as_object_mut)
        {
            shared.extend(definitions);
        }
        table.insert(
            "description".into(),
            "The service's own settings; flags and TOLLGATE_* environment variables win over them."
                .into(),
        );
    }
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut telemetry = generator
        .into_root_schema_for::<crate::telemetry::TelemetrySettings>()
        .to_value();
    if let Some(table) = telemetry.as_object_mut() {
        table.remove("$schema");
        table.insert(
            "description".into(),
            "OpenTelemetry traces over OTLP (read at start-up); OTEL_* variables fill what it leaves open."
                .into(),
        );
    }
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut rlqs = generator
        .into_root_schema_for::<crate::rlqs_table::RlqsTableSettings>()
        .to_value();
    if let Some(table) = rlqs.as_object_mut() {
        table.remove("$schema");
        table.insert(
            "description".into(),
            "Envoy's rate limit quota service (--rlqs): how bucket ids make keys, how long assignments live."
                .into(),
        );
    }
    if let Some(properties) = schema["properties"].as_object_mut() {
        properties.insert("gateway".into(), gateway);
        properties.insert("telemetry".into(), telemetry);
        properties.insert("rlqs".into(), rlqs);
    }
    schema
}
