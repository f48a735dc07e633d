//! Membership sources: the tables the rules name beside themselves — `[plans] members`,
//! `[identity.api_keys] members` and `[identity.jwt]`'s key set — resolved to sources the reloader reads and
//! watches, fingerprinted so a reload of the rules alone reuses what was read; and what a
//! plan may be called, which both kinds of table check.

use std::path::{Path, PathBuf};

use http::HeaderName;
use toml::Spanned;

use super::error::Diagnostic;
use super::source::{ConfigSource, SourceText};

/// The longest plan name: plans are names an operator writes, not identities.
pub(crate) const MAX_PLAN_NAME: usize = 64;

/// Whether `name` can name a plan: 1 to [`MAX_PLAN_NAME`] letters, digits, `-`, `_`, `.`.
pub(crate) fn is_plan_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PLAN_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What membership `texts` were read from (source name, text length and hash): a reload of
/// the rules alone compares these and reuses the tables rather than parse a million rows.
pub(super) fn fingerprints(texts: &[&SourceText]) -> Vec<(PathBuf, usize, u64)> {
    texts
        .iter()
        .map(|text| {
            (
                text.path.clone(),
                text.text.len(),
                std::hash::BuildHasher::hash_one(
                    &foldhash::quality::FixedState::default(),
                    &text.text,
                ),
            )
        })
        .collect()
}

pub(super) fn bad_plan_name(name: &str) -> String {
    format!(
        "plan name \"{}\" must be 1 to {MAX_PLAN_NAME} letters, digits, '-', '_' or '.'",
        name.escape_debug()
    )
}

/// A `[plans] members` entry as a source: a URL, or a path relative to the directory of
/// the file that names it.
pub(super) fn member_source(
    declared_in: &Path,
    remote: bool,
    entry: &str,
) -> Result<ConfigSource, String> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err("a membership source must name a file or a URL".to_owned());
    }
    let path = Path::new(entry);
    let source = ConfigSource::parse(path).map_err(|error| error.to_string())?;
    Ok(match source {
        ConfigSource::File(path) if path.is_relative() && !remote => {
            let base = declared_in.parent().unwrap_or(Path::new(""));
            ConfigSource::File(base.join(path))
        }
        other => other,
    })
}

/// The membership sources `texts` (rule files, in layering order) name: the last
/// `[plans] members` written wins. What the reloader reads besides the rules; a text that
/// does not parse names none (compiling it says why).
pub(crate) fn membership_sources(texts: &[SourceText]) -> Vec<ConfigSource> {
    #[derive(serde::Deserialize)]
    struct Document {
        plans: Option<Members>,
        identity: Option<IdentityTable>,
    }
    #[derive(serde::Deserialize)]
    struct IdentityTable {
        api_keys: Option<Members>,
        jwt: Option<Jwt>,
    }
    #[derive(serde::Deserialize)]
    struct Jwt {
        jwks_file: Option<String>,
        jwks_url: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Members {
        members: Option<Vec<String>>,
    }
    let mut plans: Vec<ConfigSource> = Vec::new();
    let mut keys: Vec<ConfigSource> = Vec::new();
    let mut jwks: Option<ConfigSource> = None;
    for text in texts.iter().filter(|text| !text.members && !text.is_yaml()) {
        let Ok(document) = toml::from_str::<Document>(&text.text) else {
            continue;
        };
        let resolve = |members: &[String]| -> Vec<ConfigSource> {
            members
                .iter()
                .filter_map(|entry| member_source(&text.path, text.remote, entry).ok())
                .collect()
        };
        if let Some(Members {
            members: Some(members),
        }) = &document.plans
        {
            plans = resolve(members);
        }
        if let Some(IdentityTable {
            api_keys: Some(Members {
                members: Some(members),
            }),
            ..
        }) = &document.identity
        {
            keys = resolve(members);
        }
        if let Some(IdentityTable { jwt: Some(jwt), .. }) = &document.identity {
            jwks = match (&jwt.jwks_file, &jwt.jwks_url) {
                (Some(file), None) => member_source(&text.path, text.remote, file).ok(),
                (None, Some(url)) => jwks_url(url).ok(),
                _ => None,
            };
        }
    }
    keys.extend(jwks);
    // Plan tables, then key tables; a source both name is read once.
    for source in keys {
        if !plans.contains(&source) {
            plans.push(source);
        }
    }
    plans
}

/// `jwks_url` as a source: https, or http to a loopback address (a key server on the
/// same host, or a test's); anything else could be answered by whoever sits on the path.
pub(super) fn jwks_url(text: &str) -> Result<ConfigSource, String> {
    let text = text.trim();
    let source = ConfigSource::parse(std::path::Path::new(text)).map_err(|e| e.to_string())?;
    let ConfigSource::Url(url) = &source else {
        return Err(format!(
            "jwks_url must be an https:// URL, found \"{}\"",
            text.escape_debug()
        ));
    };
    let host = url.host();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback());
    if text.starts_with("https://") || loopback {
        Ok(source)
    } else {
        Err(format!(
            "jwks_url must be https:// (plain http only to a loopback address): a key set \
             fetched in clear could be replaced on the way, found \"{}\"",
            text.escape_debug()
        ))
    }
}

/// A header name a table writes, or (with a diagnostic at it) `None`.
pub(super) fn header_name(
    source: &SourceText,
    written: &Spanned<String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<HeaderName> {
    match HeaderName::from_bytes(written.get_ref().trim().as_bytes()) {
        Ok(name) => Some(name),
        Err(_) => {
            diagnostics.push(source.at(
                written.span(),
                format!(
                    "\"{}\" is not a header name",
                    written.get_ref().escape_debug()
                ),
            ));
            None
        }
    }
}

/// A `members` list as sources, each entry resolved against `source` (a bad one said).
pub(super) fn member_sources(
    source: &SourceText,
    members: &Spanned<Vec<Spanned<String>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<ConfigSource> {
    let mut sources = Vec::new();
    for item in members.get_ref() {
        match member_source(&source.path, source.remote, item.get_ref()) {
            Ok(member) => sources.push(member),
            Err(reason) => diagnostics.push(source.at(item.span(), reason)),
        }
    }
    sources
}

/// The texts of `wanted` among `texts`, in `wanted`'s order; one not read is said, naming
/// the `table` that named it.
pub(super) fn texts_of<'t>(
    wanted: &[ConfigSource],
    texts: &[&'t SourceText],
    table: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<&'t SourceText> {
    let mut ordered = Vec::new();
    for wanted in wanted {
        match texts.iter().find(|text| text.path == wanted.name()) {
            Some(text) => ordered.push(*text),
            None => diagnostics.push(Diagnostic {
                file: wanted.name().to_path_buf(),
                line: 0,
                column: 0,
                message: format!(
                    "named in {table} but not read (config given as text reads no other \
                     files: load the config from files)"
                ),
            }),
        }
    }
    ordered
}

/// A membership source's rows — a plan's members, an API key table — read as the parser's
/// own borrowed table (no second copy of a million rows). Text that does not parse is a
/// diagnostic at its place saying what such a table holds (`shape`), and no rows.
pub(super) fn rows<'t>(
    source: &'t SourceText,
    shape: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<toml::de::DeTable<'t>> {
    match toml::de::DeTable::parse(&source.text) {
        Ok(rows) => Some(rows.into_inner()),
        Err(error) => {
            diagnostics.push(source.at(
                error.span().unwrap_or(0..0),
                format!("{} ({shape})", error.message().trim_end()),
            ));
            None
        }
    }
}
