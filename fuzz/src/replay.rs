//! Replaying a target's saved inputs on the stable toolchain: its seeds
//! (`fuzz/seeds/<target>/`) and every finding (`fuzz/regressions/<target>/`), through the
//! target's own check. Included by path by the tests that replay them (the library's
//! `tests/integration/fuzz_corpus.rs`, the service's for `resp`).

use std::path::{Path, PathBuf};

/// The inputs saved for `target` under the `fuzz` directory, seeds and findings, in a
/// stable order.
fn inputs(fuzz: &Path, target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for folder in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join(target)) else {
            continue;
        };
        files.extend(entries.map(|entry| entry.expect("a readable entry").path()));
    }
    files.sort();
    files
}

/// Runs `check` on each saved input of `target`, naming the input that fails.
pub(crate) fn replay(fuzz: &Path, target: &str, check: fn(&[u8])) {
    let files = inputs(fuzz, target);
    assert!(
        files.len() >= 5,
        "the {target} seed corpus is missing ({} files)",
        files.len()
    );
    for file in files {
        let data = std::fs::read(&file).expect("a readable input");
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "fuzz input {} fails", file.display());
    }
}
