//! What a request key is made of beyond route and client: `[key] parts`.
//!
//! By default a key is `route/client` (`api/search/203.0.113.7`). `[key] parts` orders more
//! parts around the route — the request's method, its host, a header, a query parameter or
//! a cookie — each written as one segment, so rules keep matching by longest segment
//! prefix:
//!
//! ```toml
//! [key]
//! parts = ["host", "method", "route", "client"]   # api.example.com/POST/orders/203.0.113.7
//!
//! [limits]
//! "api.example.com" = "100/s"
//! "api.example.com/POST/orders" = "10/min"
//! ```
//!
//! - `route` and `client` appear once each, and `client` comes last: a rule's bucket is
//!   kept per client (or for everyone, `per = "global"`), whatever parts lead to it.
//! - `method`: as sent, `GET`, `POST` (methods are case-sensitive).
//! - `host`: the request's authority (HTTP/2) or `Host` header, lower-cased, without its
//!   port or a trailing dot; internationalised names are taken as sent (`xn--…` when the
//!   client sends punycode).
//! - `header:NAME`: the first value of the header; `query:NAME`: the first value of the
//!   query parameter, form-decoded (`+` is a space); `cookie:NAME`: the cookie's value;
//!   `json:/pointer`: a value of the JSON body ([`ReadBodyLayer`](crate::ReadBodyLayer)).
//! - A part that is absent or empty is `-`; a value that is literally `-` is written
//!   `%2D`, so the two never meet. Values are cut to [`MAX_PART`] bytes, and everything
//!   outside visible ASCII, and ` `, `/` and `%`, is percent-encoded (as in
//!   [`encode_segment`](super::encode_segment)): a part is always exactly one segment, and
//!   binary or huge values cannot spread over rules. Parts never make buckets: a rule's
//!   buckets are per client, so sending a million values gives a million lookups, not a
//!   million buckets.
//!
//! Put parts before the route where you can: after it, a rule `orders/POST` cannot tell the
//! method from a path `/orders/POST`.
//!
//! ```
//! use tollgate::key::{KeyPart, KeyParts};
//!
//! let parts: KeyParts = "host, method, route, client".parse()?;
//! let request = http::Request::post("http://API.example.com:8443/orders?x=1").body(())?;
//! assert_eq!(parts.match_path(&request, "orders".into(), false), "api.example.com/POST/orders");
//! assert_eq!(parts.to_string(), "host, method, route, client");
//! assert!(KeyParts::default().is_default());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use http::{HeaderName, Request};
use percent_encoding::percent_encode;

use super::body::RequestJson;
use super::client::SEGMENT_UNSAFE;
use super::cookie::cookie;
use super::verified::Verified;

/// The longest value a part keeps, in bytes; longer values are cut to it.
pub const MAX_PART: usize = 256;

/// How an absent or empty part is written.
pub const ABSENT: &str = "-";

/// One entry of `[key] parts`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyPart {
    /// `"route"`: the normalised request path (any number of segments).
    Route,
    /// `"client"`: who is asking (`[client] sources`); always last.
    Client,
    /// `"method"`: `GET`, `POST`…
    Method,
    /// `"host"`: the host the request was sent to, lower-cased, without its port.
    Host,
    /// `"header:NAME"`: the first value of a request header.
    Header(HeaderName),
    /// `"query:NAME"`: the first value of a query parameter.
    Query(String),
    /// `"cookie:NAME"`: the value of a cookie.
    Cookie(String),
    /// `"json:/pointer"`: a string, number or boolean of the request's JSON body.
    Json(String),
    /// `"jwt:CLAIM"`: a claim of the request's verified token (`[identity.jwt]`).
    Jwt(String),
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Route => f.write_str("route"),
            KeyPart::Client => f.write_str("client"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Host => f.write_str("host"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
            KeyPart::Query(name) => write!(f, "query:{name}"),
            KeyPart::Cookie(name) => write!(f, "cookie:{name}"),
            KeyPart::Json(pointer) => write!(f, "json:{pointer}"),
            KeyPart::Jwt(claim) => write!(f, "jwt:{claim}"),
        }
    }
}

