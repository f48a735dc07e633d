//! `[identity]`: verified identities. `[identity.api_keys]` names the header API keys come
//! in and the key tables (files or URLs, read, watched and polled like plan membership
//! tables): rows of a key's SHA-256 digest → `{ id = "...", plan = "..." }`.
//! `on_invalid` says what a key nobody issued does.
//!
//! ```toml
//! [identity]
//! on_invalid = "anonymous"          # or "reject": 401
//!
//! [identity.api_keys]
//! header = "x-api-key"              # the default
//! members = ["keys.toml"]
//! ```
//!
//! ```toml
//! # keys.toml: what `tollgate api-key` prints for each new key
//! "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" = { id = "team-a", plan = "pro" }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use http::HeaderName;
use serde::Deserialize;
use toml::Spanned;

use super::error::Diagnostic;
use super::source::{ConfigSource, SourceText};
use crate::key::{
    ApiKeyOwner, ApiKeys, JwtSettings, JwtVerifier, MAX_HEADER_IDENTITY, OnInvalid, TokenFrom,
};

/// `[identity]`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIdentity {
    /// What a credential that fails does: "anonymous" (as if absent; the default) or
    /// "reject" (401).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) on_invalid: Option<Spanned<String>>,
    /// API keys: the header they come in, and the tables of their digests.
    pub(crate) api_keys: Option<RawApiKeys>,
    /// JSON Web Tokens: where their keys come from and what they must say.
    pub(crate) jwt: Option<RawJwt>,
}

/// `[identity.jwt]`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJwt {
    /// A JSON Web Key Set at an https URL, fetched like remote config (conditional
    /// requests, the last good set kept) and again, at most every 30 s, on an unknown kid.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) jwks_url: Option<Spanned<String>>,
    /// A JSON Web Key Set file (relative to the file naming it), watched like the config.
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) jwks_file: Option<Spanned<String>>,
    /// An environment variable holding an HS256 secret (at least 32 bytes).
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) secret_env: Option<Spanned<String>>,
    /// `iss` must be this.
    pub(crate) issuer: Option<String>,
    /// `aud` must include this.
    pub(crate) audience: Option<String>,
    /// The algorithms accepted (default RS256, ES256, EdDSA with a key set; HS256 with a secret).
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) algorithms: Option<Spanned<Vec<String>>>,
    /// Clock skew allowed on exp and nbf (default "30s").
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) leeway: Option<Spanned<String>>,
    /// Where the token is read: "bearer" (the default), "header:NAME" or "cookie:NAME".
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) token: Option<Spanned<String>>,
}

/// `[identity.api_keys]`.
#[derive(Debug, Default, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApiKeys {
    /// The header a key comes in (default "x-api-key").
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub(crate) header: Option<Spanned<String>>,
    /// Key tables, files or URLs: rows of "SHA-256 hex digest" = { id = "...", plan = "..." }.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Vec<String>>"))]
    pub(crate) members: Option<Spanned<Vec<Spanned<String>>>>,
}

/// The `[identity]` settings folded over the files, and the key tables once read.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    pub(crate) on_invalid: OnInvalid,
    api_keys: Option<KeySettings>,
    jwt: Option<JwtConfig>,
}

/// `[identity.jwt]` folded: the verifier's settings and where its keys come from.
#[derive(Debug)]
struct JwtConfig {
    settings: JwtSettings,
    keys: JwtKeys,
}

#[derive(Debug)]
enum JwtKeys {
    /// An HS256 secret from this environment variable.
    SecretEnv(String),
    /// A key set from this source.
    Jwks(ConfigSource),
}

#[derive(Debug)]
struct KeySettings {
    header: HeaderName,
    sources: Vec<ConfigSource>,
}

/// The key tables as read: kept with what they were read from, so a reload of the rules
/// alone reuses them.
#[derive(Debug)]
pub(crate) struct ReadKeys {
    pub(crate) keys: Arc<ApiKeys>,
    read_from: Vec<(PathBuf, usize, u64)>,
}

