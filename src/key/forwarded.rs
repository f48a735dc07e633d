//! Who is behind a trusted proxy: `Forwarded`, `X-Forwarded-For`, `X-Real-IP`.
//!
//! # Security
//!
//! Forwarded headers are written by whoever sent the request, so they are believed only when
//! the TCP peer is a trusted proxy, and then read **from the right**: each trusted proxy
//! appends the address it received the request from, so the right-most address that is not
//! itself a trusted proxy is the first one no trusted party vouches for — the client.
//! Anything to the left of it was written by the client and is ignored. (Taking the left-most
//! address, as some limiters do, lets every client pick its own bucket.)
//!
//! Only one header family is read, the first present of `Forwarded` (RFC 7239),
//! `X-Forwarded-For`, then `X-Real-IP`; several lines of one header are read as one list in
//! order. If the walk meets an entry it cannot parse (`unknown`, an obfuscated name, garbage)
//! before finding an untrusted address, the client is the last trusted hop reached — the
//! proxy that received the unparsable claim — rather than anything the client wrote.
//! If every entry is trusted, the left-most one is the client.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::FORWARDED;
use ipnet::IpNet;

/// The proxies whose forwarded headers are believed (`[client] trusted_proxies`).
///
/// ```
/// use tollgate::key::TrustedProxies;
///
/// let trusted: TrustedProxies = ["127.0.0.1/32", "10.0.0.0/8"].iter().map(|s| s.parse().unwrap()).collect();
/// assert!(trusted.contains("10.1.2.3".parse().unwrap()));
/// assert!(!trusted.contains("192.0.2.1".parse().unwrap()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

impl TrustedProxies {
    /// Whether `address` (IPv4-mapped IPv6 counts as IPv4) is a trusted proxy.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.networks.iter().any(|net| net.contains(&address))
    }

    /// Whether no proxy is trusted (the default).
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// The trusted networks, as configured.
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }
}

impl FromIterator<IpNet> for TrustedProxies {
    fn from_iter<I: IntoIterator<Item = IpNet>>(iter: I) -> Self {
        TrustedProxies {
            networks: iter.into_iter().collect(),
        }
    }
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";
const X_REAL_IP: &str = "x-real-ip";

/// The client address for a request whose TCP peer is `peer`.
///
/// Returns `peer` itself unless it is a trusted proxy; see the module docs.
pub(crate) fn client_address(
    headers: &HeaderMap,
    peer: IpAddr,
    trusted: &TrustedProxies,
) -> IpAddr {
    if trusted.is_empty() || !trusted.contains(peer) {
        return peer;
    }
    if headers.contains_key(FORWARDED) {
        // Quoted strings may hide commas, so each line is parsed whole; lines are few.
        let lines = headers.get_all(FORWARDED).iter().rev();
        let entries = lines.flat_map(|line| {
            let line = line.to_str().unwrap_or("");
            parse_forwarded_line(line).into_iter().rev()
        });
        return walk(entries, peer, trusted);
    }
    if headers.contains_key(X_FORWARDED_FOR) {
        let lines = headers.get_all(X_FORWARDED_FOR).iter().rev();
        let entries = lines.flat_map(|line| {
            let line = line.to_str().unwrap_or("");
            line.rsplit(',').map(parse_node)
        });
        return walk(entries, peer, trusted);
    }
    if let Some(real) = headers.get(X_REAL_IP) {
        let entry = real.to_str().ok().and_then(parse_node);
        return walk(std::iter::once(entry), peer, trusted);
    }
    peer
}

/// Walks claimed addresses from the right; see the module docs.
fn walk(
    right_to_left: impl Iterator<Item = Option<IpAddr>>,
    peer: IpAddr,
    trusted: &TrustedProxies,
) -> IpAddr {
    let mut nearest_trusted = peer;
    for entry in right_to_left {
        match entry {
            Some(address) if trusted.contains(address) => nearest_trusted = address,
            Some(address) => return address,
            None => return nearest_trusted,
        }
    }
    nearest_trusted
}

/// One address as written in `X-Forwarded-For`, `X-Real-IP` or a `Forwarded` `for=`:
/// `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:8080`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim();
    if let Some(rest) = node.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return address.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(address) = node.parse::<IpAddr>() {
        return Some(address);
    }
    let (address, port) = node.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    address.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

/// The `for=` node of each element of one `Forwarded` line (RFC 7239 §4), left to right;
/// `None` for an element without a usable `for=`.
fn parse_forwarded_line(line: &str) -> Vec<Option<IpAddr>> {
    split_unquoted(line, b',')
        .into_iter()
        .map(|element| {
            split_unquoted(element, b';').into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                if !name.trim().eq_ignore_ascii_case("for") {
                    return None;
                }
                let value = value.trim();
                let value = match value.strip_prefix('"') {
                    Some(quoted) => quoted.strip_suffix('"')?,
                    None => value,
                };
                Some(parse_node(value))
            })?
        })
        .collect()
}