/// Why `[key] parts` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyPartsError {
    /// A part that is none of the known ones.
    #[error(
        "unknown key part \"{0}\" (use route, client, method, host, header:NAME, query:NAME, cookie:NAME, json:/pointer or jwt:CLAIM)"
    )]
    Unknown(String),
    /// `header:`, `query:` or `cookie:` without a name, or with one that cannot be.
    #[error("key part \"{0}\" needs a name, e.g. \"{1}:x-tenant\"")]
    Unnamed(String, &'static str),
    /// `json:` without a JSON pointer.
    #[error("key part \"{0}\" needs a JSON pointer starting with '/', e.g. \"json:/model\"")]
    NotAPointer(String),
    /// A part listed twice.
    #[error("key part \"{0}\" is listed twice")]
    Twice(String),
    /// No `route`, or no `client`.
    #[error("key parts must include \"{0}\"")]
    Missing(&'static str),
    /// `client` is not the last part.
    #[error("\"client\" must be the last key part: a rule's buckets are kept per client")]
    ClientNotLast,
}

impl FromStr for KeyPart {
    type Err = KeyPartsError;

    fn from_str(text: &str) -> Result<KeyPart, KeyPartsError> {
        let text = text.trim();
        let named = |kind: &'static str| -> Option<Result<String, KeyPartsError>> {
            let name = text.strip_prefix(kind)?.strip_prefix(':')?.trim();
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !matches!(b, b'=' | b';' | b','));
            Some(if valid {
                Ok(name.to_owned())
            } else {
                Err(KeyPartsError::Unnamed(text.to_owned(), kind))
            })
        };
        match text {
            "route" => return Ok(KeyPart::Route),
            "client" => return Ok(KeyPart::Client),
            "method" => return Ok(KeyPart::Method),
            "host" => return Ok(KeyPart::Host),
            "header" | "query" | "cookie" | "jwt" => {
                return Err(KeyPartsError::Unnamed(text.to_owned(), kind_of(text)));
            }
            _ => {}
        }
        if let Some(name) = named("header") {
            let name = name?;
            return HeaderName::from_bytes(name.as_bytes())
                .map(KeyPart::Header)
                .map_err(|_| KeyPartsError::Unnamed(text.to_owned(), "header"));
        }
        if let Some(name) = named("query") {
            return name.map(KeyPart::Query);
        }
        if let Some(name) = named("cookie") {
            return name.map(KeyPart::Cookie);
        }
        if let Some(name) = named("jwt") {
            return name.map(KeyPart::Jwt);
        }
        match text.strip_prefix("json:").map(str::trim) {
            Some(p) if p.starts_with('/') && !p.contains(char::is_whitespace) => {
                Ok(KeyPart::Json(p.to_owned()))
            }
            Some(_) => Err(KeyPartsError::NotAPointer(text.to_owned())),
            None => Err(KeyPartsError::Unknown(text.to_owned())),
        }
    }
}

fn kind_of(text: &str) -> &'static str {
    ["header", "query", "jwt"]
        .into_iter()
        .find(|k| *k == text)
        .unwrap_or("cookie")
}

/// `[key] parts`: the parts written before the route and between it and the client.
///
/// The default, `route, client`, is today's key and costs nothing more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyParts {
    before: Vec<KeyPart>,
    after: Vec<KeyPart>,
}

impl KeyParts {
    /// The parts in order (a list naming `route` and `client` once each, `client` last).
    ///
    /// ```
    /// use tollgate::key::{KeyPart, KeyParts};
    ///
    /// let parts = KeyParts::new(vec![KeyPart::Method, KeyPart::Route, KeyPart::Client])?;
    /// assert!(!parts.is_default());
    /// assert!(KeyParts::new(vec![KeyPart::Route]).is_err());
    /// # Ok::<(), tollgate::key::KeyPartsError>(())
    /// ```
    pub fn new(parts: Vec<KeyPart>) -> Result<KeyParts, KeyPartsError> {
        for (at, part) in parts.iter().enumerate() {
            if parts[..at].contains(part) {
                return Err(KeyPartsError::Twice(part.to_string()));
            }
        }
        let route = parts
            .iter()
            .position(|p| *p == KeyPart::Route)
            .ok_or(KeyPartsError::Missing("route"))?;
        let client = parts
            .iter()
            .position(|p| *p == KeyPart::Client)
            .ok_or(KeyPartsError::Missing("client"))?;
        if client + 1 != parts.len() {
            return Err(KeyPartsError::ClientNotLast);
        }
        Ok(KeyParts {
            before: parts[..route].to_vec(),
            after: parts[route + 1..client].to_vec(),
        })
    }

