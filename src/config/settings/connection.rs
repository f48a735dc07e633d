//! How the Redis backends reach Redis: credentials (an ACL user and password from the
//! environment; a password written in a URL still works, moved out of the URL with a
//! warning), TLS (`[store.tls]`: a CA file or the system's roots, a client certificate),
//! and Sentinel (the sentinels and the master's name).
//!
//! Secrets are read from the environment when the config is compiled, so a missing one is
//! an error at start-up (or refuses a reload), naming the variable; they are held as
//! [`Secret`]s, which print as `<redacted>`.

use std::fmt;
use std::path::PathBuf;

use toml::Spanned;

use super::super::error::Diagnostic;
use super::super::raw::{OneOrMany, RawRedisTls, RawStore};
use super::super::source::SourceText;
use super::is_env_name;

/// A secret: shown nowhere (its `Debug` is `<redacted>`); [`expose`](Self::expose) gives it
/// to what needs it.
///
/// ```
/// let secret = tollgate::config::Secret::new("hunter2");
/// assert_eq!(format!("{secret:?}"), "<redacted>");
/// assert_eq!(secret.expose(), "hunter2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `[store.tls]`: how `rediss://` connections (and sentinels at `rediss://` URLs) are
/// verified, and what they present.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisTls {
    /// CA certificates (PEM) Redis's certificate must chain to; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) to present, with [`key_file`](Self::key_file).
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// Accept whatever certificate Redis presents, unverified
    /// (`danger_accept_invalid_certificates = true`): anyone on the path can read and
    /// change every decision. For a test bench only.
    pub danger_accept_invalid_certificates: bool,
    /// The name every Redis certificate must be for, and the SNI sent
    /// (`server_name = "redis.internal"`); `None`: each address's own host.
    pub server_name: Option<String>,
}

/// Who the Redis backends connect as, and through what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConnection {
    /// The ACL user (`username_env`, or a URL's user part); `None`: `default`.
    pub username: Option<String>,
    /// The password (`password_env`, or a URL's password part, moved out of it).
    pub password: Option<Secret>,
    /// `[store.tls]`.
    pub tls: RedisTls,
    /// `backend = "redis-sentinel"`: the sentinels' URLs (`rediss://` for TLS, which the
    /// master is then reached with too).
    pub sentinels: Vec<String>,
    /// `backend = "redis-sentinel"`: the name the sentinels monitor the master under.
    pub master_name: Option<String>,
    /// The sentinels' ACL user (`sentinel_username_env`).
    pub sentinel_username: Option<String>,
    /// The sentinels' password (`sentinel_password_env`).
    pub sentinel_password: Option<Secret>,
}

impl RedisConnection {
    /// Applies one file's connection fields of `[store]`; `urls` are the `url` list as it
    /// stands after this file, passwords moved out of them here.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawStore,
        urls: &mut [String],
        out: &mut Vec<Diagnostic>,
    ) {
        let env = |field: &str, name: &Spanned<String>, out: &mut Vec<Diagnostic>| {
            from_environment(source, field, name, out)
        };
        if let Some(name) = &raw.username_env {
            self.username = env("username_env", name, out);
        }
        if let Some(name) = &raw.password_env {
            self.password = env("password_env", name, out).map(Secret);
        }
        if let Some(name) = &raw.sentinel_username_env {
            self.sentinel_username = env("sentinel_username_env", name, out);
        }
        if let Some(name) = &raw.sentinel_password_env {
            self.sentinel_password = env("sentinel_password_env", name, out).map(Secret);
        }
        if raw.url.is_some() {
            for url in urls.iter_mut() {
                let Some((bare, user, password)) = split_credentials(url) else {
                    continue;
                };
                // Worked before, so it works still; but the file is no place for it.
                tracing::warn!(
                    file = %source.path.display(),
                    "a Redis password is written in [store] url; it is used, but it belongs in \
                     the environment: name the variable with [store] password_env"
                );
                if self.password.is_none() {
                    self.password = Some(Secret(password));
                }
                if self.username.is_none() && !user.is_empty() {
                    self.username = Some(user);
                }
                *url = bare;
            }
        }
        if let Some(sentinels) = &raw.sentinels {
            self.sentinels = urls_of(source, sentinels, out);
        }
        if let Some(name) = &raw.master_name {
            match name.get_ref().trim() {
                "" => out.push(source.at(name.span(), "master_name is empty")),
                name => self.master_name = Some(name.to_owned()),
            }
        }
        if let Some(tls) = &raw.tls {
            self.tls = compile_tls(source, tls, out);
        }
    }
}

