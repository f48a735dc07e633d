//! The service's settings, in one type, from four places: a flag wins over its environment
//! variable (`TOLLGATE_<FLAG>`), which wins over the config's `[gateway]` table, which wins
//! over the default.
//!
//! [`Settings`] is what each place says, every field optional: clap fills one from the
//! flags and the environment, serde one from each file's `[gateway]` table, and
//! [`Settings::over`] lays one over another. The methods named after the fields
//! ([`listen`](Settings::listen), …) are what comes to be: the value given, or the default.
//! [`GatewayTable`] is the config extension that reads `[gateway]` on every load and reload
//! (errors say file, line and column) and checks the rules against the settings in force:
//! a rule may not hold a request (`on_limit = "delay"`) as long as the proxy waits for its
//! upstream.

use std::any::Any;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;
use serde::{Deserialize, Deserializer};
use tollgate::config::{Diagnostic, Document, Extension, RuleSet};

use crate::logging::{LogFormat, parse_log_level};
use crate::tls::ListenerTls;

/// Where the proxy listens unless told otherwise.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
/// Where the admin listener listens unless told otherwise.
pub const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9090);
/// Where `--resp` without an address listens.
pub const DEFAULT_RESP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9049);
/// Where `--grpc` without an address listens.
pub const DEFAULT_GRPC: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8081);
/// The config read unless told otherwise.
pub const DEFAULT_CONFIG: &str = "config/gateway.toml";
/// How long to wait for the upstream's response headers unless told otherwise.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits for requests in flight.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers (slowloris defence).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How the proxy speaks to its upstream (`upstream_protocol`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1, kept alive and pooled.
    #[default]
    Http1,
    /// HTTP/2: by prior knowledge (h2c) to an `http://` upstream, by ALPN `h2` to an
    /// `https://` one. Streams both ways and trailers, for gRPC upstreams.
    Http2,
}

impl std::fmt::Display for UpstreamProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::Http2 => "http2",
        })
    }
}

