//! Credentials: JSON Web Tokens (every request may carry one) and the JSON Web Key Sets
//! they are verified against (fetched from an identity provider's URL).

use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Map, Value};
use tollgate::key::{JwtSettings, JwtVerifier};

/// The HS256 secret the `jwt` target signs with (32 bytes, as HS256 needs).
const SECRET: &[u8] = b"tollgate-fuzz-secret-32-bytes-ok";

fn settings() -> JwtSettings {
    let mut settings = JwtSettings::default();
    settings.issuer = Some("https://id.example/".to_owned());
    settings.audience = Some("api".to_owned());
    settings
}

/// `token` with the character at `at` replaced by another base64url character.
fn altered(token: &str, at: usize) -> Option<String> {
    let mut bytes = token.as_bytes().to_vec();
    let byte = bytes.get_mut(at)?;
    *byte = if *byte == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).ok()
}

/// `jwt`: a request's token. Never panics; a token the target did not sign is never
/// accepted, however it is made (`alg: none`, another algorithm, a forged signature);
/// claims the target signs are accepted only with an expiry, the issuer and the audience
/// set, and come back as signed; that token with one signature or payload character
/// changed is refused.
///
/// The input is a JSON object of claims, a newline, then a token as a client sends it.
pub fn jwt(data: &[u8]) {
    let verifier = JwtVerifier::from_secret(SECRET, &settings()).expect("a 32-byte secret");
    let (claims, presented) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(presented) = std::str::from_utf8(presented) {
        assert!(
            verifier.check(presented).is_err(),
            "a token the fuzzer made was accepted: {presented:?}"
        );
    }
    let Ok(claims) = serde_json::from_slice::<Map<String, Value>>(claims) else {
        return;
    };
    let Ok(token) = jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET),
    ) else {
        return;
    };
    if let Ok(verified) = verifier.check(&token) {
        assert!(verified.expires().is_some(), "accepted without exp");
        assert_eq!(
            verified.get("iss").as_deref(),
            Some("https://id.example/"),
            "accepted from another issuer, or none"
        );
        let audience = claims.get("aud");
        assert!(
            audience == Some(&Value::from("api"))
                || audience
                    .and_then(Value::as_array)
                    .is_some_and(|list| list.contains(&Value::from("api"))),
            "accepted for another audience, or none: {audience:?}"
        );
        for (name, value) in &claims {
            if let Value::String(text) = value {
                assert_eq!(
                    verified.get(name).as_deref(),
                    Some(text.as_str()),
                    "claim {name} changed"
                );
            }
        }
    }
    let signature = token.rfind('.').map_or(0, |dot| dot + 1);
    let payload = token.find('.').map_or(0, |dot| dot + 1);
    for at in [signature, payload] {
        if let Some(forged) = altered(&token, at) {
            assert!(
                verifier.check(&forged).is_err(),
                "a token changed at byte {at} was accepted"
            );
        }
    }
}

/// `jwks`: a JSON Web Key Set document. Never panics; what it skips is at most what it
/// lists; a verifier made from it accepts no token the fuzzer made (no private key of any
/// key it could list is known to it).
///
/// The input is the document, a NUL byte, then a token.
pub fn jwks(data: &[u8]) {
    let (document, presented) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(document) = std::str::from_utf8(document) else {
        return;
    };
    let Ok((verifier, skipped)) = JwtVerifier::from_jwks(document, &JwtSettings::default()) else {
        return;
    };
    let listed = serde_json::from_str::<Value>(document)
        .ok()
        .and_then(|v| v.get("keys").and_then(Value::as_array).map(Vec::len))
        .unwrap_or(0);
    assert!(
        skipped.len() < listed,
        "a verifier with every listed key skipped"
    );
    if let Ok(presented) = std::str::from_utf8(presented) {
        assert!(
            verifier.check(presented).is_err(),
            "a token the fuzzer made was accepted: {presented:?}"
        );
    }
}