    /// Whether these are the default parts, `route, client`.
    pub fn is_default(&self) -> bool {
        self.before.is_empty() && self.after.is_empty()
    }

    /// How many parts sit beside the route (before it or between it and the client): one
    /// segment each.
    pub fn around_route(&self) -> usize {
        self.before.len() + self.after.len()
    }

    /// The parts in order, `route` and `client` included.
    pub fn iter(&self) -> impl Iterator<Item = &KeyPart> {
        self.before
            .iter()
            .chain(std::iter::once(&KeyPart::Route))
            .chain(&self.after)
            .chain(std::iter::once(&KeyPart::Client))
    }

    /// The key of `request` up to its client — what rules are matched against before the
    /// client segment — given its normalised `route`. The route itself when the parts are
    /// the default. With `case_insensitive` (`[key] case_insensitive`) the parts are
    /// lower-cased as the route and the rule keys are.
    pub fn match_path<'a, B>(
        &self,
        request: &Request<B>,
        route: Cow<'a, str>,
        case_insensitive: bool,
    ) -> Cow<'a, str> {
        if self.is_default() {
            return route;
        }
        let mut path = String::with_capacity(route.len() + 64);
        let mut push = |segment: &str| {
            if !segment.is_empty() {
                if !path.is_empty() {
                    path.push('/');
                }
                path.push_str(segment);
            }
        };
        for part in &self.before {
            push(&part_value(part, request));
        }
        push(&route);
        for part in &self.after {
            push(&part_value(part, request));
        }
        if case_insensitive {
            path.make_ascii_lowercase();
        }
        Cow::Owned(path)
    }

    /// A key up to its client (what [`match_path`](Self::match_path) makes) taken apart:
    /// each part beside the route with its segment, in order, and the route between them.
    /// `None` when the key has fewer segments than the parts need.
    ///
    /// ```
    /// use tollgate::key::KeyParts;
    ///
    /// let parts: KeyParts = "host, method, route, client".parse()?;
    /// let (values, route) = parts.split("api.example.com/POST/orders/42").unwrap();
    /// assert_eq!(values, [("host".to_owned(), "api.example.com"), ("method".to_owned(), "POST")]);
    /// assert_eq!(route, "orders/42");
    /// # Ok::<(), tollgate::key::KeyPartsError>(())
    /// ```
    pub fn split<'k>(&self, path: &'k str) -> Option<(Vec<(String, &'k str)>, &'k str)> {
        let mut rest = path;
        let mut values = Vec::with_capacity(self.around_route());
        for part in &self.before {
            let (value, after) = rest.split_once('/').unwrap_or((rest, ""));
            if value.is_empty() {
                return None;
            }
            values.push((part.to_string(), value));
            rest = after;
        }
        let mut after = Vec::with_capacity(self.after.len());
        for part in self.after.iter().rev() {
            let (before, value) = rest.rsplit_once('/').unwrap_or(("", rest));
            if value.is_empty() {
                return None;
            }
            after.push((part.to_string(), value));
            rest = before;
        }
        values.extend(after.into_iter().rev());
        Some((values, rest))
    }

    /// Each part but `route` and `client` with its value in `request`, in order: what
    /// `explain` shows.
    pub fn values<B>(&self, request: &Request<B>) -> Vec<(String, String)> {
        self.before
            .iter()
            .chain(&self.after)
            .map(|part| (part.to_string(), part_value(part, request).into_owned()))
            .collect()
    }
}

impl fmt::Display for KeyParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, part) in self.iter().enumerate() {
            if at > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{part}")?;
        }
        Ok(())
    }
}

/// `"host, method, route, client"`: the parts, separated by commas.
impl FromStr for KeyParts {
    type Err = KeyPartsError;

    fn from_str(text: &str) -> Result<KeyParts, KeyPartsError> {
        let parts = text
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<KeyPart>, _>>()?;
        KeyParts::new(parts)
    }
}