/// The service's settings as one place gives them; `None` leaves a setting to the next
/// place: a flag wins over its environment variable, which wins over the `[gateway]`
/// table, which wins over the default.
///
/// ```
/// use tollgate_server::{DEFAULT_ADMIN, Settings};
///
/// let mut flags = Settings::new(["config/gateway.toml"]);
/// flags.listen = Some("127.0.0.1:7000".parse()?);
/// let mut file = Settings::default();
/// file.listen = Some("0.0.0.0:80".parse()?);
/// file.upstream_timeout = Some(std::time::Duration::from_secs(5));
///
/// let settings = flags.over(&file);
/// assert_eq!(settings.listen().port(), 7000, "the flag wins");
/// assert_eq!(settings.upstream_timeout().as_secs(), 5, "the file fills the gap");
/// assert_eq!(settings.admin(), DEFAULT_ADMIN, "nothing anywhere: the default");
/// assert!(settings.upstream.is_none(), "no upstream anywhere: the built-in demo");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Settings {
    /// Config file or http(s):// URL; repeat to layer them (later ones override earlier ones
    /// rule by rule) [default: config/gateway.toml].
    #[arg(
        long = "config",
        value_name = "PATH",
        env = "TOLLGATE_CONFIG",
        value_delimiter = ','
    )]
    #[serde(skip)]
    pub config: Vec<PathBuf>,
    /// Where the proxy listens [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_LISTEN")]
    #[serde(default, deserialize_with = "address")]
    #[schemars(with = "Option<String>")]
    pub listen: Option<SocketAddr>,
    /// Where requests go, http(s)://host:port[/prefix] [default: a built-in demo upstream].
    #[arg(long, value_name = "URL", env = "TOLLGATE_UPSTREAM", value_parser = parse_upstream)]
    #[serde(default, deserialize_with = "upstream")]
    #[schemars(with = "Option<String>")]
    pub upstream: Option<Uri>,
    /// How the upstream is spoken to: http1, or http2 (h2c by prior knowledge to an
    /// http:// upstream, ALPN h2 to an https:// one; for gRPC upstreams) [default: http1].
    #[arg(
        long,
        value_name = "PROTOCOL",
        env = "TOLLGATE_UPSTREAM_PROTOCOL",
        value_enum
    )]
    #[serde(default)]
    pub upstream_protocol: Option<UpstreamProtocol>,
    /// CA certificates (PEM) an https:// upstream's certificate must chain to [default: the
    /// system's roots].
    #[arg(long, value_name = "PATH", env = "TOLLGATE_UPSTREAM_CA_FILE")]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub upstream_ca_file: Option<PathBuf>,
    /// Where the admin listener listens [default: 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_ADMIN")]
    #[serde(default, deserialize_with = "address")]
    #[schemars(with = "Option<String>")]
    pub admin: Option<SocketAddr>,
    /// A bearer token the admin listener requires for its data (health stays open).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TOLLGATE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    #[serde(default, deserialize_with = "token")]
    pub admin_token: Option<String>,
    /// Also serve the Redis protocol (smyte's RL.* and tollgate's TG.* commands) on ADDR
    /// [default: off; without ADDR: 127.0.0.1:9049].
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_RESP", num_args = 0..=1, default_missing_value = "127.0.0.1:9049")]
    #[serde(default, deserialize_with = "address")]
    #[schemars(with = "Option<String>")]
    pub resp: Option<SocketAddr>,
    /// The environment variable holding the password RESP clients must send with AUTH
    /// [default: none, no password].
    #[arg(long, value_name = "VARIABLE", env = "TOLLGATE_RESP_PASSWORD_ENV", value_parser = parse_env_name)]
    #[serde(default, deserialize_with = "env_name")]
    pub resp_password_env: Option<String>,
    /// Also serve Envoy's rate limit service (gRPC, envoy.service.ratelimit.v3) on ADDR
    /// [default: off; without ADDR: 127.0.0.1:8081].
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_GRPC", num_args = 0..=1, default_missing_value = "127.0.0.1:8081")]
    #[serde(default, deserialize_with = "address")]
    #[schemars(with = "Option<String>")]
    pub grpc: Option<SocketAddr>,
    /// Also serve Envoy's rate limit quota service (RLQS, gRPC,
    /// envoy.service.rate_limit_quota.v3) on ADDR, TLS as the gRPC listener's
    /// [default: off; without ADDR: 127.0.0.1:18081].
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_RLQS", num_args = 0..=1, default_missing_value = "127.0.0.1:18081")]
    #[serde(default, deserialize_with = "address")]
    #[schemars(with = "Option<String>")]
    pub rlqs: Option<SocketAddr>,
    /// Suggest rate-limit headers for Envoy to add to its responses
    /// (response_headers_to_add) [default: false].
    #[arg(long, value_name = "BOOL", env = "TOLLGATE_GRPC_RESPONSE_HEADERS", num_args = 0..=1, default_missing_value = "true")]
    #[serde(default)]
    pub grpc_response_headers: Option<bool>,
    /// How long to wait for the upstream's response headers, e.g. 30s [default: 30s].
    #[arg(long, value_name = "DURATION", env = "TOLLGATE_UPSTREAM_TIMEOUT", value_parser = parse_timeout)]
    #[serde(default, deserialize_with = "timeout")]
    #[schemars(with = "Option<String>")]
    pub upstream_timeout: Option<Duration>,
    /// How long SIGTERM waits for requests in flight, e.g. 10s [default: 10s].
    #[arg(long, value_name = "DURATION", env = "TOLLGATE_SHUTDOWN_GRACE", value_parser = parse_timeout)]
    #[serde(default, deserialize_with = "timeout")]
    #[schemars(with = "Option<String>")]
    pub shutdown_grace: Option<Duration>,
    /// How long a client has to send a request's headers before its connection is closed
    /// (slowloris defence), e.g. 10s [default: 10s].
    #[arg(long, value_name = "DURATION", env = "TOLLGATE_HEADER_READ_TIMEOUT", value_parser = parse_timeout)]
    #[serde(default, deserialize_with = "timeout")]
    #[schemars(with = "Option<String>")]
    pub header_read_timeout: Option<Duration>,
    /// How log lines are written: text, or one JSON object a line [default: text].
    #[arg(long, value_name = "FORMAT", env = "TOLLGATE_LOG_FORMAT", value_enum)]
    #[serde(default)]
    pub log_format: Option<LogFormat>,
    /// What is logged: a level (error, warn, info, debug, trace) or RUST_LOG-style
    /// directives; the flag wins over RUST_LOG, which wins over TOLLGATE_LOG_LEVEL and the
    /// file [default: info].
    #[arg(long, value_name = "LEVEL", env = "TOLLGATE_LOG_LEVEL", value_parser = parse_log_level)]
    #[serde(default, deserialize_with = "log_level")]
    pub log_level: Option<String>,
    /// `[gateway.tls]`: TLS on the proxy and admin listeners (config file only).
    #[arg(skip)]
    #[serde(default)]
    pub tls: Option<ListenerTls>,
    /// `[gateway.resp_tls]`: TLS on the Redis-protocol listener (config file only).
    #[arg(skip)]
    #[serde(default)]
    pub resp_tls: Option<ListenerTls>,
    /// `[gateway.grpc_tls]`: TLS on the gRPC listener (config file only).
    #[arg(skip)]
    #[serde(default)]
    pub grpc_tls: Option<ListenerTls>,
}

