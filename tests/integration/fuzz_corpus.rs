//! The fuzz targets' checks, replayed on the stable toolchain over the committed seed
//! corpus (`fuzz/seeds/<target>/`) and every saved finding (`fuzz/regressions/<target>/`),
//! so `cargo test` keeps what fuzzing found fixed without needing libFuzzer or nightly.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
mod checks;

/// The inputs saved for `target`, seeds and findings, in a stable order.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(folder).join(target)) else {
            continue;
        };
        files.extend(entries.map(|entry| entry.unwrap().path()));
    }
    files.sort();
    files
}

/// Runs `check` on each saved input of `target`, naming the input that fails.
fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(
        files.len() >= 5,
        "the {target} seed corpus is missing ({} files)",
        files.len()
    );
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "fuzz input {} fails", file.display());
    }
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