/// The segment `part` gives for `request` (`route` and `client` are written by the caller).
pub(crate) fn part_value<'r, B>(part: &KeyPart, request: &'r Request<B>) -> Cow<'r, str> {
    match part {
        KeyPart::Route | KeyPart::Client => Cow::Borrowed(""),
        KeyPart::Method => segment(request.method().as_str().as_bytes()),
        KeyPart::Host => match host(request) {
            Some(host) => {
                let mut host = segment(host.as_bytes()).into_owned();
                host.make_ascii_lowercase();
                Cow::Owned(host)
            }
            None => Cow::Borrowed(ABSENT),
        },
        KeyPart::Header(name) => match request.headers().get(name) {
            Some(value) => segment(value.as_bytes()),
            None => Cow::Borrowed(ABSENT),
        },
        KeyPart::Query(name) => {
            let value = request.uri().query().and_then(|query| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(key, _)| key == name.as_str())
                    .map(|(_, value)| value)
            });
            match value {
                Some(value) => Cow::Owned(segment(value.as_bytes()).into_owned()),
                None => Cow::Borrowed(ABSENT),
            }
        }
        KeyPart::Cookie(name) => match cookie(request, name) {
            Some(value) => segment(value),
            None => Cow::Borrowed(ABSENT),
        },
        KeyPart::Json(pointer) => {
            let json = request.extensions().get::<RequestJson>();
            json.and_then(|json| json.value(pointer))
                .map_or(Cow::Borrowed(ABSENT), |value| segment(value.as_bytes()))
        }
        // What the layer verified (`Limits::verify_identity` for other callers).
        KeyPart::Jwt(claim) => match request.extensions().get::<Verified>() {
            Some(Verified::Valid(claims)) => match claims.get(claim) {
                Some(value) => Cow::Owned(segment(value.as_bytes()).into_owned()),
                None => Cow::Borrowed(ABSENT),
            },
            _ => Cow::Borrowed(ABSENT),
        },
    }
}