/// Splits on `separator` outside double-quoted strings (with `\` escapes inside them).
fn split_unquoted(text: &str, separator: u8) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, byte) in text.bytes().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b if b == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn trusted(list: &[&str]) -> TrustedProxies {
        list.iter()
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .unwrap()
            })
            .collect()
    }

    fn client(headers: &[(&str, &str)], peer: &str, proxies: &[&str]) -> String {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        client_address(&map, peer.parse().unwrap(), &trusted(proxies)).to_string()
    }

    #[test]
    fn spoofed_headers_from_an_untrusted_peer_are_ignored() {
        for header in ["x-forwarded-for", "x-real-ip"] {
            assert_eq!(
                client(&[(header, "1.1.1.1")], "203.0.113.7", &["10.0.0.0/8"]),
                "203.0.113.7"
            );
        }
        assert_eq!(
            client(&[("forwarded", "for=1.1.1.1")], "203.0.113.7", &[]),
            "203.0.113.7"
        );
    }

    #[test]
    fn right_most_untrusted_address_wins() {
        // The client claims 1.1.1.1; our proxy appended the address it really saw.
        assert_eq!(
            client(
                &[("x-forwarded-for", "1.1.1.1, 203.0.113.7")],
                "10.0.0.1",
                &["10.0.0.0/8"]
            ),
            "203.0.113.7"
        );
    }

    #[test]
    fn several_trusted_hops_are_skipped() {
        assert_eq!(
            client(
                &[(
                    "x-forwarded-for",
                    "6.6.6.6, 198.51.100.9, 10.0.0.2, 10.0.0.3"
                )],
                "127.0.0.1",
                &["127.0.0.1", "10.0.0.0/8"]
            ),
            "198.51.100.9"
        );
        // Split over several header lines, read as one list.
        assert_eq!(
            client(
                &[
                    ("x-forwarded-for", "6.6.6.6, 198.51.100.9"),
                    ("x-forwarded-for", "10.0.0.2")
                ],
                "127.0.0.1",
                &["127.0.0.1", "10.0.0.0/8"]
            ),
            "198.51.100.9"
        );
    }

    #[test]
    fn all_trusted_means_the_left_most() {
        assert_eq!(
            client(
                &[("x-forwarded-for", "10.0.0.9, 10.0.0.2")],
                "10.0.0.1",
                &["10.0.0.0/8"]
            ),
            "10.0.0.9"
        );
    }

    #[test]
    fn garbage_stops_at_the_nearest_trusted_hop() {
        assert_eq!(
            client(
                &[("x-forwarded-for", "1.1.1.1, not-an-ip, 10.0.0.2")],
                "10.0.0.1",
                &["10.0.0.0/8"]
            ),
            "10.0.0.2"
        );
        assert_eq!(
            client(&[("x-forwarded-for", "")], "10.0.0.1", &["10.0.0.0/8"]),
            "10.0.0.1"
        );
    }

    #[test]
    fn ports_and_brackets_are_understood() {
        let proxies = &["10.0.0.0/8"];
        let xff = |v: &str| client(&[("x-forwarded-for", v)], "10.0.0.1", proxies);
        assert_eq!(xff("203.0.113.7:4711"), "203.0.113.7");
        assert_eq!(xff("[2001:db8::1]:4711"), "2001:db8::1");
        assert_eq!(xff("2001:db8::1"), "2001:db8::1");
        assert_eq!(xff("[2001:db8::1]"), "2001:db8::1");
        assert_eq!(xff("[2001:db8::1]junk"), "10.0.0.1");
    }

    #[test]
    fn forwarded_header_is_preferred_and_parsed() {
        let proxies = &["10.0.0.0/8"];
        assert_eq!(
            client(
                &[
                    (
                        "forwarded",
                        "for=1.1.1.1, for=\"[2001:db8:cafe::17]:4711\";proto=https;by=10.0.0.2"
                    ),
                    ("x-forwarded-for", "9.9.9.9"),
                ],
                "10.0.0.1",
                proxies
            ),
            "2001:db8:cafe::17"
        );
        assert_eq!(
            client(
                &[("forwarded", "for=192.0.2.60;by=\"a,b\", For=10.0.0.5")],
                "10.0.0.1",
                proxies
            ),
            "192.0.2.60"
        );
        assert_eq!(
            client(
                &[("forwarded", "for=unknown, for=10.0.0.5")],
                "10.0.0.1",
                proxies
            ),
            "10.0.0.5"
        );
        assert_eq!(
            client(&[("forwarded", "proto=http")], "10.0.0.1", proxies),
            "10.0.0.1"
        );
    }

    #[test]
    fn real_ip_from_a_trusted_peer() {
        assert_eq!(
            client(
                &[("x-real-ip", "198.51.100.4")],
                "10.0.0.1",
                &["10.0.0.0/8"]
            ),
            "198.51.100.4"
        );
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_networks() {
        assert_eq!(
            client(
                &[("x-forwarded-for", "198.51.100.4")],
                "::ffff:10.0.0.1",
                &["10.0.0.0/8"]
            ),
            "198.51.100.4"
        );
    }
}