impl Settings {
    /// Settings reading `config`, everything else left to the next place.
    pub fn new<P: Into<PathBuf>>(config: impl IntoIterator<Item = P>) -> Settings {
        Settings {
            config: config.into_iter().map(Into::into).collect(),
            ..Settings::default()
        }
    }

    /// These settings, with what they leave open taken from `lower`.
    pub fn over(&self, lower: &Settings) -> Settings {
        fn or<T: Clone>(high: &Option<T>, low: &Option<T>) -> Option<T> {
            high.clone().or_else(|| low.clone())
        }
        Settings {
            config: if self.config.is_empty() {
                lower.config.clone()
            } else {
                self.config.clone()
            },
            listen: or(&self.listen, &lower.listen),
            upstream: or(&self.upstream, &lower.upstream),
            upstream_protocol: or(&self.upstream_protocol, &lower.upstream_protocol),
            upstream_ca_file: or(&self.upstream_ca_file, &lower.upstream_ca_file),
            admin: or(&self.admin, &lower.admin),
            admin_token: or(&self.admin_token, &lower.admin_token),
            resp: or(&self.resp, &lower.resp),
            resp_password_env: or(&self.resp_password_env, &lower.resp_password_env),
            grpc: or(&self.grpc, &lower.grpc),
            rlqs: or(&self.rlqs, &lower.rlqs),
            grpc_response_headers: or(&self.grpc_response_headers, &lower.grpc_response_headers),
            upstream_timeout: or(&self.upstream_timeout, &lower.upstream_timeout),
            shutdown_grace: or(&self.shutdown_grace, &lower.shutdown_grace),
            header_read_timeout: or(&self.header_read_timeout, &lower.header_read_timeout),
            log_format: or(&self.log_format, &lower.log_format),
            log_level: or(&self.log_level, &lower.log_level),
            tls: or(&self.tls, &lower.tls),
            resp_tls: or(&self.resp_tls, &lower.resp_tls),
            grpc_tls: or(&self.grpc_tls, &lower.grpc_tls),
        }
    }

    /// The config sources, in layering order.
    pub fn config_sources(&self) -> Vec<PathBuf> {
        if self.config.is_empty() {
            vec![PathBuf::from(DEFAULT_CONFIG)]
        } else {
            self.config.clone()
        }
    }

    /// Where the proxy listens.
    pub fn listen(&self) -> SocketAddr {
        self.listen.unwrap_or(DEFAULT_LISTEN)
    }

