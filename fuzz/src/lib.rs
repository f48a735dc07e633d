//! What the fuzz targets check, one function per target.
//!
//! Each takes the fuzzer's bytes and panics only if tollgate misbehaves: a panic inside
//! tollgate, or a broken property. The same functions replay the seed corpus and every
//! saved crash under `cargo test` on the stable toolchain (`tests/integration/fuzz_corpus.rs`
//! includes this file), so a finding stays fixed.
//!
//! They use tollgate's public API, and where a parser is private (a response's cost, a
//! membership table, a disk value) the hidden `tollgate::fuzzing` entry points, which hand
//! it bytes as the request and reload paths do. One module a surface; the targets' list,
//! and what each covers, is `fuzz/targets.toml`.

mod cost;
mod disk;
mod identity;
mod request;
mod tables;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use http::{HeaderName, HeaderValue, Request};
use tollgate::config::{ConfigError, Rate, RuleSet, parse_duration};
use tollgate::key::{Client, ClientSettings, PeerAddr, RouteSettings, normalize_route};

pub use cost::{settle, usage};
pub use disk::disk;
pub use identity::{jwks, jwt};
pub use request::{key_parts, request_body};
pub use tables::{api_keys, envoy_yaml, plan_members};

/// Config text: parsing, validation and compiling never panic; a refusal names a place
/// inside the text; an accepted set finds each of its rules under the rule's own key.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match RuleSet::from_toml(text) {
        Ok(rules) => tables::check_rule_set(&rules),
        Err(ConfigError::Invalid(diagnostics)) => {
            tables::check_diagnostics(&diagnostics, &[(Path::new("<inline>"), text)]);
        }
        Err(other) => panic!("config text refused as if it were a file problem: {other}"),
    }
}

/// The rate grammar (`10/s`, `100/5m`): never panics; an accepted rate prints in a form
/// that parses back to the same rate. Durations (`30s`) never panic either.
pub fn rate(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_duration(text);
    let Ok(rate) = text.parse::<Rate>() else {
        return;
    };
    assert!(rate.count() >= 1 && !rate.period().is_zero(), "{rate:?}");
    let printed = rate.to_string();
    let reparsed: Rate = printed
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
    assert_eq!(reparsed, rate, "{text:?} printed as {printed:?}");
}

/// Path normalisation: the route has no empty, `.` or `..` segments and no slash at either
/// end, is no deeper than `max_depth`, is lower case when folding; and the fast path for
/// canonical paths agrees with the general one.
///
/// The first byte picks the settings (case folding, depth 1–16); the rest is the path.
pub fn route(data: &[u8]) {
    let Some((&first, path)) = data.split_first() else {
        return;
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let mut settings = RouteSettings::default();
    settings.case_insensitive = first & 1 == 1;
    settings.max_depth = usize::from(first >> 1) % 16 + 1;

    let route = normalize_route(path, &settings);
    if !route.is_empty() {
        let segments: Vec<&str> = route.split('/').collect();
        for segment in &segments {
            assert!(
                !matches!(*segment, "" | "." | ".."),
                "{path:?} → {route:?} keeps a {segment:?} segment"
            );
        }
        assert!(
            segments.len() <= settings.max_depth,
            "{path:?} → {route:?} is deeper than {}",
            settings.max_depth
        );
    }
    if settings.case_insensitive {
        assert_eq!(route, route.to_lowercase(), "{path:?} is not folded");
    }
    // Without escapes the fast path may answer; `/%2F/` in front forces the general path,
    // and (being one more empty segment once decoded) must not change the route.
    if !path.contains('%') {
        let forced = format!("/%2F/{path}");
        let slow = normalize_route(&forced, &settings);
        assert_eq!(route, slow, "fast and general paths disagree on {path:?}");
        // Canonical output normalises to itself.
        assert_eq!(normalize_route(&route, &settings), route, "not idempotent");
    }
}

/// The trusted proxies for [`forwarded`]: loopback, 10/8 and 2001:db8::/32.
fn trusted_settings() -> ClientSettings {
    let mut settings = ClientSettings::default();
    settings.trusted_proxies = ["127.0.0.0/8", "10.0.0.0/8", "2001:db8::/32"]
        .iter()
        .filter_map(|network| network.parse().ok())
        .collect();
    settings.ipv6_prefix = 128;
    settings
}

/// The client address identified for a request from `peer` with `headers`.
fn identify(
    settings: &ClientSettings,
    peer: IpAddr,
    headers: &[(HeaderName, HeaderValue)],
) -> Option<IpAddr> {
    let mut request = Request::new(());
    for (name, value) in headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::new(peer, 40_000)));
    match Client::identify(&request, settings) {
        Client::Ip(address) => Some(address),
        _ => None,
    }
}

/// Forwarded-header parsing (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`): never panics;
/// an untrusted peer's headers are ignored; and behind a trusted proxy, once an untrusted
/// client is found, nothing the client adds on the left changes it.
///
/// The input is lines; each line's first byte picks the header, the rest is its value.
pub fn forwarded(data: &[u8]) {
    const NAMES: [&str; 3] = ["forwarded", "x-forwarded-for", "x-real-ip"];
    let mut headers = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Some((&pick, value)) = line.split_first() else {
            continue;
        };
        let name = HeaderName::from_static(NAMES[usize::from(pick) % NAMES.len()]);
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.push((name, value));
        }
    }
    let settings = trusted_settings();

    let untrusted_peer: IpAddr = [192, 0, 2, 1].into();
    assert_eq!(
        identify(&settings, untrusted_peer, &headers),
        Some(untrusted_peer),
        "an untrusted peer's forwarded headers were believed"
    );

    let proxy: IpAddr = [127, 0, 0, 1].into();
    let client = identify(&settings, proxy, &headers).expect("a peer address always identifies");
    if settings.trusted_proxies.contains(client) {
        return;
    }
    // The family in use is the first present of Forwarded, X-Forwarded-For, X-Real-IP;
    // a forged entry goes in front of its first line.
    let forged = match NAMES
        .iter()
        .find(|name| headers.iter().any(|(header, _)| header == **name))
    {
        Some(&"forwarded") => ("forwarded", "for=198.51.100.66"),
        Some(&"x-forwarded-for") => ("x-forwarded-for", "198.51.100.66"),
        _ => return,
    };
    let mut forged_headers = vec![(
        HeaderName::from_static(forged.0),
        HeaderValue::from_static(forged.1),
    )];
    forged_headers.extend(headers.iter().cloned());
    assert_eq!(
        identify(&settings, proxy, &forged_headers),
        Some(client),
        "an entry added on the left changed the client"
    );
}
