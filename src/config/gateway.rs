//! The `[gateway]` table: what the example gateway listens on and proxies to (SPEC §8).

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::error::Diagnostic;
use super::raw::RawGateway;
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