/// The host a request was sent to, without its port or a trailing dot: the URI's
/// authority (HTTP/2, absolute-form), else the `Host` header.
fn host<B>(request: &Request<B>) -> Option<&str> {
    let authority = match request.uri().authority() {
        Some(authority) => authority.as_str(),
        None => request.headers().get(http::header::HOST)?.to_str().ok()?,
    };
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if authority.starts_with('[') {
        // [v6]:port
        authority
            .find(']')
            .map_or(authority, |end| &authority[..=end])
    } else {
        authority
            .split_once(':')
            .map_or(authority, |(host, _)| host)
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// `bytes` as one key segment: empty is absent (`-`), a literal `-` is `%2D`, cut to
/// [`MAX_PART`] bytes, dots-only written `%2E…`, unsafe bytes percent-encoded.
fn segment(bytes: &[u8]) -> Cow<'_, str> {
    let bytes = &bytes[..bytes.len().min(MAX_PART)];
    match bytes {
        [] => Cow::Borrowed(ABSENT),
        b"-" => Cow::Borrowed("%2D"),
        dots if dots.iter().all(|&b| b == b'.') => Cow::Owned("%2E".repeat(dots.len())),
        bytes => Cow::from(percent_encode(bytes, SEGMENT_UNSAFE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> KeyParts {
        text.parse().unwrap()
    }

    fn request(uri: &str, headers: &[(&str, &[u8])]) -> Request<()> {
        let mut request = Request::post(uri).body(()).unwrap();
        for (name, value) in headers {
            request.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        request
    }

    fn path(parts: &KeyParts, request: &Request<()>, route: &str) -> String {
        parts.match_path(request, route.into(), false).into_owned()
    }

    #[test]
    fn the_default_parts_are_the_route_borrowed() {
        let request = request("/orders", &[]);
        let path = KeyParts::default().match_path(&request, Cow::Borrowed("orders"), false);
        assert!(matches!(path, Cow::Borrowed("orders")));
        assert_eq!(KeyParts::default().to_string(), "route, client");
        assert_eq!(parts("route, client"), KeyParts::default());
    }

    #[test]
    fn parts_are_segments_around_the_route() {
        let all = parts("host, method, header:x-tenant, route, query:v, cookie:plan, client");
        let request = request(
            "/orders?v=2&v=3&other=x",
            &[
                ("host", b"Shop.Example.COM:8080"),
                ("x-tenant", b"acme"),
                ("cookie", b"a=1; plan=\"gold\"; b=2"),
            ],
        );
        assert_eq!(
            path(&all, &request, "orders"),
            "shop.example.com/POST/acme/orders/2/gold"
        );
        assert_eq!(
            all.values(&request),
            [
                ("host".to_owned(), "shop.example.com".to_owned()),
                ("method".to_owned(), "POST".to_owned()),
                ("header:x-tenant".to_owned(), "acme".to_owned()),
                ("query:v".to_owned(), "2".to_owned()),
                ("cookie:plan".to_owned(), "gold".to_owned()),
            ]
        );
        // The root route adds no segment.
        assert_eq!(path(&parts("method, route, client"), &request, ""), "POST");
    }

    #[test]
    fn absent_parts_are_a_dash_and_a_dash_is_not_absent() {
        let tenant = parts("header:x-tenant, route, client");
        assert_eq!(path(&tenant, &request("/a", &[]), "a"), "-/a");
        assert_eq!(
            path(&tenant, &request("/a", &[("x-tenant", b"")]), "a"),
            "-/a"
        );
        assert_eq!(
            path(&tenant, &request("/a", &[("x-tenant", b"-")]), "a"),
            "%2D/a"
        );
        let host = parts("host, route, client");
        assert_eq!(path(&host, &request("/a", &[]), "a"), "-/a");
        let query = parts("query:v, route, client");
        assert_eq!(path(&query, &request("/a?w=1", &[]), "a"), "-/a");
        let cookie = parts("cookie:s, route, client");
        assert_eq!(
            path(&cookie, &request("/a", &[("cookie", b"ss=1; xs=2")]), "a"),
            "-/a"
        );
    }

    #[test]
    fn hostile_values_stay_one_bounded_segment() {
        let tenant = parts("header:x-tenant, route, client");
        let slashes = request("/a", &[("x-tenant", b"../../admin/x y%\xff")]);
        assert_eq!(
            path(&tenant, &slashes, "a"),
            "..%2F..%2Fadmin%2Fx%20y%25%FF/a"
        );
        let dots = request("/a", &[("x-tenant", b"..")]);
        assert_eq!(path(&tenant, &dots, "a"), "%2E%2E/a");
        let huge = vec![0xFFu8; 10 * MAX_PART];
        let long = request("/a", &[("x-tenant", &huge)]);
        let value = &tenant.values(&long)[0].1;
        assert_eq!(
            value.len(),
            3 * MAX_PART,
            "cut to MAX_PART bytes, then encoded"
        );
        let query = parts("query:q, route, client");
        let encoded = request("/a?q=a%2Fb+c", &[]);
        assert_eq!(path(&query, &encoded, "a"), "a%2Fb%20c/a");
    }

    #[test]
    fn hosts_lose_their_port_and_case_and_come_from_the_authority_first() {
        let host = parts("host, route, client");
        let cases: [(&str, &[u8], &str); 5] = [
            ("/", b"EXAMPLE.com", "example.com"),
            ("/", b"example.com.:443", "example.com"),
            ("/", b"[2001:DB8::1]:8443", "[2001:db8::1]"),
            ("/", b"xn--bcher-kva.example", "xn--bcher-kva.example"),
            (
                "https://Other.example:9/",
                b"ignored.example",
                "other.example",
            ),
        ];
        for (uri, header, expected) in cases {
            let request = request(uri, &[("host", header)]);
            assert_eq!(path(&host, &request, ""), expected, "{uri} {header:?}");
        }
    }

    #[test]
    fn case_insensitive_keys_fold_the_parts_too() {
        let method = parts("method, route, client");
        let request = request("/Orders", &[]);
        assert_eq!(
            method.match_path(&request, "orders".into(), true),
            "post/orders"
        );
    }

    #[test]
    fn bad_parts_are_refused_with_what_to_write() {
        let refused = |text: &str| text.parse::<KeyParts>().unwrap_err().to_string();
        assert!(refused("route, client, verb").contains("unknown key part \"verb\""));
        assert!(refused("header, route, client").contains("needs a name"));
        assert!(refused("header:, route, client").contains("needs a name"));
        assert!(refused("query: , route, client").contains("needs a name"));
        assert!(refused("cookie:a=b, route, client").contains("needs a name"));
        assert!(refused("method, method, route, client").contains("listed twice"));
        assert!(refused("method, client").contains("must include \"route\""));
        assert!(refused("method, route").contains("must include \"client\""));
        assert!(refused("route, client, method").contains("must be the last"));
    }
}
