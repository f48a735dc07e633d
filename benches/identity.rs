//! Verified identities: `cargo bench --bench identity`.
//!
//! What it costs to learn who is asking, each beside the unverified baseline measured in
//! the same run (`identity/header`: `header:x-api-key` believed as sent):
//!
//! - `identity/api_key/1M`: the `api_key` source over a table of 1,000,000 issued keys (a
//!   SHA-256 of the presented key and one hash-table lookup);
//! - `identity/jwt/ALG/check`: a token's full verification, uncached — HS256, RS256 (2048
//!   bits), ES256 and EdDSA, with the test keys of `tests/fixtures/jwt`;
//! - `identity/jwt/ALG/cached`: the same token again, as the layer meets a client's next
//!   requests: its digest found among the tokens verified before.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderName, Request};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tollgate::key::{
    ApiKeyOwner, ApiKeys, Client, ClientSettings, ClientSource, JwtSettings, JwtVerifier,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn token(algorithm: Algorithm, kid: Option<&str>) -> String {
    let key = match algorithm {
        Algorithm::HS256 => EncodingKey::from_secret(SECRET),
        Algorithm::RS256 => EncodingKey::from_rsa_der(&fixture("rs256.der")),
        Algorithm::ES256 => EncodingKey::from_ec_der(&fixture("es256.der")),
        _ => EncodingKey::from_ed_der(&fixture("ed25519.der")),
    };
    let mut header = Header::new(algorithm);
    header.kid = kid.map(str::to_owned);
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    jsonwebtoken::encode(
        &header,
        &serde_json::json!({ "sub": "user-42", "org": "acme", "exp": exp }),
        &key,
    )
    .unwrap()
}

fn identity(c: &mut Criterion) {
    let mut group = c.benchmark_group("identity");

    let mut header = ClientSettings::default();
    header.sources = vec![ClientSource::Header(HeaderName::from_static("x-api-key"))];
    let request = Request::builder()
        .header("x-api-key", "tg_live_000042")
        .body(())
        .unwrap();
    group.bench_function("header", |b| {
        b.iter(|| Client::identify(std::hint::black_box(&request), &header))
    });

    let mut keys = ApiKeys::new(HeaderName::from_static("x-api-key"));
    keys.reserve(1_000_000);
    for n in 0..1_000_000u32 {
        keys.insert(
            ApiKeys::digest(format!("tg_live_{n:06}").as_bytes()),
            ApiKeyOwner::new(format!("team-{n}"), None),
        );
    }
    let mut api_key = ClientSettings::default();
    api_key.sources = vec![ClientSource::ApiKey];
    api_key.api_keys = Some(Arc::new(keys));
    group.bench_function("api_key/1M", |b| {
        b.iter(|| Client::identify(std::hint::black_box(&request), &api_key))
    });

    let secret = JwtVerifier::from_secret(SECRET, &JwtSettings::default()).unwrap();
    let jwks = String::from_utf8(fixture("jwks.json")).unwrap();
    let (set, _) = JwtVerifier::from_jwks(&jwks, &JwtSettings::default()).unwrap();
    for (name, algorithm, kid, verifier) in [
        ("hs256", Algorithm::HS256, None, &secret),
        ("rs256", Algorithm::RS256, Some("rsa-1"), &set),
        ("es256", Algorithm::ES256, Some("ec-1"), &set),
        ("eddsa", Algorithm::EdDSA, Some("ed-1"), &set),
    ] {
        let token = token(algorithm, kid);
        group.bench_function(format!("jwt/{name}/check"), |b| {
            b.iter(|| verifier.check(std::hint::black_box(&token)).unwrap())
        });
        let request = Request::builder()
            .header("authorization", format!("Bearer {token}"))
            .body(())
            .unwrap();
        group.bench_function(format!("jwt/{name}/cached"), |b| {
            b.iter(|| verifier.verify(std::hint::black_box(&request)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = identity
}
criterion_main!(benches);
