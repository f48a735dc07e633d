//! The client half of a request key: who is asking.
//!
//! The first source in `[client] sources` that is present wins (default `["ip"]`):
//!
//! - `ip`: the TCP peer address, read from the [`PeerAddr`] request extension or, with the
//!   `axum` feature, axum's `ConnectInfo<SocketAddr>`. Forwarded headers count only when the
//!   peer is a trusted proxy (see [`TrustedProxies`]). IPv6 clients are grouped by
//!   `ipv6_prefix` (default 64): one host controls a whole /64, so counting its addresses
//!   separately would hand it 2^64 budgets. IPv4-mapped IPv6 peers count as IPv4.
//! - `header:NAME`: the header's value (an API key, a tenant id). Absent, empty or longer
//!   than [`MAX_HEADER_IDENTITY`] bytes: the next source is tried. Only the first copy of
//!   the header is read. `/`, `%`, spaces, controls and non-ASCII bytes are percent-encoded,
//!   so the value is always exactly one key segment.
//! - `extension`: a [`ClientId`] the application put in the request's extensions — the
//!   user its auth layer established — bounded and encoded as a header value is. Absent
//!   (no auth layer ran, or it did not identify anyone): the next source is tried. A client
//!   cannot forge it: it is not read from the request.
//! - `api_key`: the `id` of the [API key](ApiKeys) the request presents, if the key tables
//!   name it. A key nobody issued is invalid: by `on_invalid`, the next source decides
//!   (so an invented key is counted by address) or the request is refused with 401.
//! - `jwt:CLAIM`: a claim (a string, number or boolean) of the request's verified token
//!   (`[identity.jwt]`); a token that fails is invalid, as an unknown key is.
//!
//! # Unidentified requests
//!
//! When no source is present — no peer address was attached (a hyper server that does not
//! insert [`PeerAddr`]) and no configured header was sent — the client is
//! [`Client::Unknown`], written `unknown` in keys. All such requests share one bucket per
//! rule: they are limited together rather than let through unlimited.
//!
//! ```
//! use std::net::SocketAddr;
//! use tollgate::key::{Client, ClientSettings, PeerAddr};
//!
//! let mut request = http::Request::new(());
//! request.extensions_mut().insert(PeerAddr("203.0.113.7:50000".parse::<SocketAddr>().unwrap()));
//! let client = Client::identify(&request, &ClientSettings::default());
//! assert_eq!(client.to_string(), "203.0.113.7");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::{HeaderName, Request};
use percent_encoding::{AsciiSet, CONTROLS, percent_encode};

use std::sync::Arc;

use super::TrustedProxies;
use super::api_keys::{ApiKeys, Presented};
use super::forwarded::client_address;
use super::invalid::{Invalid, OnInvalid};
use super::jwt::{JwtVerifier, verified};
use super::verified::Verified;

/// The longest header value used as an identity; longer values are skipped.
pub const MAX_HEADER_IDENTITY: usize = 256;

/// The peer address of a request's connection, for servers other than axum.
///
/// Insert it into the request's extensions (hyper: in the per-connection `service_fn`);
/// without it (and without axum's `ConnectInfo`) the `ip` source is absent.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::key::PeerAddr;
///
/// let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(PeerAddr(peer));
/// assert_eq!(request.extensions().get::<PeerAddr>(), Some(&PeerAddr(peer)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Who the application says is asking: insert it into a request's extensions (from an auth
/// layer, before the rate limit layer) and name `"extension"` in `[client] sources`.
///
/// ```
/// use tollgate::Limits;
/// use tollgate::key::ClientId;
///
/// let limits = Limits::from_toml(
///     "[client]\nsources = [\"extension\", \"ip\"]\n[limits]\nreports = \"1/min\"\n",
/// )?;
/// let request = |user: &str| {
///     let mut request = http::Request::get("/reports").body(()).unwrap();
///     request.extensions_mut().insert(ClientId::new(user));
///     request
/// };
/// let allowed = |user: &str| limits.check_request(&request(user)).unwrap().into_inner().unwrap().allowed();
/// assert!(allowed("user-42"));
/// assert!(!allowed("user-42"), "user-42 has spent its budget");
/// assert!(allowed("user-7"), "user-7 has a budget of its own");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientId(pub String);