    /// Where the admin listener listens.
    pub fn admin(&self) -> SocketAddr {
        self.admin.unwrap_or(DEFAULT_ADMIN)
    }

    /// How long the proxy waits for its upstream's response headers.
    pub fn upstream_timeout(&self) -> Duration {
        self.upstream_timeout.unwrap_or(DEFAULT_UPSTREAM_TIMEOUT)
    }

    /// How long a shutdown waits for requests in flight.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE)
    }

    /// How long a client has to send a request's headers.
    pub fn header_read_timeout(&self) -> Duration {
        self.header_read_timeout
            .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT)
    }

    /// Whether the gRPC front end suggests rate-limit headers to Envoy.
    pub fn grpc_response_headers(&self) -> bool {
        self.grpc_response_headers.unwrap_or(false)
    }

    /// Each setting as `--print-config` shows it: its name (the flag's, `_` for `-`), the
    /// value in force (defaults applied, secrets as `<redacted>`), and whether this place
    /// gives it (`false`: left to the next place).
    pub fn rows(&self) -> Vec<(&'static str, String, bool)> {
        let text = |value: &dyn std::fmt::Display| format!("\"{value}\"");
        let path = |path: &Option<PathBuf>| {
            path.as_ref()
                .map_or("none".to_owned(), |p| text(&p.display()))
        };
        let tls = |tls: &Option<ListenerTls>| {
            tls.as_ref().map_or("none".to_owned(), |tls| {
                format!(
                    "{{ cert_file = {}, key_file = {}, client_ca_file = {} }}",
                    text(&tls.cert_file.display()),
                    text(&tls.key_file.display()),
                    path(&tls.client_ca_file)
                )
            })
        };
        let duration = |d: Duration| match d.as_millis() {
            ms if ms % 1000 == 0 => text(&format!("{}s", ms / 1000)),
            ms => text(&format!("{ms}ms")),
        };
        let optional_address = |a: &Option<SocketAddr>| a.map_or("off".to_owned(), |a| text(&a));
        let sources: Vec<String> = self
            .config_sources()
            .iter()
            .map(|p| text(&p.display()))
            .collect();
        vec![
            (
                "config",
                format!("[{}]", sources.join(", ")),
                !self.config.is_empty(),
            ),
            ("listen", text(&self.listen()), self.listen.is_some()),
            (
                "upstream",
                self.upstream
                    .as_ref()
                    .map_or("\"built-in demo\"".to_owned(), |u| text(u)),
                self.upstream.is_some(),
            ),
            (
                "upstream_protocol",
                text(&self.upstream_protocol.unwrap_or_default()),
                self.upstream_protocol.is_some(),
            ),
            (
                "upstream_ca_file",
                path(&self.upstream_ca_file),
                self.upstream_ca_file.is_some(),
            ),
            ("admin", text(&self.admin()), self.admin.is_some()),
            (
                "admin_token",
                self.admin_token
                    .as_ref()
                    .map_or("none".to_owned(), |_| "\"<redacted>\"".to_owned()),
                self.admin_token.is_some(),
            ),
            ("resp", optional_address(&self.resp), self.resp.is_some()),
            (
                "resp_password_env",
                self.resp_password_env
                    .as_ref()
                    .map_or("none".to_owned(), |v| text(v)),
                self.resp_password_env.is_some(),
            ),
            ("grpc", optional_address(&self.grpc), self.grpc.is_some()),
            ("rlqs", optional_address(&self.rlqs), self.rlqs.is_some()),
            (
                "grpc_response_headers",
                self.grpc_response_headers().to_string(),
                self.grpc_response_headers.is_some(),
            ),
            (
                "upstream_timeout",
                duration(self.upstream_timeout()),
                self.upstream_timeout.is_some(),
            ),
            (
                "shutdown_grace",
                duration(self.shutdown_grace()),
                self.shutdown_grace.is_some(),
            ),
            (
                "header_read_timeout",
                duration(self.header_read_timeout()),
                self.header_read_timeout.is_some(),
            ),
            (
                "log_format",
                text(&self.log_format.unwrap_or_default()),
                self.log_format.is_some(),
            ),
            (
                "log_level",
                text(&self.log_level.as_deref().unwrap_or("info")),
                self.log_level.is_some(),
            ),
            ("tls", tls(&self.tls), self.tls.is_some()),
            ("resp_tls", tls(&self.resp_tls), self.resp_tls.is_some()),
            ("grpc_tls", tls(&self.grpc_tls), self.grpc_tls.is_some()),
        ]
    }
}