impl Identity {
    /// Folds one file's `[identity]` over what earlier files set.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawIdentity,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        if let Some(on_invalid) = &raw.on_invalid {
            match on_invalid.get_ref().as_str() {
                "anonymous" => self.on_invalid = OnInvalid::Anonymous,
                "reject" => self.on_invalid = OnInvalid::Reject,
                other => diagnostics.push(source.at(
                    on_invalid.span(),
                    format!(
                        "on_invalid must be \"anonymous\" or \"reject\", found \"{}\"",
                        other.escape_debug()
                    ),
                )),
            }
        }
        if let Some(jwt) = &raw.jwt {
            self.apply_jwt(source, jwt, diagnostics);
        }
        let Some(raw_keys) = &raw.api_keys else {
            return;
        };
        let settings = self.api_keys.get_or_insert_with(|| KeySettings {
            header: HeaderName::from_static("x-api-key"),
            sources: Vec::new(),
        });
        if let Some(header) = &raw_keys.header
            && let Some(name) = super::members::header_name(source, header, diagnostics)
        {
            settings.header = name;
        }
        if let Some(members) = &raw_keys.members {
            settings.sources = super::members::member_sources(source, members, diagnostics);
        }
    }

    /// Folds `[identity.jwt]` (a file's table replaces an earlier file's whole).
    fn apply_jwt(&mut self, source: &SourceText, raw: &RawJwt, diagnostics: &mut Vec<Diagnostic>) {
        let before = diagnostics.len();
        let mut settings = JwtSettings {
            issuer: raw.issuer.clone(),
            audience: raw.audience.clone(),
            ..JwtSettings::default()
        };
        if let Some(algorithms) = &raw.algorithms {
            for name in algorithms.get_ref() {
                if name.eq_ignore_ascii_case("none") {
                    diagnostics.push(source.at(
                        algorithms.span(),
                        "algorithm \"none\" is never accepted: an unsigned token proves nothing",
                    ));
                }
            }
            settings.algorithms = algorithms.get_ref().clone();
        }
        if let Some(leeway) = &raw.leeway {
            match crate::quota::parse_duration(leeway.get_ref()) {
                Some(duration) if duration.as_secs() <= 3600 => {
                    settings.leeway = duration.as_secs()
                }
                _ => diagnostics.push(source.at(
                    leeway.span(),
                    format!(
                        "leeway must be a duration up to \"1h\" such as \"30s\", found \"{}\"",
                        leeway.get_ref().escape_debug()
                    ),
                )),
            }
        }
        if let Some(token) = &raw.token {
            match TokenFrom::parse(token.get_ref()) {
                Some(from) => settings.token = from,
                None => diagnostics.push(source.at(
                    token.span(),
                    format!(
                        "token must be \"bearer\", \"header:NAME\" or \"cookie:NAME\", found \"{}\"",
                        token.get_ref().escape_debug()
                    ),
                )),
            }
        }
        let keys = match (&raw.jwks_file, &raw.jwks_url, &raw.secret_env) {
            (Some(file), None, None) => {
                match super::members::member_source(&source.path, source.remote, file.get_ref()) {
                    Ok(ConfigSource::File(path)) => Some(JwtKeys::Jwks(ConfigSource::File(path))),
                    Ok(_) => {
                        diagnostics.push(
                            source.at(file.span(), "jwks_file names a file; put a URL in jwks_url"),
                        );
                        None
                    }
                    Err(reason) => {
                        diagnostics.push(source.at(file.span(), reason));
                        None
                    }
                }
            }
            (None, Some(url), None) => match super::members::jwks_url(url.get_ref()) {
                Ok(url) => Some(JwtKeys::Jwks(url)),
                Err(reason) => {
                    diagnostics.push(source.at(url.span(), reason));
                    None
                }
            },
            (None, None, Some(name)) if super::env::is_env_name(name.get_ref()) => {
                Some(JwtKeys::SecretEnv(name.get_ref().clone()))
            }
            (None, None, Some(name)) => {
                diagnostics.push(source.at(
                    name.span(),
                    format!(
                        "secret_env must name an environment variable, found \"{}\"",
                        name.get_ref().escape_debug()
                    ),
                ));
                None
            }
            _ => {
                diagnostics.push(source.at(
                    0..0,
                    "[identity.jwt] needs exactly one of jwks_url, jwks_file or secret_env",
                ));
                None
            }
        };
        if diagnostics.len() == before
            && let Some(keys) = keys
        {
            self.jwt = Some(JwtConfig { settings, keys });
        }
    }

    /// The token verifier `[identity.jwt]` describes, its key set read from `texts`;
    /// `None` without the table or (with `diagnostics` saying why) when it cannot be made.
    pub(super) fn read_jwt(
        &self,
        texts: &[&SourceText],
        rules_file: &std::path::Path,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<Arc<JwtVerifier>> {
        let config = self.jwt.as_ref()?;
        let made = match &config.keys {
            JwtKeys::SecretEnv(name) => match std::env::var(name) {
                Ok(secret) => JwtVerifier::from_secret(secret.as_bytes(), &config.settings)
                    .map_err(|reason| {
                        (
                            rules_file.to_path_buf(),
                            format!("[identity.jwt] secret_env {name}: {reason}"),
                        )
                    }),
                Err(_) => Err((
                    rules_file.to_path_buf(),
                    format!(
                        "[identity.jwt] secret_env: the environment variable {name} is not set"
                    ),
                )),
            },
            JwtKeys::Jwks(source) => match texts.iter().find(|text| text.path == source.name()) {
                Some(text) => match JwtVerifier::from_jwks(&text.text, &config.settings) {
                    Ok((mut verifier, skipped)) => {
                        if source.is_remote() {
                            verifier.refresh_on_unknown_kid();
                        }
                        for problem in skipped {
                            tracing::warn!(file = %text.path.display(), %problem, "a key of the key set is skipped");
                        }
                        Ok(verifier)
                    }
                    Err(reason) => Err((text.path.clone(), reason)),
                },
                None => Err((
                    source.name().to_path_buf(),
                    "named in [identity.jwt] but not read (config given as text \
                     reads no other files: load the config from files)"
                        .to_owned(),
                )),
            },
        };
        match made {
            Ok(verifier) => Some(Arc::new(verifier)),
            Err((file, message)) => {
                diagnostics.push(Diagnostic {
                    file,
                    line: 0,
                    column: 0,
                    message,
                });
                None
            }
        }
    }

    /// Reads the key tables among `texts` (every membership text, any order), reusing
    /// `previous` when their texts are the same; `None` without `[identity.api_keys]`.
    pub(super) fn read_keys(
        &self,
        texts: &[&SourceText],
        previous: Option<&ReadKeys>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<ReadKeys> {
        let settings = self.api_keys.as_ref()?;
        let ordered = super::members::texts_of(
            &settings.sources,
            texts,
            "[identity.api_keys] members",
            diagnostics,
        );
        let read_from = super::members::fingerprints(&ordered);
        if let Some(previous) = previous
            && previous.read_from == read_from
            && previous.keys.header() == settings.header
        {
            return Some(ReadKeys {
                keys: Arc::clone(&previous.keys),
                read_from,
            });
        }
        let mut keys = ApiKeys::new(settings.header.clone());
        for text in ordered {
            read_table(text, &mut keys, diagnostics);
        }
        Some(ReadKeys {
            keys: Arc::new(keys),
            read_from,
        })
    }
}

/// Reads one key table into `keys`: rows of digest = { id, plan }, later rows overriding.
fn read_table(source: &SourceText, keys: &mut ApiKeys, diagnostics: &mut Vec<Diagnostic>) {
    let shape = "a key table is rows of \"SHA-256 hex digest\" = { id = \"...\" }";
    let Some(rows) = super::members::rows(source, shape, diagnostics) else {
        return;
    };
    keys.reserve(rows.len());
    let before = diagnostics.len();
    for (digest, row) in &rows {
        let problem = |message: String| source.at(row.span(), message);
        let Some(parsed) = ApiKeys::parse_digest(digest.get_ref()) else {
            // The row's key may be a key in clear pasted by mistake: never echo it.
            diagnostics.push(
                source.at(
                    digest.span(),
                    "a key table's row names a key's SHA-256 digest, 64 hex digits \
                 (`tollgate api-key` prints it)"
                        .to_owned(),
                ),
            );
            continue;
        };
        let toml::de::DeValue::Table(fields) = row.get_ref() else {
            diagnostics.push(problem(
                "a key's row is a table such as { id = \"team-a\", plan = \"pro\" }".to_owned(),
            ));
            continue;
        };
        let mut id = None;
        let mut plan = None;
        let mut bad = false;
        for (field, value) in fields {
            let toml::de::DeValue::String(text) = value.get_ref() else {
                diagnostics.push(source.at(
                    value.span(),
                    format!("{} must be a string", field.get_ref()),
                ));
                bad = true;
                continue;
            };
            let text: &str = text;
            match field.get_ref().as_ref() {
                "id" if !text.is_empty() && text.len() <= MAX_HEADER_IDENTITY => id = Some(text),
                "id" => {
                    diagnostics.push(source.at(
                        value.span(),
                        format!("id must be 1 to {MAX_HEADER_IDENTITY} bytes"),
                    ));
                    bad = true;
                }
                "plan" if super::members::is_plan_name(text) => plan = Some(text),
                "plan" => {
                    diagnostics.push(source.at(value.span(), super::members::bad_plan_name(text)));
                    bad = true;
                }
                other => {
                    diagnostics.push(source.at(
                        field.span(),
                        format!(
                            "unknown field \"{}\" in a key's row (use id and plan)",
                            other.escape_debug()
                        ),
                    ));
                    bad = true;
                }
            }
        }
        match id {
            Some(id) if !bad => keys.insert(parsed, ApiKeyOwner::new(id, plan.map(Box::from))),
            Some(_) => {}
            None if !bad => diagnostics.push(problem("a key's row needs an id".to_owned())),
            None => {}
        }
        // Errors are listed a screenful at a time, not a million.
        if diagnostics.len() - before >= 20 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Limits;
    use crate::config::ConfigError;
    use crate::key::ApiKeys;

    fn load(keys: &str) -> Result<Limits, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keys.toml"), keys).unwrap();
        let main = dir.path().join("limits.toml");
        std::fs::write(
            &main,
            "[client]\nsources = [\"api_key\", \"ip\"]\n[identity.api_keys]\nmembers = [\"keys.toml\"]\n[limits]\napi = \"1/min\"\n",
        )
        .unwrap();
        Limits::load([&main])
    }

    #[test]
    fn a_key_table_is_read_and_its_problems_point_at_their_rows_without_echoing_keys() {
        let digest = ApiKeys::digest_hex(b"k1");
        let limits = load(&format!(
            "\"{digest}\" = {{ id = \"team-a\", plan = \"pro\" }}\n"
        ))
        .unwrap();
        let keys = limits.rules().client_settings().api_keys.clone().unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(&*keys.owner(b"k1").unwrap().id, "team-a");

        let table = format!(
            "\"sk-live-cleartext\" = {{ id = \"oops\" }}\n\
             \"{digest}\" = {{ id = \"\", plan = \"no spaces\", colour = \"red\" }}\n"
        );
        let error = load(&table).unwrap_err().to_string();
        assert!(error.contains("64 hex digits"), "{error}");
        assert!(!error.contains("sk-live-cleartext"), "{error}");
        assert!(error.contains("id must be 1 to 256 bytes"), "{error}");
        assert!(error.contains("plan name \"no spaces\""), "{error}");
        assert!(error.contains("unknown field \"colour\""), "{error}");
        assert!(error.contains("keys.toml:2"), "{error}");
    }
}
