//! The `resp` fuzz target's checks (`fuzz/src/resp.rs`), replayed on the stable toolchain
//! over its committed seeds and every saved finding, as the library's
//! `tests/integration/fuzz_corpus.rs` replays the others.

use std::path::Path;

#[path = "../../../fuzz/src/resp.rs"]
mod checks;

/// Runs `check` on each saved input of `target`, seeds and findings, naming the one that
/// fails.
fn replay(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for folder in ["seeds", "regressions"] {
        if let Ok(entries) = std::fs::read_dir(root.join(folder).join(target)) {
            files.extend(entries.map(|entry| entry.unwrap().path()));
        }
    }
    files.sort();
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
fn resp_corpus_replays_clean() {
    replay("resp", checks::resp);
}
