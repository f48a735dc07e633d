//! JSON Web Tokens, verified (`[identity.jwt]`, feature `jwt`): a request's bearer token
//! checked against an HS256 secret or a JSON Web Key Set — signature, algorithm, `exp`
//! and `nbf` (with leeway), `iss` and `aud` when configured — before any claim is used
//! in a key. `none` is never accepted, and a key is used only with the algorithms of its
//! own family (an RSA public key is never taken as an HMAC secret).
//!
//! Built without the `jwt` feature, [`JwtVerifier`] cannot be made: config naming
//! `[identity.jwt]` is refused, saying so.

use std::borrow::Cow;
use std::fmt;

use http::{HeaderName, Request};

use super::verified::Verified;

/// The longest token read: a real one is a few hundred bytes to a few kilobytes.
pub const MAX_TOKEN: usize = 16 * 1024;

/// Where a request's token is read: `[identity.jwt] token`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenFrom {
    /// `Authorization: Bearer TOKEN` (the default).
    #[default]
    Bearer,
    /// `"header:NAME"`: the whole value of a header.
    Header(HeaderName),
    /// `"cookie:NAME"`: a cookie's value.
    Cookie(String),
}

impl fmt::Display for TokenFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenFrom::Bearer => f.write_str("bearer"),
            TokenFrom::Header(name) => write!(f, "header:{name}"),
            TokenFrom::Cookie(name) => write!(f, "cookie:{name}"),
        }
    }
}

impl TokenFrom {
    /// Reads `"bearer"`, `"header:NAME"` or `"cookie:NAME"`.
    pub fn parse(text: &str) -> Option<TokenFrom> {
        let text = text.trim();
        if text == "bearer" {
            return Some(TokenFrom::Bearer);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return HeaderName::from_bytes(name.trim().as_bytes())
                .ok()
                .map(TokenFrom::Header);
        }
        let name = text.strip_prefix("cookie:")?.trim();
        (!name.is_empty()).then(|| TokenFrom::Cookie(name.to_owned()))
    }

    /// The token `request` carries here, if any (absent when empty or too long to be one).
    pub fn token<'r, B>(&self, request: &'r Request<B>) -> Option<&'r str> {
        let token = match self {
            TokenFrom::Bearer => {
                let value = request
                    .headers()
                    .get(http::header::AUTHORIZATION)?
                    .to_str()
                    .ok()?;
                let (scheme, token) = value.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim())?
            }
            TokenFrom::Header(name) => request.headers().get(name)?.to_str().ok()?.trim(),
            TokenFrom::Cookie(name) => {
                std::str::from_utf8(super::cookie::cookie(request, name)?).ok()?
            }
        };
        (!token.is_empty()).then_some(token)
    }
}

#[cfg(feature = "jwt")]
pub use verifier::JwtVerifier;

#[cfg(not(feature = "jwt"))]
pub use unbuilt::JwtVerifier;

