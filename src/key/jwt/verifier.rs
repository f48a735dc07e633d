//! The verifier itself: a key set's (or secret's) keys by family, a validation per
//! accepted algorithm, and the cache of tokens already verified.

use std::sync::Arc;

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};

use super::cache::{TokenCache, unix_now};
use super::{JwtSettings, MAX_TOKEN};
use crate::key::{Claims, Invalid, Verified};

/// The family of algorithms a key may be used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

fn family(algorithm: Algorithm) -> Family {
    match algorithm {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Family::Hmac,
        Algorithm::ES256 | Algorithm::ES384 => Family::Ec,
        Algorithm::EdDSA => Family::Ed,
        _ => Family::Rsa,
    }
}

/// One verification key: its id, family and the key itself.
struct Key {
    id: Option<String>,
    family: Family,
    key: DecodingKey,
}

/// A token verifier: the keys, and a validation per accepted algorithm.
pub struct JwtVerifier {
    keys: Vec<Key>,
    validations: Vec<(Algorithm, Validation)>,
    settings: JwtSettings,
    cache: TokenCache,
    /// Whether the key set is fetched, so an unknown `kid` is worth a fetch.
    refreshes: bool,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys: an HS256 secret is one.
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("settings", &self.settings)
            .finish()
    }
}

impl PartialEq for JwtVerifier {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for JwtVerifier {}

impl JwtVerifier {
    /// A verifier of HS256 tokens signed with `secret` (at least 32 bytes).
    pub fn from_secret(secret: &[u8], settings: &JwtSettings) -> Result<JwtVerifier, String> {
        if secret.len() < 32 {
            return Err(format!(
                "an HS256 secret must be at least 32 bytes (RFC 7518 §3.2), found {}",
                secret.len()
            ));
        }
        let keys = vec![Key {
            id: None,
            family: Family::Hmac,
            key: DecodingKey::from_secret(secret),
        }];
        JwtVerifier::new(keys, settings, &["HS256"])
    }