/// `[store.tls]`, checked: a client certificate comes with its key.
fn compile_tls(
    source: &SourceText,
    raw: &Spanned<RawRedisTls>,
    out: &mut Vec<Diagnostic>,
) -> RedisTls {
    let tls = raw.get_ref();
    let path = |field: &Option<Spanned<String>>, name: &str, out: &mut Vec<Diagnostic>| {
        let field = field.as_ref()?;
        match field.get_ref().trim() {
            "" => {
                out.push(source.at(field.span(), format!("{name} is empty")));
                None
            }
            path => Some(PathBuf::from(path)),
        }
    };
    let compiled = RedisTls {
        ca_file: path(&tls.ca_file, "ca_file", out),
        cert_file: path(&tls.cert_file, "cert_file", out),
        key_file: path(&tls.key_file, "key_file", out),
        danger_accept_invalid_certificates: tls
            .danger_accept_invalid_certificates
            .as_ref()
            .is_some_and(|danger| *danger.get_ref()),
        server_name: tls
            .server_name
            .as_ref()
            .and_then(|name| match server_name(name.get_ref()) {
                Ok(name) => Some(name),
                Err(reason) => {
                    out.push(source.at(name.span(), reason));
                    None
                }
            }),
    };
    if compiled.cert_file.is_some() != compiled.key_file.is_some() {
        out.push(source.at(
            raw.span(),
            "[store.tls] cert_file and key_file go together: a client certificate and its key",
        ));
    }
    compiled
}

/// `[store.tls] server_name`, checked: a DNS name (letters, digits, `-`, dot-separated
/// labels of at most 63) or an IP address, as a certificate can name.
fn server_name(text: &str) -> Result<String, String> {
    let name = text.trim().trim_end_matches('.');
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.parse::<std::net::IpAddr>().is_ok()
        || (name.len() <= 253 && name.split('.').all(label_ok))
    {
        Ok(name.to_ascii_lowercase())
    } else {
        Err(format!(
            "server_name \"{text}\" is not a DNS name or an IP address a certificate can name"
        ))
    }
}

/// The value of the environment variable `name` names, or a diagnostic saying why not.
fn from_environment(
    source: &SourceText,
    field: &str,
    name: &Spanned<String>,
    out: &mut Vec<Diagnostic>,
) -> Option<String> {
    let variable = name.get_ref();
    if !is_env_name(variable) {
        out.push(source.at(
            name.span(),
            format!(
                "{field} names the environment variable holding it (like \"TOLLGATE_REDIS_PASSWORD\"), found \"{variable}\"; secrets never go in config files"
            ),
        ));
        return None;
    }
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            out.push(source.at(
                name.span(),
                format!("{field}: the environment variable {variable} is not set"),
            ));
            None
        }
    }
}

/// Redis URLs as written, each checked for its scheme.
fn urls_of(
    source: &SourceText,
    field: &Spanned<OneOrMany<String>>,
    out: &mut Vec<Diagnostic>,
) -> Vec<String> {
    let mut urls = Vec::new();
    for (text, span) in &field.get_ref().0 {
        let text = text.trim();
        if text.starts_with("redis://") || text.starts_with("rediss://") {
            urls.push(text.to_owned());
        } else {
            out.push(source.at(
                span.clone().unwrap_or_else(|| field.span()),
                format!("\"{text}\" is not a Redis URL like \"redis://127.0.0.1:26379\""),
            ));
        }
    }
    if urls.is_empty() && field.get_ref().0.is_empty() {
        out.push(source.at(field.span(), "sentinels is an empty list"));
    }
    urls
}

/// `url` without its credentials, and the user and password it carried, if it carried a
/// password (`redis://user:pass@host`, `redis://:pass@host`).
pub(super) fn split_credentials(url: &str) -> Option<(String, String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, password) = userinfo.split_once(':')?;
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    Some((
        format!("{scheme}://{host}{}", &rest[authority_end..]),
        decode(user),
        decode(password),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_come_out_of_urls() {
        assert_eq!(
            split_credentials("redis://:s3cret@10.0.0.5:6379/0"),
            Some((
                "redis://10.0.0.5:6379/0".into(),
                String::new(),
                "s3cret".into()
            ))
        );
        assert_eq!(
            split_credentials("rediss://app:p%40ss@cache.internal:6380"),
            Some((
                "rediss://cache.internal:6380".into(),
                "app".into(),
                "p@ss".into()
            ))
        );
        assert_eq!(split_credentials("redis://10.0.0.5:6379"), None);
        assert_eq!(split_credentials("redis://user@10.0.0.5:6379"), None);
    }
}
