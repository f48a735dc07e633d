//! The `[gateway]` table: what the example gateway listens on and proxies to (SPEC §8).

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::error::Diagnostic;
use super::raw::RawGateway;
use super::reload::is_env_name;
use super::source::SourceText;
use crate::quota::parse_duration;

/// The `[gateway]` table: what the example gateway listens on and proxies to. Read at
/// start-up (a running gateway does not move its listeners); the gateway's flags win.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewaySettings {
    /// `listen`: the proxy's address.
    pub listen: Option<SocketAddr>,
    /// `upstream`: the `http://` URL requests are proxied to.
    pub upstream: Option<http::Uri>,
    /// `admin`: the admin listener's address.
    pub admin: Option<SocketAddr>,
    /// `upstream_timeout`: how long to wait for the upstream's response headers.
    pub upstream_timeout: Option<Duration>,
    /// `admin_token`: a bearer token the admin listener requires.
    pub admin_token: Option<String>,
    /// `resp`: the Redis-protocol front end's address (off unless given).
    pub resp: Option<SocketAddr>,
    /// `resp_password_env`: the environment variable holding the password the
    /// Redis-protocol front end asks for (`AUTH`); none: no password.
    pub resp_password_env: Option<String>,
    /// `grpc`: the address of Envoy's rate limit service (off unless given).
    pub grpc: Option<SocketAddr>,
    /// `grpc_response_headers`: suggest rate-limit headers for Envoy to add
    /// (`response_headers_to_add`); default off.
    pub grpc_response_headers: Option<bool>,
}

impl GatewaySettings {
    /// Applies one file's `[gateway]` table, reporting every bad value.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        gateway: &RawGateway,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let mut address =
            |field: &Option<Spanned<String>>, name: &str, slot: &mut Option<SocketAddr>| {
                if let Some(text) = field {
                    match text.get_ref().trim().parse() {
                        Ok(address) => *slot = Some(address),
                        Err(_) => diagnostics.push(source.at(
                            text.span(),
                            format!(
                                "{name} \"{}\" is not an address like \"127.0.0.1:8080\"",
                                text.get_ref()
                            ),
                        )),
                    }
                }
            };
        address(&gateway.listen, "listen", &mut self.listen);
        address(&gateway.admin, "admin", &mut self.admin);
        address(&gateway.resp, "resp", &mut self.resp);
        address(&gateway.grpc, "grpc", &mut self.grpc);
        if gateway.grpc_response_headers.is_some() {
            self.grpc_response_headers = gateway.grpc_response_headers;
        }
        if let Some(name) = &gateway.resp_password_env {
            if is_env_name(name.get_ref()) {
                self.resp_password_env = Some(name.get_ref().clone());
            } else {
                diagnostics.push(source.at(
                    name.span(),
                    format!(
                        "resp_password_env names the environment variable holding the password \
                         (like \"TOLLGATE_RESP_PASSWORD\"), found \"{}\"; secrets never go in config files",
                        name.get_ref()
                    ),
                ));
            }
        }
        if let Some(text) = &gateway.upstream {
            match parse_upstream(text.get_ref()) {
                Ok(uri) => self.upstream = Some(uri),
                Err(message) => diagnostics.push(source.at(text.span(), message)),
            }
        }
        if let Some(text) = &gateway.upstream_timeout {
            match parse_duration(text.get_ref()) {
                Some(timeout) if !timeout.is_zero() => self.upstream_timeout = Some(timeout),
                _ => diagnostics.push(source.at(
                    text.span(),
                    format!(
                        "upstream_timeout \"{}\" is not a duration like \"30s\"",
                        text.get_ref()
                    ),
                )),
            }
        }
        if let Some(token) = &gateway.admin_token {
            match token.get_ref().trim() {
                "" => diagnostics.push(source.at(token.span(), "admin_token is empty")),
                token => self.admin_token = Some(token.to_owned()),
            }
        }
    }
}

/// An upstream URL: `http://host:port` with an optional path prefix.
pub fn parse_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .trim()
        .parse()
        .map_err(|_| format!("upstream \"{text}\" is not a URL like \"http://127.0.0.1:8000\""))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) if uri.query().is_none() => Ok(uri),
        (Some("https"), _) => Err(format!(
            "upstream \"{text}\" uses https, which the gateway does not speak; terminate TLS in front of it"
        )),
        _ => Err(format!(
            "upstream \"{text}\" must look like \"http://host:port[/prefix]\""
        )),
    }
}
