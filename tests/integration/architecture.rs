//! ARCHITECTURE.md kept true for the library: its code map's "may use" column against what
//! each file of `src/` imports, and no import circles (the reader is the test kit's
//! `architecture`; the service's tests check its own crate).

use std::path::Path;

use tollgate_testkit::architecture::{Crate, MOST_LINES, check, expand_use, oversized};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_room_uses_only_what_architecture_md_allows_and_no_two_files_import_each_other() {
    check(root(), root(), "### Code map: the library");
}

#[test]
fn the_reader_sees_imports_as_the_compiler_does() {
    // The checks are only as good as this reading of `use` trees.
    assert_eq!(
        expand_use("super::{a::{B, C as D}, self, e::*}"),
        ["super::a::B", "super::a::C", "super", "super::e"]
    );
    let krate = Crate::read(root());
    let compile = vec!["config".to_owned(), "compile".to_owned()];
    assert_eq!(
        krate.resolve(&compile, "super::rule::Limit"),
        Some(vec!["config".into(), "rule".into()])
    );
    assert_eq!(
        krate.resolve(&compile, "crate::Limits"),
        Some(vec!["limits".into()])
    );
    assert_eq!(krate.resolve(&compile, "toml::Spanned"), None);
    let tree = vec![
        "config".to_owned(),
        "envoy_yaml".to_owned(),
        "tree".to_owned(),
    ];
    assert_eq!(
        krate.resolve(&tree, "super::super::error::Diagnostic"),
        Some(vec!["config".into(), "error".into()])
    );
    let reload = krate.modules[&vec!["reload".to_owned()]];
    let config_source = krate.modules[&vec!["config".to_owned(), "source".to_owned()]];
    assert!(krate.edges()[&reload].contains(&config_source));
}

#[test]
fn no_source_file_is_longer_than_600_lines_above_its_tests() {
    let long = oversized(root());
    assert!(
        long.is_empty(),
        "over {MOST_LINES} lines above their unit tests (split them by concern): {long:#?}"
    );
}
