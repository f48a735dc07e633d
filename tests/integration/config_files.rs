//! Config from real files: every sample in `config/` parses; errors name the file.

use std::io::Write as _;

use tollgate::Limits;
use tollgate::config::ConfigError;

/// The samples in `config/` the library reads alone. `gateway.toml` is the service's (it
/// has a `[gateway]` table, which only the service knows): its tests parse it.
fn library_samples(extensions: &[&str]) -> Vec<std::path::PathBuf> {
    tollgate_testkit::config_samples(extensions)
        .into_iter()
        .filter(|path| {
            !std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .any(|line| line.trim() == "[gateway]")
        })
        .collect()
}

#[test]
fn every_file_in_config_parses() {
    let samples = library_samples(&["toml", "yaml"]);
    for path in &samples {
        Limits::load([path]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    assert!(samples.len() >= 3, "the samples were found: {samples:?}");
}

#[test]
fn the_sample_config_means_what_its_comments_say() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let limits = Limits::load([dir.join("limits.toml")]).unwrap();
    let rules = limits.rules();
    let name =
        |route: &str, client: &str| rules.resolve(route, client).map(|r| r.name().to_owned());
    assert_eq!(name("api/search", "203.0.113.7").unwrap(), "api/search");
    assert_eq!(
        name("api/search", "192.168.11.3").unwrap(),
        "api/search/192.168.11.3"
    );
    assert_eq!(name("api/orders", "203.0.113.7").unwrap(), "api");
    assert_eq!(name("apiv2", "203.0.113.7").unwrap(), "/");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let error = Limits::load(["/nonexistent/tollgate.toml"]).unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    assert!(
        error.to_string().contains("/nonexistent/tollgate.toml"),
        "{error}"
    );
    assert!(matches!(
        Limits::load(Vec::<&str>::new()),
        Err(ConfigError::NoFiles)
    ));
}

#[test]
fn invalid_files_are_refused_with_path_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let mut file = std::fs::File::create(&path).unwrap();
    writeln!(
        file,
        "[limits]\n\"/\" = \"10/s\"\napi = {{ rate = \"10/s\", burst = 0 }}"
    )
    .unwrap();
    let error = Limits::load([&path]).unwrap_err();
    let text = error.to_string();
    assert_eq!(
        text,
        format!(
            "{}:3:32: burst must be between 1 and 4294967295, found 0",
            path.display()
        )
    );
    assert_eq!(error.diagnostics().len(), 1);
}

#[test]
fn layered_files_override_rule_by_rule() {
    let dir = tempfile::tempdir().unwrap();
    let global = dir.path().join("global.toml");
    let local = dir.path().join("local.toml");
    std::fs::write(&global, "[limits]\n\"/\" = \"10/s\"\napi = \"100/min\"\n").unwrap();
    std::fs::write(&local, "[limits]\napi = \"5/min\"\n").unwrap();
    let limits = Limits::load([&global, &local]).unwrap();
    let rules = limits.rules();
    let api = rules.resolve("api", "x").unwrap();
    assert_eq!(api.origin().file, local);
    assert_eq!(rules.resolve("other", "x").unwrap().origin().file, global);
    assert_eq!(rules.files(), [global, local]);
}

/// The JSON Schema (issue 24): every library TOML file in `config/` is valid under it, and
/// a field the parser does not know is not. (The copy in `config/` that the files'
/// `#:schema` lines point editors at is the service's, which adds `[gateway]`: the
/// service's tests check it is current.)
#[test]
fn the_schema_validates_every_config_file_and_refuses_an_unknown_field() {
    let schema = tollgate::config::json_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut checked = 0;
    for path in library_samples(&["toml"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("#:schema ./tollgate.schema.json\n"),
            "{} names the schema for editors",
            path.display()
        );
        let document: serde_json::Value = toml::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&document)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        checked += 1;
    }
    assert!(checked >= 2, "the TOML files in config/ were found");

    for (bad, field) in [
        ("[limits.api]\nrate = \"1/s\"\nbrust = 3\n", "brust"),
        ("[limitz]\n", "limitz"),
        ("[store]\nmax_bucket = 5\n", "max_bucket"),
        (
            "[limits]\napi = { rate = \"1/s\", concurrency = { limit = 2, maximum = 4 } }\n",
            "maximum",
        ),
    ] {
        let document: serde_json::Value = toml::from_str(bad).unwrap();
        assert!(!validator.is_valid(&document), "the schema refuses {field}");
        let error = Limits::from_toml(bad).unwrap_err().to_string();
        assert!(error.contains(field), "and so does the parser: {error}");
    }
    // Values the schema types more narrowly than "any": an algorithm, on_limit.
    for bad in [
        "[limits]\napi = { rate = \"1/s\", algorithm = \"leaky\" }\n",
        "[limits]\napi = { rate = \"1/s\", on_limit = \"wait\" }\n",
    ] {
        let document: serde_json::Value = toml::from_str(bad).unwrap();
        assert!(!validator.is_valid(&document), "{bad}");
        assert!(Limits::from_toml(bad).is_err(), "{bad}");
    }
}
