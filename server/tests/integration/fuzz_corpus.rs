//! The `resp` fuzz target's checks (`fuzz/src/resp.rs`), replayed on the stable toolchain
//! over its committed seeds and every saved finding, as the library's
//! `tests/integration/fuzz_corpus.rs` replays the others.

use std::path::Path;

#[path = "../../../fuzz/src/resp.rs"]
mod checks;
#[path = "../../../fuzz/src/replay.rs"]
mod saved;

/// Runs `check` on each saved input of `target`, seeds and findings.
fn replay(target: &str, check: fn(&[u8])) {
    saved::replay(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz"),
        target,
        check,
    );
}

#[test]
fn resp_corpus_replays_clean() {
    replay("resp", checks::resp);
}
