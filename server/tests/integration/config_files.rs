//! The service's config: every sample in `config/` (the `[gateway]` table's among them) is
//! read as the service reads it, and valid under the schema the service prints, and the copy
//! of that schema in `config/` is current.

use std::path::Path;

use tollgate::Limits;
use tollgate_server::{FileSettings, GatewayTable, Settings};
use tollgate_testkit::config_samples;

#[test]
fn every_sample_loads_as_the_service_reads_it() {
    let samples = config_samples(&["toml", "yaml"]);
    for path in &samples {
        Limits::builder()
            .extension(GatewayTable::default())
            .load([path])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    assert!(samples.len() >= 4, "the samples were found: {samples:?}");
    let gateway = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/gateway.toml");
    let limits = Limits::builder()
        .extension(GatewayTable::default())
        .load([gateway])
        .unwrap();
    let rules = limits.rules();
    let settings = Settings::default().over(&rules.extension::<FileSettings>().unwrap().0);
    assert_eq!(settings.listen(), tollgate_server::DEFAULT_LISTEN);
}

#[test]
fn the_schema_validates_every_sample_and_the_shipped_copy_is_current() {
    let schema = tollgate_server::json_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let samples = config_samples(&["toml"]);
    for path in &samples {
        let document: serde_json::Value =
            toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&document)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    }
    assert!(samples.len() >= 3);
    for bad in [
        "[gateway]\nlisten_on = \"127.0.0.1:1\"\n",
        "[gateway]\nresp = 5\n",
    ] {
        let document: serde_json::Value = toml::from_str(bad).unwrap();
        assert!(!validator.is_valid(&document), "the schema refuses {bad}");
        let parsed = Limits::builder()
            .extension(GatewayTable::default())
            .from_toml(bad);
        assert!(parsed.is_err(), "and so does the service: {bad}");
    }
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tollgate.schema.json");
    let shipped: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(shipped).unwrap()).unwrap();
    assert_eq!(
        shipped, schema,
        "config/tollgate.schema.json is stale: cargo run -p tollgate-server -- --print-schema > config/tollgate.schema.json"
    );
}
