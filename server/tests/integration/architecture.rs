//! ARCHITECTURE.md kept true for the service: its code map against what each file of
//! `server/src/` imports (no import circles), front ends that never import each other and
//! decide only through `Limits`, and the list of the library's public API the service uses.
//! (That the service uses nothing else of the library, the compiler sees to: it is another
//! crate.)

use std::collections::BTreeSet;
use std::path::Path;

use tollgate_testkit::architecture::{Crate, MOST_LINES, check, oversized, references};

fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn repository() -> std::path::PathBuf {
    crate_root().join("..")
}

#[test]
fn every_room_uses_only_what_architecture_md_allows_and_no_two_files_import_each_other() {
    check(&repository(), crate_root(), "### Code map: the service");
}

#[test]
fn front_ends_never_import_each_other_and_decide_only_through_limits() {
    let krate = Crate::read(crate_root());
    // A front end is a module with a `serve` entry point; only the assembly starts them.
    let front_ends: BTreeSet<usize> = (0..krate.files.len())
        .filter(|&i| krate.files[i].code.contains("pub async fn serve"))
        .collect();
    assert!(
        front_ends.len() >= 4,
        "the proxy, admin, RESP and gRPC front ends"
    );
    let assembly = ["src/lib.rs", "src/startup.rs"];
    let mut violations = Vec::new();
    for (from, targets) in krate.edges() {
        let path = &krate.files[from].path;
        if assembly.iter().any(|a| path == Path::new(a)) {
            continue;
        }
        for target in targets.intersection(&front_ends) {
            violations.push(format!(
                "{} imports {}",
                path.display(),
                krate.files[*target].path.display()
            ));
        }
    }
    // And they decide only through `Limits`: never by asking a store for a decision.
    for file in &krate.files {
        if file.code.contains("CheckRequest") {
            violations.push(format!(
                "{} builds a CheckRequest instead of asking Limits",
                file.path.display()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "front ends are siblings over Limits, started only by the assembly:\n{}",
        violations.join("\n")
    );
}

/// The library's items the service names (`tollgate::Limits`, `tollgate::config::RuleSet`,
/// …), as `tollgate::` paths of at most three segments.
fn library_api_used() -> BTreeSet<String> {
    let krate = Crate::read(crate_root());
    let mut used = BTreeSet::new();
    for file in &krate.files {
        for (path, _) in references(file) {
            if let Some(rest) = path.strip_prefix("tollgate::") {
                used.insert(format!("tollgate::{rest}"));
            }
        }
        // Paths written out in code (`tollgate::config::parse_duration(…)`).
        for (at, _) in file.code.match_indices("tollgate::") {
            if file.code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: String = file.code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            used.insert(path.trim_end_matches(':').to_owned());
        }
    }
    used.into_iter()
        .filter(|path| path != "tollgate")
        .map(|path| path.split("::").take(3).collect::<Vec<_>>().join("::"))
        .collect()
}

#[test]
fn architecture_md_names_the_library_api_the_service_uses() {
    let text = std::fs::read_to_string(repository().join("ARCHITECTURE.md")).unwrap();
    let section = "### What the service uses of the library";
    let start = text
        .find(section)
        .expect("ARCHITECTURE.md lists the library API the service uses");
    let listed = &text[start..];
    let listed = &listed[..listed[section.len()..]
        .find("\n#")
        .map_or(listed.len(), |at| at + section.len())];
    let missing: Vec<String> = library_api_used()
        .into_iter()
        .filter(|path| {
            // Listed as the path itself, or its last segment under its module's line.
            let last = path.rsplit("::").next().unwrap_or(path);
            !listed.contains(&format!("`{path}`")) && !listed.contains(&format!("`{last}`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's \"{section}\" does not name: {missing:?}"
    );
}

#[test]
fn no_source_file_is_longer_than_600_lines_above_its_tests() {
    let long = oversized(crate_root());
    assert!(
        long.is_empty(),
        "over {MOST_LINES} lines above their unit tests (split them by concern): {long:#?}"
    );
}
