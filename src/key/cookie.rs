//! Reading one cookie of a request: for `cookie:NAME` key parts and tokens.

use http::Request;

/// The value of cookie `name` among the request's `Cookie` headers (quotes removed).
pub(super) fn cookie<'r, B>(request: &'r Request<B>, name: &str) -> Option<&'r [u8]> {
    request
        .headers()
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|header| header.as_bytes().split(|&b| b == b';'))
        .find_map(|pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            let (key, value) = (pair[..at].trim_ascii(), &pair[at + 1..]);
            (key == name.as_bytes()).then(|| {
                let value = value.trim_ascii();
                value
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(value)
            })
        })
}