impl ClientId {
    /// The identity `id` (a user id, an account, a tenant).
    pub fn new(id: impl Into<String>) -> ClientId {
        ClientId(id.into())
    }
}

/// The plan the application says a request's client is on (from its own customer table or
/// authenticator): insert it into the request's extensions before the rate limit layer.
/// It wins over `[plans]` membership and the plan header.
///
/// ```
/// use tollgate::Limits;
/// use tollgate::key::{ClientId, Plan};
///
/// let limits = Limits::from_toml(
///     "[client]\nsources = [\"extension\"]\n[limits.reports]\nrate = \"1/min\"\nplans.pro = \"100/min\"\n",
/// )?;
/// let request = |user: &str, plan: Option<&'static str>| {
///     let mut request = http::Request::get("/reports").body(()).unwrap();
///     request.extensions_mut().insert(ClientId::new(user));
///     if let Some(plan) = plan {
///         request.extensions_mut().insert(Plan::new(plan));
///     }
///     request
/// };
/// let remaining = |user, plan| limits.check_request(&request(user, plan)).unwrap().into_inner().unwrap().remaining();
/// assert_eq!(remaining("ada", Some("pro")), 99);
/// assert_eq!(remaining("bob", None), 0, "without a plan, the rule's own 1/min");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan(pub Cow<'static, str>);

impl Plan {
    /// The plan named `name` (as the rules' `plans` tables name it).
    pub fn new(name: impl Into<Cow<'static, str>>) -> Plan {
        Plan(name.into())
    }
}

/// Whether `request` came straight from one of `trusted`: whether a header it carries
/// may be believed as an authenticator's (a plan header, say).
pub(crate) fn from_trusted_proxy<B>(request: &Request<B>, trusted: &TrustedProxies) -> bool {
    !trusted.is_empty() && peer_ip(request).is_some_and(|peer| trusted.contains(peer))
}

/// Where a client identity comes from: one entry of `[client] sources`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientSource {
    /// `"ip"`: the peer address, or the forwarded client behind trusted proxies.
    Ip,
    /// `"header:NAME"`: the value of a request header.
    Header(HeaderName),
    /// `"extension"`: the [`ClientId`] in the request's extensions.
    Extension,
    /// `"api_key"`: the id of the known API key the request presents.
    ApiKey,
    /// `"jwt:CLAIM"`: a claim of the request's verified token.
    Jwt(String),
}

impl fmt::Display for ClientSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientSource::Ip => f.write_str("ip"),
            ClientSource::Header(name) => write!(f, "header:{name}"),
            ClientSource::Extension => f.write_str("extension"),
            ClientSource::ApiKey => f.write_str("api_key"),
            ClientSource::Jwt(claim) => write!(f, "jwt:{claim}"),
        }
    }
}

/// How requests are told apart: the `[client]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientSettings {
    /// Identity sources, first present wins (default `[Ip]`).
    pub sources: Vec<ClientSource>,
    /// Proxies whose forwarded headers are believed (default none).
    pub trusted_proxies: TrustedProxies,
    /// IPv6 clients are grouped into networks of this prefix length (default 64).
    pub ipv6_prefix: u8,
    /// The API keys issued (`[identity.api_keys]`), for the `api_key` source.
    pub api_keys: Option<Arc<ApiKeys>>,
    /// The token verifier (`[identity.jwt]`), for `jwt:CLAIM` sources.
    pub jwt: Option<Arc<JwtVerifier>>,
    /// What a credential that fails does (`[identity] on_invalid`).
    pub on_invalid: OnInvalid,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            sources: vec![ClientSource::Ip],
            trusted_proxies: TrustedProxies::default(),
            ipv6_prefix: 64,
            api_keys: None,
            jwt: None,
            on_invalid: OnInvalid::Anonymous,
        }
    }
}

