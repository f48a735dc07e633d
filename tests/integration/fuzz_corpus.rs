//! The fuzz targets' checks, replayed on the stable toolchain over the committed seed
//! corpus (`fuzz/seeds/<target>/`) and every saved finding (`fuzz/regressions/<target>/`),
//! so `cargo test` keeps what fuzzing found fixed without needing libFuzzer or nightly;
//! and the list of targets (`fuzz/targets.toml`) checked against the targets present.
//! The service's target (`resp`) is replayed by the service's tests.

use std::path::Path;

#[path = "../../fuzz/src/lib.rs"]
mod checks;
#[path = "../../fuzz/src/replay.rs"]
mod saved;

/// Runs `check` on each saved input of `target`, seeds and findings.
fn replay(target: &str, check: fn(&[u8])) {
    saved::replay(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz"),
        target,
        check,
    );
}

#[test]
fn config_corpus_replays_clean() {
    replay("config", checks::config);
}

#[test]
fn rate_corpus_replays_clean() {
    replay("rate", checks::rate);
}

#[test]
fn route_corpus_replays_clean() {
    replay("route", checks::route);
}

#[test]
fn forwarded_corpus_replays_clean() {
    replay("forwarded", checks::forwarded);
}

#[test]
fn settle_corpus_replays_clean() {
    replay("settle", checks::settle);
}

#[test]
fn usage_corpus_replays_clean() {
    replay("usage", checks::usage);
}

#[test]
fn request_body_corpus_replays_clean() {
    replay("request_body", checks::request_body);
}

#[test]
fn key_parts_corpus_replays_clean() {
    replay("key_parts", checks::key_parts);
}

#[test]
fn envoy_yaml_corpus_replays_clean() {
    replay("envoy_yaml", checks::envoy_yaml);
}

#[test]
fn plan_members_corpus_replays_clean() {
    replay("plan_members", checks::plan_members);
}

#[test]
fn api_keys_corpus_replays_clean() {
    replay("api_keys", checks::api_keys);
}

#[test]
fn jwt_corpus_replays_clean() {
    replay("jwt", checks::jwt);
}

#[test]
fn jwks_corpus_replays_clean() {
    replay("jwks", checks::jwks);
}

#[test]
fn disk_corpus_replays_clean() {
    replay("disk", checks::disk);
}

/// One entry of `fuzz/targets.toml`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    name: String,
    input: String,
    covers: Vec<String>,
    replayed_by: String,
}

#[derive(serde::Deserialize)]
struct Targets {
    target: Vec<Target>,
}

/// The file at `path` from the project root, as text.
fn project_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The one list of targets names exactly the targets present, and each of them is whole:
/// its source, seeds, dictionary, the code it covers, the test replaying it, a row in
/// SECURITY.md. A parser cannot land with a target CI does not run, nor a target unlisted.
#[test]
fn the_list_of_fuzz_targets_is_the_targets_present() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed: Targets = toml::from_str(&project_file("fuzz/targets.toml")).unwrap();
    let mut names: Vec<&str> = listed.target.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();

    let manifest: toml::Table = toml::from_str(&project_file("fuzz/Cargo.toml")).unwrap();
    let mut bins: Vec<&str> = manifest["bin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bin| bin["name"].as_str().unwrap())
        .collect();
    bins.sort_unstable();
    assert_eq!(
        names, bins,
        "fuzz/targets.toml and fuzz/Cargo.toml's [[bin]]s differ"
    );

    let mut sources: Vec<String> = std::fs::read_dir(root.join("fuzz/fuzz_targets"))
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            path.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    sources.sort_unstable();
    assert_eq!(
        names, sources,
        "fuzz/targets.toml and fuzz/fuzz_targets/ differ"
    );

    let security = project_file("SECURITY.md");
    for target in &listed.target {
        let name = &target.name;
        assert!(!target.input.is_empty(), "{name}: say what it reads");
        assert!(!target.covers.is_empty(), "{name}: say what it covers");
        for covered in &target.covers {
            assert!(
                root.join(covered).exists(),
                "{name} covers {covered}, which is gone"
            );
        }
        assert!(
            root.join(format!("fuzz/dicts/{name}.dict")).is_file(),
            "{name} has no dictionary"
        );
        let seeds =
            std::fs::read_dir(root.join(format!("fuzz/seeds/{name}"))).map_or(0, Iterator::count);
        assert!(seeds >= 5, "{name} has {seeds} seeds");
        assert!(
            project_file(&target.replayed_by).contains(&format!("replay(\"{name}\"")),
            "{} does not replay {name}",
            target.replayed_by
        );
        assert!(
            security.contains(&format!("| fuzz target `{name}`")),
            "SECURITY.md has no row for the fuzz target {name}"
        );
    }
}
