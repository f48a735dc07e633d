//! The settings tables, folded over the files in order: `[key]` and `[client]` here, and
//! `[response]`, `[store]` and `[reload]` through their own files. A later file overrides
//! an earlier one setting by setting.

mod connection;
mod reload;
mod response;
mod store;

pub use connection::{RedisConnection, RedisTls, Secret};
pub use reload::{ReloadSettings, RemoteHeader};
pub use response::{BodyTemplate, ResponseSettings};
pub use store::{
    Backend, DiskSettings, DiskSync, OnBackendError, RedisSettings, StoreSettings, SyncMode,
};

use http::HeaderName;
use ipnet::IpNet;

pub(super) use super::env::is_env_name;
use super::error::Diagnostic;
use super::raw::RawFile;

use super::source::SourceText;
use crate::key::{ClientSettings, ClientSource, KeyPart, KeyParts, RouteSettings, TrustedProxies};

/// Every settings table, folded over the files in order.
#[derive(Default)]
pub(super) struct Settings {
    pub(super) route: RouteSettings,
    pub(super) client: ClientSettings,
    pub(super) response: ResponseSettings,
    pub(super) store: StoreSettings,
    pub(super) reload: ReloadSettings,
    pub(super) plans: super::plans::Plans,
    pub(super) prices: super::money::Prices,
    pub(super) identity: super::identity::Identity,
    /// The key tables once read (after every file's settings).
    pub(super) keys: Option<super::identity::ReadKeys>,
}

impl Settings {
    /// Applies one file's tables over what earlier files set.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawFile,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        if let Some(fold) = raw.key.case_insensitive {
            self.route.case_insensitive = fold;
        }
        if let Some(depth) = &raw.key.max_depth {
            match usize::try_from(*depth.get_ref()) {
                Ok(d @ 1..=1024) => self.route.max_depth = d,
                _ => diagnostics.push(source.at(
                    depth.span(),
                    format!(
                        "max_depth must be between 1 and 1024, found {}",
                        depth.get_ref()
                    ),
                )),
            }
        }

        if let Some(parts) = &raw.key.parts {
            let mut parsed = Vec::new();
            let mut valid = true;
            for item in parts.get_ref() {
                match item.get_ref().parse::<KeyPart>() {
                    Ok(part) => parsed.push(part),
                    Err(error) => {
                        valid = false;
                        diagnostics.push(source.at(item.span(), error.to_string()));
                    }
                }
            }
            if valid {
                match KeyParts::new(parsed) {
                    Ok(parts) => self.route.parts = parts,
                    Err(error) => diagnostics.push(source.at(parts.span(), error.to_string())),
                }
            }
        }

        self.identity.apply(source, &raw.identity, diagnostics);
        if let Some(sources) = &raw.client.sources {
            let mut parsed = Vec::new();
            for item in sources.get_ref() {
                match parse_source(item.get_ref()) {
                    Some(source) => parsed.push(source),
                    None => diagnostics.push(source.at(
                        item.span(),
                        format!(
                            "unknown client source \"{}\" (use \"ip\", \"header:NAME\", \"extension\", \"api_key\" or \"jwt:CLAIM\")",
                            item.get_ref()
                        ),
                    )),
                }
            }
            if sources.get_ref().is_empty() {
                diagnostics
                    .push(source.at(sources.span(), "sources must name at least one source"));
            }
            self.client.sources = parsed;
        }
        if let Some(proxies) = &raw.client.trusted_proxies {
            let mut networks = Vec::new();
            for item in proxies {
                match parse_network(item.get_ref()) {
                    Some(network) => networks.push(network),
                    None => diagnostics.push(source.at(
                        item.span(),
                        format!(
                            "trusted proxy \"{}\" is not an IP address or CIDR network",
                            item.get_ref()
                        ),
                    )),
                }
            }
            self.client.trusted_proxies = networks.into_iter().collect::<TrustedProxies>();
        }
        if let Some(prefix) = &raw.client.ipv6_prefix {
            match u8::try_from(*prefix.get_ref()) {
                Ok(p @ 1..=128) => self.client.ipv6_prefix = p,
                _ => diagnostics.push(source.at(
                    prefix.span(),
                    format!(
                        "ipv6_prefix must be between 1 and 128, found {}",
                        prefix.get_ref()
                    ),
                )),
            }
        }

        self.plans.apply(source, &raw.plans, diagnostics);
        for (model, price) in &raw.prices {
            let mut parsed = super::money::Price::default();
            let mut valid = true;
            let kinds = [
                (&price.get_ref().input, &mut parsed.input),
                (&price.get_ref().output, &mut parsed.output),
                (&price.get_ref().cached, &mut parsed.cached),
            ];
            for (written, slot) in kinds {
                if let Some(written) = written {
                    match super::money::Price::parse_one(written.get_ref()) {
                        Ok(micros) => *slot = micros,
                        Err(message) => {
                            valid = false;
                            diagnostics.push(source.at(written.span(), message));
                        }
                    }
                }
            }
            if model.get_ref().is_empty() {
                diagnostics.push(source.at(
                    model.span(),
                    "a price needs a model name, a prefix ending in '*', or \"*\" for any model",
                ));
            } else if valid {
                self.prices.insert(model.get_ref(), parsed);
            }
        }
        self.response.apply(source, &raw.response, diagnostics);
        self.store.apply(source, &raw.store, diagnostics);
        if let Some(reload) = &raw.reload {
            if source.remote {
                diagnostics.push(source.at(
                    reload.span(),
                    "[reload] says how remote documents are fetched, so it belongs in a local \
                     file, not in a remote document",
                ));
            } else {
                self.reload.apply(source, reload.get_ref(), diagnostics);
            }
        }
    }
}

fn parse_source(text: &str) -> Option<ClientSource> {
    let text = text.trim();
    if text == "ip" {
        return Some(ClientSource::Ip);
    }
    if text == "extension" {
        return Some(ClientSource::Extension);
    }
    if text == "api_key" {
        return Some(ClientSource::ApiKey);
    }
    if let Some(claim) = text.strip_prefix("jwt:") {
        let claim = claim.trim();
        return (!claim.is_empty() && claim.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| ClientSource::Jwt(claim.to_owned()));
    }
    let name = text.strip_prefix("header:")?.trim();
    HeaderName::from_bytes(name.as_bytes())
        .ok()
        .map(ClientSource::Header)
}

fn parse_network(text: &str) -> Option<IpNet> {
    let text = text.trim();
    text.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .ok()
}