/// Who is asking: the last segment of a request key.
///
/// Identities from different sources never share a bucket, even when they print alike.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Client<'a> {
    /// An IP address (IPv6 already reduced to its network).
    Ip(IpAddr),
    /// A header value or a caller-supplied name, percent-encoded to one segment.
    Key(Cow<'a, str>),
    /// No source was present; see the module docs.
    Unknown,
}

impl<'a> Client<'a> {
    /// Identifies the client of `request` per `settings`; a credential that fails counts
    /// as absent here (see [`Client::identify_checked`]).
    pub fn identify<B>(request: &'a Request<B>, settings: &ClientSettings) -> Client<'a> {
        Client::identify_checked(request, settings).0
    }

    /// Identifies the client of `request` per `settings`, and says whether a credential it
    /// presented failed (the first that did), whatever `on_invalid` does with that.
    pub fn identify_checked<B>(
        request: &'a Request<B>,
        settings: &ClientSettings,
    ) -> (Client<'a>, Option<Invalid>) {
        let mut invalid = None;
        for source in &settings.sources {
            match source {
                ClientSource::Ip => {
                    if let Some(peer) = peer_ip(request) {
                        let address =
                            client_address(request.headers(), peer, &settings.trusted_proxies);
                        return (Client::from_ip(address, settings.ipv6_prefix), invalid);
                    }
                }
                ClientSource::Header(name) => {
                    if let Some(value) = request.headers().get(name)
                        && let Some(client) = Client::from_bytes(value.as_bytes())
                    {
                        return (client, invalid);
                    }
                }
                ClientSource::Extension => {
                    if let Some(ClientId(id)) = request.extensions().get::<ClientId>()
                        && let Some(client) = Client::from_bytes(id.as_bytes())
                    {
                        return (client, invalid);
                    }
                }
                ClientSource::ApiKey => match settings
                    .api_keys
                    .as_deref()
                    .map(|keys| keys.presented(request))
                {
                    Some(Presented::Known(owner))
                        if !owner.id.is_empty() && owner.id.len() <= MAX_HEADER_IDENTITY =>
                    {
                        let id: Cow<'_, str> =
                            percent_encode(owner.id.as_bytes(), SEGMENT_UNSAFE).into();
                        return (Client::Key(Cow::Owned(id.into_owned())), invalid);
                    }
                    Some(Presented::Unknown) => {
                        invalid.get_or_insert(Invalid::UnknownKey);
                    }
                    Some(Presented::Absent | Presented::Known(_)) | None => {}
                },
                ClientSource::Jwt(claim) => {
                    let Some(verifier) = settings.jwt.as_deref() else {
                        continue;
                    };
                    match &*verified(request, verifier) {
                        Verified::Valid(claims) => {
                            if let Some(value) = claims.get(claim)
                                && !value.is_empty()
                                && value.len() <= MAX_HEADER_IDENTITY
                            {
                                let id: Cow<'_, str> =
                                    percent_encode(value.as_bytes(), SEGMENT_UNSAFE).into();
                                return (Client::Key(Cow::Owned(id.into_owned())), invalid);
                            }
                        }
                        Verified::Invalid(reason) => {
                            invalid.get_or_insert(*reason);
                        }
                        Verified::Absent => {}
                    }
                }
            }
        }
        (Client::Unknown, invalid)
    }

    /// A header's or the application's identity: one segment, or `None` when it is empty
    /// or longer than [`MAX_HEADER_IDENTITY`].
    fn from_bytes(bytes: &'a [u8]) -> Option<Client<'a>> {
        (!bytes.is_empty() && bytes.len() <= MAX_HEADER_IDENTITY)
            .then(|| Client::Key(percent_encode(bytes, SEGMENT_UNSAFE).into()))
    }

    /// The identity for an address, grouping IPv6 by `ipv6_prefix`.
    ///
    /// ```
    /// use tollgate::key::Client;
    ///
    /// let client = Client::from_ip("2001:db8:1:2:aaaa::1".parse().unwrap(), 64);
    /// assert_eq!(client.to_string(), "2001:db8:1:2::");
    /// let mapped = Client::from_ip("::ffff:192.0.2.1".parse().unwrap(), 64);
    /// assert_eq!(mapped.to_string(), "192.0.2.1");
    /// ```
    pub fn from_ip(address: IpAddr, ipv6_prefix: u8) -> Client<'static> {
        match address.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let prefix = u32::from(ipv6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                Client::Ip(IpAddr::V6(Ipv6Addr::from(bits & mask)))
            }
            v4 => Client::Ip(v4),
        }
    }

