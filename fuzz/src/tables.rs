//! Text read beside the rules at every reload: envoyproxy/ratelimit's YAML, plans' member
//! tables and API key tables. Operators write these, often generated from a database;
//! remote ones arrive over HTTP.

use std::path::Path;

use tollgate::config::{Diagnostic, RuleSet};
use tollgate::fuzzing::compile;
use tollgate::key::{ApiKeys, RouteSettings, normalize_route};

/// A compiled set's own consistency: each rule is found under its own key, and keys are
/// normalised (without the depth cut: a key may hold a client segment past the route).
pub(crate) fn check_rule_set(rules: &RuleSet) {
    let mut key_settings: RouteSettings = rules.route_settings().clone();
    key_settings.max_depth = usize::MAX;
    for rule in rules.rules() {
        assert_eq!(
            rules.get(rule.key()).map(|r| r.key()),
            Some(rule.key()),
            "rule {:?} is not found under its own key",
            rule.key()
        );
        if !rule.key().contains('%') {
            assert_eq!(
                normalize_route(rule.key(), &key_settings),
                rule.key(),
                "rule key is not normalised"
            );
        }
    }
}

/// A refusal says why, at a place inside the file it names (one of `texts`).
pub(crate) fn check_diagnostics(diagnostics: &[Diagnostic], texts: &[(&Path, &str)]) {
    assert!(!diagnostics.is_empty(), "refused without saying why");
    for diagnostic in diagnostics {
        let Some((_, text)) = texts.iter().find(|(path, _)| *path == diagnostic.file) else {
            panic!("a diagnostic names a file not read: {diagnostic}");
        };
        let lines = text.lines().count().max(1) + 1;
        assert!(
            (1..=lines).contains(&diagnostic.line) && diagnostic.column >= 1,
            "diagnostic points outside the text ({lines} lines): {diagnostic}"
        );
        assert!(!diagnostic.message.is_empty(), "empty diagnostic message");
    }
}

/// `envoy_yaml`: envoyproxy/ratelimit's YAML as a config source. Never panics; a refusal
/// points inside the file; an accepted file's rules are found under their own keys, one
/// rule per descriptor path, under the file's domain.
pub fn envoy_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("ratelimit.yaml");
    match compile(&[(path, text, false)]) {
        Ok(rules) => check_rule_set(&rules),
        Err(diagnostics) => check_diagnostics(&diagnostics, &[(path, text)]),
    }
}

/// Compiles `config` (as `rules.toml`) with the membership table it names (`table`, as
/// `name`), as a reload does: an accepted set is checked and handed to `accepted`; a
/// refusal must point inside one of the two files.
fn compile_with_table(config: &str, name: &str, table: &str, accepted: impl FnOnce(&RuleSet)) {
    let (config_path, table_path) = (Path::new("rules.toml"), Path::new(name));
    match compile(&[(config_path, config, false), (table_path, table, true)]) {
        Ok(rules) => {
            check_rule_set(&rules);
            accepted(&rules);
        }
        Err(diagnostics) => {
            check_diagnostics(&diagnostics, &[(config_path, config), (table_path, table)]);
        }
    }
}

/// The config naming the member table the `plan_members` target writes.
const PLANS_CONFIG: &str = r#"[plans]
default = "free"
members = ["plans.toml"]

[limits.api]
rate = "100/min"

[limits.api.plans]
free = "10/min"
pro = "1000/min"
"#;

/// `plan_members`: a `[plans] members` table (`"identity" = "plan"`). Never panics; a
/// refusal points inside the table; an accepted table keeps the row the target put first,
/// and holds no more members than rows.
pub fn plan_members(data: &[u8]) {
    let Ok(rows) = std::str::from_utf8(data) else {
        return;
    };
    let table = format!("\"fuzz-member\" = \"pro\"\n{rows}");
    compile_with_table(PLANS_CONFIG, "plans.toml", &table, |rules| {
        let plans = rules.plans();
        assert_eq!(
            plans.member_plan("fuzz-member"),
            Some("pro"),
            "the first row was lost"
        );
        assert!(
            plans.members() <= table.matches('=').count(),
            "more members than rows"
        );
    });
}

/// The config naming the key table the `api_keys` target writes.
const KEYS_CONFIG: &str = r#"[client]
sources = ["api_key", "ip"]

[identity.api_keys]
header = "x-api-key"
members = ["keys.toml"]

[limits]
api = "10/s"
"#;

/// The key whose row the `api_keys` target puts first.
const KNOWN_KEY: &[u8] = b"tg_fuzz_known_key";

/// `api_keys`: an `[identity.api_keys] members` table (`"SHA-256 hex" = { id, plan }`).
/// Never panics; a refusal points inside the table; an accepted table knows the key whose
/// row the target put first, as its owner, no key it was not given, and no more keys than
/// rows.
pub fn api_keys(data: &[u8]) {
    let Ok(rows) = std::str::from_utf8(data) else {
        return;
    };
    let table = format!(
        "\"{}\" = {{ id = \"fuzz-owner\" }}\n{rows}",
        ApiKeys::digest_hex(KNOWN_KEY)
    );
    compile_with_table(KEYS_CONFIG, "keys.toml", &table, |rules| {
        let keys = rules
            .client_settings()
            .api_keys
            .as_ref()
            .expect("an accepted key table is in force");
        let owner = keys.owner(KNOWN_KEY).expect("the first row was lost");
        assert_eq!(&*owner.id, "fuzz-owner");
        assert!(
            keys.owner(b"tg_never_issued").is_none(),
            "an unknown key is known"
        );
        assert!(
            keys.len() <= table.matches('=').count(),
            "more keys than rows"
        );
    });
}