/// The `[gateway]` table, read from every config file on every load and reload, and the
/// rules checked against the settings it comes to: a [`tollgate::config::Extension`].
///
/// `overrides` are the flags and environment, which win over the files. The table the
/// files come to is kept with the rules ([`RuleSet::extension`]`::<GatewayTable>`... as
/// [`FileSettings`]).
#[derive(Clone, Debug, Default)]
pub struct GatewayTable {
    overrides: Settings,
}

/// What the config files' `[gateway]` tables come to, later files overriding earlier ones
/// setting by setting: kept with the rules they were read with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSettings(pub Settings);

impl GatewayTable {
    /// The table, under `overrides` (flags and environment).
    pub fn new(overrides: Settings) -> GatewayTable {
        GatewayTable { overrides }
    }
}

impl Extension for GatewayTable {
    fn table(&self) -> &str {
        "gateway"
    }

    fn compile(
        &self,
        documents: &[Document<'_>],
        rules: &RuleSet,
    ) -> Result<Box<dyn Any + Send + Sync>, Vec<Diagnostic>> {
        let mut file = Settings::default();
        let mut diagnostics = Vec::new();
        for document in documents {
            match document.table::<Settings>("gateway") {
                Ok(Some(table)) => file = table.over(&file),
                Ok(None) => {}
                Err(diagnostic) => diagnostics.push(diagnostic),
            }
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        let timeout = self.overrides.over(&file).upstream_timeout();
        let too_long: Vec<Diagnostic> = rules
            .rules()
            .iter()
            .filter_map(|rule| {
                let held = rule.shaping()?.delay()?.max();
                (held >= timeout).then(|| Diagnostic {
                    file: rule.origin().file.clone(),
                    line: rule.origin().line,
                    column: 1,
                    message: format!(
                        "rule \"{}\" holds requests up to max_delay {held:?}, not shorter than the upstream timeout {timeout:?}: a held request would be cut off by the proxy; lower max_delay or raise upstream_timeout",
                        rule.name()
                    ),
                })
            })
            .collect();
        if too_long.is_empty() {
            Ok(Box::new(FileSettings(file)))
        } else {
            Err(too_long)
        }
    }
}

/// An upstream URL: `http://` or `https://host:port` with an optional path prefix.
///
/// ```
/// use tollgate_server::parse_upstream;
///
/// assert_eq!(parse_upstream("http://127.0.0.1:8000/api")?.path(), "/api");
/// assert_eq!(parse_upstream("https://api.internal")?.scheme_str(), Some("https"));
/// assert!(parse_upstream("ftp://example.com").is_err());
/// # Ok::<(), String>(())
/// ```
pub fn parse_upstream(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .trim()
        .parse()
        .map_err(|_| format!("upstream \"{text}\" is not a URL like \"http://127.0.0.1:8000\""))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) if uri.query().is_none() => Ok(uri),
        _ => Err(format!(
            "upstream \"{text}\" must look like \"http://host:port[/prefix]\" or \"https://…\""
        )),
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    tollgate::config::parse_duration(text)
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| format!("\"{text}\" is not a duration like \"30s\""))
}

fn parse_address(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("\"{text}\" is not an address like \"127.0.0.1:8080\""))
}

fn parse_env_name(text: &str) -> Result<String, String> {
    let valid = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "resp_password_env names the environment variable holding the password (like \"TOLLGATE_RESP_PASSWORD\"), found \"{text}\"; secrets never go in config files"
        ))
    }
}

/// A string field read through `parse`, its error at the value's place in the file.
fn parsed<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map(Some).map_err(serde::de::Error::custom)
}