    /// The identity for a key segment written by a caller (`api/203.0.113.7` → an IP;
    /// anything else a [`Client::Key`]).
    pub fn from_segment(segment: &'a str) -> Client<'a> {
        match segment.parse::<IpAddr>() {
            Ok(address) if address.to_string() == segment => Client::Ip(address),
            _ => Client::Key(Cow::Borrowed(segment)),
        }
    }

    /// An owned copy, for storing.
    pub fn into_owned(self) -> Client<'static> {
        match self {
            Client::Ip(address) => Client::Ip(address),
            Client::Key(key) => Client::Key(Cow::Owned(key.into_owned())),
            Client::Unknown => Client::Unknown,
        }
    }

    /// Writes the identity as a key segment into `buffer`, without allocating.
    pub(crate) fn segment<'b>(&'b self, buffer: &'b mut SegmentBuffer) -> &'b str {
        match self {
            Client::Ip(address) => buffer.format(address),
            Client::Key(key) => key,
            Client::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Client<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buffer = SegmentBuffer::default();
        f.write_str(self.segment(&mut buffer))
    }
}

/// Bytes percent-encoded in header identities: everything that is not visible ASCII,
/// plus `/` (it would split the key) and `%` (so encoding stays unambiguous).
pub(super) const SEGMENT_UNSAFE: &AsciiSet = &CONTROLS.add(b' ').add(b'/').add(b'%');

/// `text` as one key segment, encoded as header identities are: bytes outside visible
/// ASCII, ` `, `/` and `%` percent-encoded, so a `/` in it cannot add a segment. A segment
/// of only dots (`.`, `..`) is written `%2E`, `%2E%2E`, so it means itself, not a step.
/// Borrows when nothing needs encoding.
///
/// A rule key written in config is percent-decoded once, so a rule for the
/// encoded segment `a%2Fb` is written `a%252Fb`.
///
/// ```
/// use tollgate::key::encode_segment;
///
/// assert_eq!(encode_segment("203.0.113.7"), "203.0.113.7");
/// assert_eq!(encode_segment("/v1/users"), "%2Fv1%2Fusers");
/// assert_eq!(encode_segment("50%"), "50%25");
/// assert_eq!(encode_segment(".."), "%2E%2E");
/// ```
pub fn encode_segment(text: &str) -> Cow<'_, str> {
    if !text.is_empty() && text.bytes().all(|b| b == b'.') {
        return Cow::Owned("%2E".repeat(text.len()));
    }
    Cow::from(percent_encode(text.as_bytes(), SEGMENT_UNSAFE))
}