/// The settings a verifier is made from, as `[identity.jwt]` writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JwtSettings {
    /// `iss` must be this, if set.
    pub issuer: Option<String>,
    /// `aud` must include this, if set.
    pub audience: Option<String>,
    /// The algorithms accepted (default RS256, ES256, EdDSA; HS256 with a secret).
    pub algorithms: Vec<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf` (default 30).
    pub leeway: u64,
    /// Where the token is read.
    pub token: TokenFrom,
}

impl Default for JwtSettings {
    fn default() -> Self {
        JwtSettings {
            issuer: None,
            audience: None,
            algorithms: Vec::new(),
            leeway: 30,
            token: TokenFrom::Bearer,
        }
    }
}

/// Verifies `request`'s token with `verifier`, or reads what the layer found already.
pub(crate) fn verified<'r, B>(
    request: &'r Request<B>,
    verifier: &JwtVerifier,
) -> Cow<'r, Verified> {
    match request.extensions().get::<Verified>() {
        Some(found) => Cow::Borrowed(found),
        None => Cow::Owned(verifier.verify(request)),
    }
}

#[cfg(not(feature = "jwt"))]
mod unbuilt {
    use super::{JwtSettings, Verified};

    /// Built without the `jwt` feature: cannot be made.
    #[derive(Debug, PartialEq, Eq)]
    pub struct JwtVerifier(std::convert::Infallible);

    impl JwtVerifier {
        /// Always refused: the `jwt` feature is off.
        pub fn from_secret(_: &[u8], _: &JwtSettings) -> Result<JwtVerifier, String> {
            Err(UNBUILT.to_owned())
        }

        /// Always refused: the `jwt` feature is off.
        pub fn from_jwks(_: &str, _: &JwtSettings) -> Result<(JwtVerifier, Vec<String>), String> {
            Err(UNBUILT.to_owned())
        }

        /// Never called: no verifier exists.
        pub fn verify<B>(&self, _: &http::Request<B>) -> Verified {
            match self.0 {}
        }

        /// Never called: no verifier exists.
        pub fn refresh_on_unknown_kid(&mut self) {
            match self.0 {}
        }

        /// Never called: no verifier exists.
        pub fn refreshes(&self) -> bool {
            match self.0 {}
        }

        /// Never called: no verifier exists.
        pub fn check(&self, _: &str) -> Result<crate::key::Claims, crate::key::Invalid> {
            match self.0 {}
        }

        /// Never called: no verifier exists.
        pub fn settings(&self) -> &JwtSettings {
            match self.0 {}
        }
    }

    const UNBUILT: &str = "[identity.jwt] needs tollgate built with the `jwt` feature";
}

#[cfg(feature = "jwt")]
mod cache;
#[cfg(feature = "jwt")]
mod verifier;

#[cfg(test)]
#[cfg(feature = "jwt")]
mod tests {
    use super::*;
    use crate::key::Invalid;
    use jsonwebtoken::{EncodingKey, Header};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn request(token: &str) -> Request<()> {
        Request::builder()
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap()
    }

    fn token(secret: &[u8], exp: i64) -> String {
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            + exp;
        jsonwebtoken::encode(
            &Header::default(),
            &serde_json::json!({ "sub": "ada", "n": 7, "ok": true, "exp": exp }),
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    #[test]
    fn an_hs256_secret_verifies_its_tokens_and_nothing_else() {
        let verifier = JwtVerifier::from_secret(SECRET, &JwtSettings::default()).unwrap();
        let Verified::Valid(claims) = verifier.verify(&request(&token(SECRET, 60))) else {
            panic!("a good token did not verify");
        };
        assert_eq!(claims.get("sub").as_deref(), Some("ada"));
        assert_eq!(claims.get("n").as_deref(), Some("7"));
        assert_eq!(claims.get("ok").as_deref(), Some("true"));
        assert_eq!(claims.get("absent"), None);

        let other = b"another secret of thirty-two bytes";
        assert_eq!(
            verifier.verify(&request(&token(other, 60))),
            Verified::Invalid(Invalid::Signature)
        );
        // Past the 30 s leeway.
        assert_eq!(
            verifier.verify(&request(&token(SECRET, -120))),
            Verified::Invalid(Invalid::Expired)
        );
        assert_eq!(
            verifier.verify(&Request::new(())),
            Verified::Absent,
            "no token is not a bad token"
        );
        assert_eq!(
            verifier.verify(&request("a.b")),
            Verified::Invalid(Invalid::Malformed)
        );
    }

    #[test]
    fn short_secrets_and_none_are_refused() {
        assert!(JwtVerifier::from_secret(b"short", &JwtSettings::default()).is_err());
        let none = JwtSettings {
            algorithms: vec!["none".to_owned()],
            ..JwtSettings::default()
        };
        assert!(JwtVerifier::from_secret(SECRET, &none).is_err());
    }

    #[test]
    fn a_key_set_keeps_its_usable_keys_and_refuses_when_none_is() {
        let set = r#"{"keys": [
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            {"kty": "oct", "kid": "shared", "k": "c2VjcmV0"},
            {"kty": "XYZ", "kid": "alien"},
            {"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
        ]}"#;
        let (_, skipped) = JwtVerifier::from_jwks(set, &JwtSettings::default()).unwrap();
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(
            skipped.iter().any(|s| s.contains("secret_env")),
            "{skipped:?}"
        );
        for bad in [
            "not json",
            "{}",
            r#"{"keys": []}"#,
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
        ] {
            assert!(
                JwtVerifier::from_jwks(bad, &JwtSettings::default()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn tokens_are_read_from_the_bearer_header_a_named_header_or_a_cookie() {
        let request = Request::builder()
            .header("authorization", "Basic abc")
            .header("x-token", " t1 ")
            .header("cookie", "a=1; session=\"t2\"")
            .body(())
            .unwrap();
        assert_eq!(
            TokenFrom::Bearer.token(&request),
            None,
            "not a bearer token"
        );
        assert_eq!(
            TokenFrom::parse("header:x-token").unwrap().token(&request),
            Some("t1")
        );
        assert_eq!(
            TokenFrom::parse("cookie:session").unwrap().token(&request),
            Some("t2")
        );
        assert_eq!(TokenFrom::parse("query:t"), None);
    }
}