fn address<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    parsed(deserializer, parse_address)
}

fn upstream<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Uri>, D::Error> {
    parsed(deserializer, parse_upstream)
}

fn timeout<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    parsed(deserializer, parse_timeout)
}

fn env_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    parsed(deserializer, parse_env_name)
}

fn log_level<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    parsed(deserializer, parse_log_level)
}

fn token<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    parsed(deserializer, |text| match text.trim() {
        "" => Err("admin_token is empty".to_owned()),
        token => Ok(token.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Limits;

    fn load(text: &str, overrides: Settings) -> Result<Settings, String> {
        let limits = Limits::builder()
            .extension(GatewayTable::new(overrides))
            .from_toml(text)
            .map_err(|error| error.to_string())?;
        let file = limits.rules().extension::<FileSettings>().cloned();
        Ok(file.unwrap_or_default().0)
    }

    #[test]
    fn later_files_override_earlier_ones_setting_by_setting() {
        let dir = tempfile::tempdir().unwrap();
        let global = dir.path().join("global.toml");
        let local = dir.path().join("local.toml");
        std::fs::write(
            &global,
            "[gateway]\nlisten = \"127.0.0.1:7000\"\nadmin = \"127.0.0.1:7001\"\n",
        )
        .unwrap();
        std::fs::write(&local, "[gateway]\nadmin = \"127.0.0.1:7002\"\n").unwrap();
        let limits = Limits::builder()
            .extension(GatewayTable::default())
            .load([&global, &local])
            .unwrap();
        let rules = limits.rules();
        let file = &rules.extension::<FileSettings>().unwrap().0;
        assert_eq!(file.listen().port(), 7000);
        assert_eq!(file.admin().port(), 7002, "the later file wins");
    }

    #[test]
    fn bad_values_are_refused_where_they_are_written() {
        for (text, expected) in [
            (
                "[gateway]\nlisten = \"everywhere\"\n",
                "<inline>:2:10: \"everywhere\" is not an address like \"127.0.0.1:8080\"",
            ),
            (
                "[gateway]\nupstream = \"ftp://example.com\"\n",
                "<inline>:2:12: upstream \"ftp://example.com\" must look like",
            ),
            (
                "[gateway.tls]\ncert_file = \"c.pem\"\n",
                "<inline>:1:1: missing field `key_file`",
            ),
            (
                "[gateway]\nupstream_timeout = \"soon\"\n",
                "<inline>:2:20: \"soon\" is not a duration like \"30s\"",
            ),
            (
                "[gateway]\nadmin_token = \" \"\n",
                "<inline>:2:15: admin_token is empty",
            ),
            (
                "[gateway]\nresp_password_env = \"hunter2!\"\n",
                "<inline>:2:21: resp_password_env names the environment variable",
            ),
            (
                "[gateway]\nlisten_on = \"127.0.0.1:1\"\n",
                "<inline>:2:1: unknown field `listen_on`",
            ),
            (
                "[gatway]\n",
                "<inline>:1:2: unknown field `gatway`, expected one of",
            ),
        ] {
            let error = load(text, Settings::default()).unwrap_err();
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_rule_may_not_hold_requests_as_long_as_the_upstream_timeout_in_force() {
        let rules = "[limits.up]\nrate = \"5/s\"\non_limit = \"delay\"\nmax_delay = \"10s\"\n";
        load(rules, Settings::default()).expect("10s is shorter than the default 30s");
        let in_file = format!("[gateway]\nupstream_timeout = \"5s\"\n{rules}");
        let error = load(&in_file, Settings::default()).unwrap_err();
        assert!(
            error.starts_with("<inline>:3:1: rule \"up\" holds requests up to max_delay 10s, not shorter than the upstream timeout 5s"),
            "{error}"
        );
        let flags = Settings {
            upstream_timeout: Some(Duration::from_secs(60)),
            ..Settings::default()
        };
        load(&in_file, flags).expect("the flag wins over the file");
    }
}