fn peer_ip<B>(request: &Request<B>) -> Option<IpAddr> {
    if let Some(PeerAddr(address)) = request.extensions().get::<PeerAddr>() {
        return Some(address.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(info) = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    None
}

/// Room to print any IP address (the longest IPv6 form is 45 bytes).
pub(crate) struct SegmentBuffer {
    bytes: [u8; 48],
}

impl Default for SegmentBuffer {
    fn default() -> Self {
        SegmentBuffer { bytes: [0; 48] }
    }
}

impl SegmentBuffer {
    fn format(&mut self, address: &IpAddr) -> &str {
        let capacity = self.bytes.len();
        let mut cursor = std::io::Cursor::new(&mut self.bytes[..]);
        let written = match write!(cursor, "{address}") {
            Ok(()) => usize::try_from(cursor.position()).unwrap_or(capacity),
            Err(_) => 0,
        };
        std::str::from_utf8(&self.bytes[..written.min(capacity)]).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn settings(sources: &[&str]) -> ClientSettings {
        ClientSettings {
            sources: sources
                .iter()
                .map(|s| match s.strip_prefix("header:") {
                    Some(name) => ClientSource::Header(name.parse().unwrap()),
                    None => ClientSource::Ip,
                })
                .collect(),
            ..ClientSettings::default()
        }
    }

    fn request(peer: Option<&str>, headers: &[(&str, &[u8])]) -> Request<()> {
        let mut request = Request::new(());
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(PeerAddr(peer.parse().unwrap()));
        }
        for (name, value) in headers {
            request.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        request
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let a = Client::from_ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap(), 64);
        let b = Client::from_ip("2001:db8:1:2::1".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2001:db8:1:2::");
        assert_eq!(
            Client::from_ip("2001:db8:1:2::1".parse().unwrap(), 48).to_string(),
            "2001:db8:1::"
        );
        assert_eq!(
            Client::from_ip("2001:db8::1".parse().unwrap(), 128).to_string(),
            "2001:db8::1"
        );
        assert_eq!(
            Client::from_ip("2001:db8::1".parse().unwrap(), 0).to_string(),
            "::"
        );
        let longest = Client::from_ip(
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
            128,
        );
        assert_eq!(
            longest.to_string(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        );
    }

    #[test]
    fn first_present_source_wins() {
        let both = settings(&["header:x-api-key", "ip"]);
        let keyed = request(Some("192.0.2.1:1"), &[("x-api-key", b"k1")]);
        assert_eq!(Client::identify(&keyed, &both).to_string(), "k1");
        let unkeyed = request(Some("192.0.2.1:1"), &[]);
        assert_eq!(Client::identify(&unkeyed, &both).to_string(), "192.0.2.1");
        let empty = request(Some("192.0.2.1:1"), &[("x-api-key", b"")]);
        assert_eq!(Client::identify(&empty, &both).to_string(), "192.0.2.1");
        let huge = vec![b'k'; MAX_HEADER_IDENTITY + 1];
        let long = request(Some("192.0.2.1:1"), &[("x-api-key", &huge)]);
        assert_eq!(Client::identify(&long, &both).to_string(), "192.0.2.1");
    }

    #[test]
    fn header_identities_are_one_segment() {
        let only_header = settings(&["header:x-api-key"]);
        let slashy = request(None, &[("x-api-key", b"a/b%c d\xff")]);
        assert_eq!(
            Client::identify(&slashy, &only_header).to_string(),
            "a%2Fb%25c%20d%FF"
        );
        let first = request(None, &[("x-api-key", b"one"), ("x-api-key", b"two")]);
        assert_eq!(Client::identify(&first, &only_header).to_string(), "one");
    }

    #[test]
    fn header_and_ip_identities_never_share_a_bucket() {
        let only_header = settings(&["header:x-api-key"]);
        let spoof = request(None, &[("x-api-key", b"192.0.2.1")]);
        let victim = Client::from_ip("192.0.2.1".parse().unwrap(), 64);
        assert_ne!(Client::identify(&spoof, &only_header), victim);
    }

    #[test]
    fn no_source_present_is_unknown() {
        let only_ip = settings(&["ip"]);
        assert_eq!(
            Client::identify(&request(None, &[]), &only_ip),
            Client::Unknown
        );
        assert_eq!(Client::Unknown.to_string(), "unknown");
    }

    #[cfg(feature = "axum")]
    #[test]
    fn axum_connect_info_is_read() {
        let mut request = Request::new(());
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo::<SocketAddr>(
                "198.51.100.2:9".parse().unwrap(),
            ));
        assert_eq!(
            Client::identify(&request, &ClientSettings::default()).to_string(),
            "198.51.100.2"
        );
    }

    #[test]
    fn caller_segments_parse_as_addresses_only_when_canonical() {
        assert_eq!(
            Client::from_segment("192.0.2.1"),
            Client::Ip("192.0.2.1".parse().unwrap())
        );
        assert!(matches!(Client::from_segment("user-42"), Client::Key(_)));
        assert!(matches!(Client::from_segment("2001:DB8::"), Client::Key(_)));
    }
}