    /// A verifier of the keys of JSON Web Key Set `document`, and what was wrong with
    /// the keys it skipped. Refused when no key is usable.
    pub fn from_jwks(
        document: &str,
        settings: &JwtSettings,
    ) -> Result<(JwtVerifier, Vec<String>), String> {
        let value: serde_json::Value = serde_json::from_str(document)
            .map_err(|error| format!("not a JSON Web Key Set: {error}"))?;
        let Some(listed) = value.get("keys").and_then(serde_json::Value::as_array) else {
            return Err("not a JSON Web Key Set: no \"keys\" list".to_owned());
        };
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for (index, entry) in listed.iter().enumerate() {
            let jwk = match serde_json::from_value::<Jwk>(entry.clone()) {
                Ok(jwk) => jwk,
                Err(error) => {
                    skipped.push(format!("key {index}: {error}"));
                    continue;
                }
            };
            let family = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Family::Rsa,
                AlgorithmParameters::EllipticCurve(_) => Family::Ec,
                AlgorithmParameters::OctetKeyPair(_) => Family::Ed,
                AlgorithmParameters::OctetKey(_) => {
                    skipped.push(format!(
                        "key {index}: a shared secret (\"oct\") in a key set is not used; use secret_env"
                    ));
                    continue;
                }
            };
            match DecodingKey::from_jwk(&jwk) {
                Ok(key) => keys.push(Key {
                    id: jwk.common.key_id.clone(),
                    family,
                    key,
                }),
                Err(error) => skipped.push(format!("key {index}: {error}")),
            }
        }
        if keys.is_empty() {
            return Err(format!(
                "no usable key in the key set{}",
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", skipped.join("; "))
                }
            ));
        }
        let verifier = JwtVerifier::new(keys, settings, &["RS256", "ES256", "EdDSA"])?;
        Ok((verifier, skipped))
    }

    fn new(
        keys: Vec<Key>,
        settings: &JwtSettings,
        default: &[&str],
    ) -> Result<JwtVerifier, String> {
        let names: Vec<&str> = if settings.algorithms.is_empty() {
            default.to_vec()
        } else {
            settings.algorithms.iter().map(String::as_str).collect()
        };
        let mut validations = Vec::new();
        for name in names {
            if name.eq_ignore_ascii_case("none") {
                return Err("algorithm \"none\" is never accepted".to_owned());
            }
            let algorithm: Algorithm = name
                .parse()
                .map_err(|_| format!("unknown algorithm \"{}\"", name.escape_debug()))?;
            let mut validation = Validation::new(algorithm);
            validation.leeway = settings.leeway;
            validation.validate_nbf = true;
            // jsonwebtoken checks `iss` and `aud` only when a token has them: a token
            // without them would pass a check it never met. Required when set.
            let mut required = vec!["exp"];
            required.extend(settings.issuer.as_ref().map(|_| "iss"));
            required.extend(settings.audience.as_ref().map(|_| "aud"));
            validation.set_required_spec_claims(&required);
            match &settings.issuer {
                Some(issuer) => validation.set_issuer(&[issuer]),
                None => validation.iss = None,
            }
            match &settings.audience {
                Some(audience) => validation.set_audience(&[audience]),
                None => validation.validate_aud = false,
            }
            validations.push((algorithm, validation));
        }
        Ok(JwtVerifier {
            keys,
            validations,
            settings: settings.clone(),
            cache: TokenCache::default(),
            refreshes: false,
        })
    }

    /// Marks the key set as fetched from a URL: a token naming a `kid` the set lacks asks
    /// for the set again (see [`refreshes`](Self::refreshes)).
    pub fn refresh_on_unknown_kid(&mut self) {
        self.refreshes = true;
    }

    /// Whether an unknown `kid` should fetch the key set again: its keys may have rotated.
    pub fn refreshes(&self) -> bool {
        self.refreshes
    }

    /// The settings the verifier was made with.
    pub fn settings(&self) -> &JwtSettings {
        &self.settings
    }

    /// Verifies the token `request` carries: found among the tokens verified before (by
    /// digest, until they expire), else checked with [`check`](Self::check) and kept.
    pub fn verify<B>(&self, request: &http::Request<B>) -> Verified {
        let Some(token) = self.settings.token.token(request) else {
            return Verified::Absent;
        };
        if token.len() > MAX_TOKEN {
            return Verified::Invalid(Invalid::Malformed);
        }
        let digest = TokenCache::digest(token);
        let now = unix_now();
        if let Some(claims) = self.cache.get(&digest, now) {
            return Verified::Valid(claims);
        }
        match self.check(token) {
            Ok(claims) => {
                let claims = Arc::new(claims);
                // Kept until `exp` (which every token verified here has) plus the leeway.
                if let Some(exp) = claims.expires() {
                    let until = exp.saturating_add(self.settings.leeway);
                    self.cache.insert(digest, Arc::clone(&claims), until, now);
                }
                Verified::Valid(claims)
            }
            Err(invalid) => Verified::Invalid(invalid),
        }
    }

    /// Checks `token` — signature, algorithm, `exp`, `nbf`, `iss`, `aud` — without the
    /// cache, and returns its claims.
    pub fn check(&self, token: &str) -> Result<Claims, Invalid> {
        if token.len() > MAX_TOKEN {
            return Err(Invalid::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| Invalid::Malformed)?;
        let Some((algorithm, validation)) = self
            .validations
            .iter()
            .find(|(algorithm, _)| *algorithm == header.alg)
        else {
            return Err(Invalid::Algorithm);
        };
        let wanted = family(*algorithm);
        let mut candidates = self.keys.iter().filter(|key| {
            key.family == wanted
                && match (&header.kid, &key.id) {
                    (Some(kid), Some(id)) => kid == id,
                    (Some(_), None) => key.family == Family::Hmac,
                    (None, _) => true,
                }
        });
        let mut last = Invalid::UnknownSigningKey;
        for key in candidates.by_ref() {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token, &key.key, validation,
            ) {
                Ok(data) => return Ok(Claims::new(data.claims)),
                Err(error) => {
                    last = match error.kind() {
                        ErrorKind::InvalidSignature => Invalid::Signature,
                        ErrorKind::ExpiredSignature => Invalid::Expired,
                        ErrorKind::ImmatureSignature => Invalid::NotYetValid,
                        ErrorKind::InvalidIssuer => Invalid::Issuer,
                        ErrorKind::InvalidAudience => Invalid::Audience,
                        ErrorKind::InvalidAlgorithm => Invalid::Algorithm,
                        ErrorKind::MissingRequiredClaim(_) => Invalid::MissingClaim,
                        _ => Invalid::Malformed,
                    };
                    // Only a bad signature is worth trying the next key for.
                    if last != Invalid::Signature {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const SECRET: &[u8] = b"a-secret-of-at-least-32-bytes-ok";

    fn token(claims: &serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::default(),
            claims,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap()
    }

    /// Found by the `jwt` fuzz target: with `issuer` and `audience` set, a token that
    /// had neither claim was accepted (jsonwebtoken checks them only when present).
    #[test]
    fn an_issuer_or_audience_set_is_required_not_only_checked_when_present() {
        let settings = JwtSettings {
            issuer: Some("https://id.example/".to_owned()),
            audience: Some("api".to_owned()),
            ..JwtSettings::default()
        };
        let verifier = JwtVerifier::from_secret(SECRET, &settings).unwrap();
        let exp = 4_102_444_800u64;
        let whole = json!({"sub": "u", "iss": "https://id.example/", "aud": "api", "exp": exp});
        assert!(verifier.check(&token(&whole)).is_ok());
        for missing in ["iss", "aud"] {
            let mut claims = whole.clone();
            claims.as_object_mut().unwrap().remove(missing);
            assert_eq!(
                verifier.check(&token(&claims)).unwrap_err(),
                Invalid::MissingClaim,
                "a token without {missing}"
            );
        }
        // Neither set: neither required.
        let open = JwtVerifier::from_secret(SECRET, &JwtSettings::default()).unwrap();
        assert!(open.check(&token(&json!({"sub": "u", "exp": exp}))).is_ok());
    }

    /// A NumericDate may have a fraction (RFC 7519 §2), which jsonwebtoken accepts: such a
    /// token's expiry is still known, so it is cached like any other.
    #[test]
    fn a_fractional_expiry_is_an_expiry() {
        let verifier = JwtVerifier::from_secret(SECRET, &JwtSettings::default()).unwrap();
        let claims = verifier
            .check(&token(&json!({"sub": "u", "exp": 4_102_444_800.75})))
            .unwrap();
        assert_eq!(claims.expires(), Some(4_102_444_800));
    }
}
