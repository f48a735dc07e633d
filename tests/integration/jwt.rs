//! Verified tokens: a JSON Web Key Set's RS256, ES256 and EdDSA keys; claims as the client,
//! a key part, an `also` limit's `per` and the plan; every kind of bad token — forged,
//! expired, foreign, `alg: none`, an unknown `kid`, the RSA-key-as-HMAC-secret confusion,
//! garbage and 20 KiB — never selecting anyone's budget; the key set reloaded live.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tollgate::{Limits, RateLimitLayer};

use crate::support::{get as fetch, serve};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join(name)).unwrap()
}

/// A token signed with the fixture key of `algorithm`, whose `kid` is `kid`.
fn signed(algorithm: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let key = match algorithm {
        Algorithm::RS256 => EncodingKey::from_rsa_der(&fixture("rs256.der")),
        Algorithm::ES256 => EncodingKey::from_ec_der(&fixture("es256.der")),
        Algorithm::EdDSA => EncodingKey::from_ed_der(&fixture("ed25519.der")),
        other => panic!("no fixture for {other:?}"),
    };
    let mut header = Header::new(algorithm);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn claims(sub: &str) -> Value {
    json!({ "sub": sub, "org": "acme", "plan": "pro", "iss": "https://id.example", "exp": now() + 600 })
}

const RULES: &str = "[client]\nsources = [\"jwt:sub\", \"ip\"]\n\
    [identity.jwt]\njwks_file = \"jwks.json\"\nissuer = \"https://id.example\"\n\
    [limits.api]\nrate = \"2/min\"\n";

fn setup(dir: &Path, rules: &str) -> Limits {
    std::fs::copy(Path::new(FIXTURES).join("jwks.json"), dir.join("jwks.json")).unwrap();
    let main = dir.join("limits.toml");
    std::fs::write(&main, rules).unwrap();
    Limits::builder().watch([&main]).unwrap()
}

async fn app(limits: Limits) -> SocketAddr {
    serve(
        Router::new()
            .route("/api", get(|| async { "ok" }))
            .layer(RateLimitLayer::new(limits)),
    )
    .await
}

async fn status(at: SocketAddr, token: Option<&str>) -> u16 {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|value| ("authorization", value))
        .into_iter()
        .collect();
    fetch(at, "/api", &headers).await.status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_verified_subject_has_its_own_budget_whatever_key_signed_it() {
    let dir = tempfile::tempdir().unwrap();
    let at = app(setup(dir.path(), RULES)).await;
    for (algorithm, kid, sub) in [
        (Algorithm::RS256, "rsa-1", "ada"),
        (Algorithm::ES256, "ec-1", "bob"),
        (Algorithm::EdDSA, "ed-1", "cy"),
    ] {
        let token = signed(algorithm, Some(kid), &claims(sub));
        let seen = [
            status(at, Some(&token)).await,
            status(at, Some(&token)).await,
            status(at, Some(&token)).await,
        ];
        assert_eq!(seen, [200, 200, 429], "{algorithm:?}");
    }
    // Without a kid, the keys of the token's algorithm are tried.
    let token = signed(Algorithm::ES256, None, &claims("dee"));
    assert_eq!(status(at, Some(&token)).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_never_selects_a_budget_it_is_the_addresss() {
    let dir = tempfile::tempdir().unwrap();
    let at = app(setup(dir.path(), RULES)).await;
    // Spend ada's budget with her real token.
    let real = signed(Algorithm::RS256, Some("rsa-1"), &claims("ada"));
    assert_eq!(status(at, Some(&real)).await, 200);
    assert_eq!(status(at, Some(&real)).await, 200);
    assert_eq!(status(at, Some(&real)).await, 429);

    let expired = signed(
        Algorithm::RS256,
        Some("rsa-1"),
        &json!({ "sub": "eve", "iss": "https://id.example", "exp": now() - 3600 }),
    );
    let foreign = signed(
        Algorithm::RS256,
        Some("rsa-1"),
        &json!({ "sub": "eve", "iss": "https://evil.example", "exp": now() + 600 }),
    );
    let unknown_kid = signed(Algorithm::RS256, Some("rsa-2"), &claims("eve"));
    // The payload of a real token, its header changed to `none` and the signature dropped.
    let mut parts = real.split('.');
    let (_, payload) = (parts.next().unwrap(), parts.next().unwrap());
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
    // Ada's claims re-signed by someone holding only the public key, as an HMAC secret.
    let jwks: Value = serde_json::from_slice(&fixture("jwks.json")).unwrap();
    let public_n = jwks["keys"][0]["n"].as_str().unwrap().to_owned();
    let confused = jsonwebtoken::encode(
        &Header {
            kid: Some("rsa-1".to_owned()),
            ..Header::new(Algorithm::HS256)
        },
        &claims("ada"),
        &EncodingKey::from_secret(public_n.as_bytes()),
    )
    .unwrap();
    // A forged signature: the real header and claims, another key's signature.
    let other = signed(Algorithm::ES256, Some("ec-1"), &claims("ada"));
    let forged = format!(
        "{}.{}",
        real.rsplit_once('.').unwrap().0,
        other.rsplit_once('.').unwrap().1
    );
    // Longer than any real token (16 KiB is the bound), shorter than hyper's header limit.
    let huge = "a".repeat(20 * 1024);
    let bad = [
        ("expired", expired),
        ("foreign issuer", foreign),
        ("unknown kid", unknown_kid),
        ("alg none", none),
        ("RSA key as HMAC secret", confused),
        ("forged signature", forged),
        ("garbage", "not.a.token".to_owned()),
        ("20 KiB", huge),
    ];
    // Each is counted by address: the first two pass, the rest share that one budget —
    // and none of them is ada's (already spent) or a budget of its own.
    let mut seen = Vec::new();
    for (what, token) in &bad {
        seen.push((*what, status(at, Some(token)).await));
    }
    let statuses: Vec<u16> = seen.iter().map(|(_, status)| *status).collect();
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429, 429, 429, 429],
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reject_a_bad_token_is_401_and_charges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let limits = setup(
        dir.path(),
        &format!("[identity]\non_invalid = \"reject\"\n{RULES}"),
    );
    let at = app(limits).await;
    let expired = signed(
        Algorithm::ES256,
        Some("ec-1"),
        &json!({ "sub": "eve", "iss": "https://id.example", "exp": now() - 3600 }),
    );
    for _ in 0..3 {
        let reply = fetch(
            at,
            "/api",
            &[("authorization", &format!("Bearer {expired}"))],
        )
        .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            reply.header("www-authenticate"),
            Some("Bearer error=\"invalid_token\"")
        );
        assert!(
            reply.body.contains("\"reason\":\"expired\""),
            "{}",
            reply.body
        );
        assert!(!reply.body.contains(&expired), "{}", reply.body);
    }
    // No token at all is not invalid: the address decides, its budget whole.
    assert_eq!(status(at, None).await, 200);
    assert_eq!(status(at, None).await, 200);
    assert_eq!(status(at, None).await, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_make_key_parts_also_limits_and_plans() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[client]\nsources = [\"jwt:sub\", \"ip\"]\n\
        [identity.jwt]\njwks_file = \"jwks.json\"\ntoken = \"cookie:session\"\n\
        [plans]\nclaim = \"plan\"\n\
        [limits.api]\nrate = \"1/min\"\nplans.pro = \"10/min\"\n\
        [limits.api.also]\norg = { rate = \"3/min\", per = \"jwt:org\" }\n";
    let limits = setup(dir.path(), rules);
    let at = app(limits).await;
    let cookie = |sub: &str| {
        format!(
            "session={}",
            signed(Algorithm::EdDSA, Some("ed-1"), &claims(sub))
        )
    };
    let mut seen = Vec::new();
    for sub in ["ada", "ada", "bob", "cy"] {
        let reply = fetch(at, "/api", &[("cookie", &cookie(sub))]).await;
        seen.push(reply.status.as_u16());
    }
    // On the pro plan (from the claim) each may make 10, but their organisation 3.
    assert_eq!(seen, [200, 200, 200, 429]);
    // Ada's plan came from her token: on the rule's own 1/min she would have been refused.
    assert_eq!(
        fetch(at, "/api", &[("cookie", &cookie("ann"))])
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS,
        "the organisation's budget is spent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_set_reloads_live_and_a_broken_one_keeps_the_last_good() {
    let dir = tempfile::tempdir().unwrap();
    let limits = setup(
        dir.path(),
        &format!("[identity]\non_invalid = \"reject\"\n{RULES}"),
    );
    let at = app(limits.clone()).await;
    let token = signed(Algorithm::RS256, Some("rsa-1"), &claims("ada"));
    assert_eq!(status(at, Some(&token)).await, 200);

    std::fs::write(dir.path().join("jwks.json"), "{\"keys\": [ not json").unwrap();
    let error = limits.reload().unwrap_err().to_string();
    assert!(error.contains("not a JSON Web Key Set"), "{error}");
    assert_eq!(
        status(at, Some(&token)).await,
        200,
        "the last good set stays"
    );

    // A set with only the EC key, saved while the service runs: RSA tokens stop verifying.
    let mut jwks: Value = serde_json::from_slice(&fixture("jwks.json")).unwrap();
    jwks["keys"] = json!([jwks["keys"][1].clone()]);
    std::fs::write(dir.path().join("jwks.json"), jwks.to_string()).unwrap();
    let other = signed(Algorithm::RS256, Some("rsa-1"), &claims("fresh"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(at, Some(&other)).await != 401 {
        assert!(Instant::now() < deadline, "the new key set never applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ec = signed(Algorithm::ES256, Some("ec-1"), &claims("gil"));
    assert_eq!(status(at, Some(&ec)).await, 200);
}

#[test]
fn bad_jwt_settings_are_refused_with_what_to_write() {
    let refused = |table: &str| {
        Limits::from_toml(&format!(
            "[identity.jwt]\n{table}\n[limits]\napi = \"1/s\"\n"
        ))
        .unwrap_err()
        .to_string()
    };
    assert!(refused("algorithms = [\"none\"]\nsecret_env = \"X\"").contains("never accepted"));
    assert!(refused("issuer = \"x\"").contains("exactly one of jwks_url, jwks_file or secret_env"));
    assert!(refused("secret_env = \"X\"\nleeway = \"forever\"").contains("leeway must be"));
    assert!(refused("secret_env = \"X\"\ntoken = \"query:t\"").contains("token must be"));
    let error = Limits::from_toml("[client]\nsources = [\"jwt:sub\"]\n[limits]\napi = \"1/s\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("[identity.jwt]"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetched_key_set_is_fetched_again_for_a_new_kid_at_most_every_30_s() {
    let full: Value = serde_json::from_slice(&fixture("jwks.json")).unwrap();
    let mut ec_only = full.clone();
    ec_only["keys"] = json!([full["keys"][1].clone()]);
    let repository = tollgate_testkit::repository::Repository::start(&ec_only.to_string());
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("limits.toml");
    std::fs::write(
        &main,
        format!(
            "[reload]\npoll_interval = \"1h\"\n[identity]\non_invalid = \"reject\"\n\
             [client]\nsources = [\"jwt:sub\", \"ip\"]\n\
             [identity.jwt]\njwks_url = \"{}\"\n[limits.api]\nrate = \"100/min\"\n",
            repository.url()
        ),
    )
    .unwrap();
    // Loading fetches (blocking): off the runtime's threads.
    let limits = std::thread::spawn(move || Limits::builder().watch([&main]).unwrap())
        .join()
        .unwrap();
    let at = app(limits).await;
    let ec = signed(Algorithm::ES256, Some("ec-1"), &claims("bob"));
    assert_eq!(status(at, Some(&ec)).await, 200);

    // The identity provider rotates an RSA key in; an hour's poll is far away.
    repository.publish(&full.to_string());
    let fetched = repository.served().requests;
    let rsa = signed(Algorithm::RS256, Some("rsa-1"), &claims("ada"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(at, Some(&rsa)).await != 200 {
        assert!(
            Instant::now() < deadline,
            "the unknown kid never fetched the set"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(repository.served().requests, fetched + 1, "one fetch");

    // Tokens naming kids nobody has cannot make it fetch again within 30 s.
    let fetched = repository.served().requests;
    for n in 0..20 {
        let stranger = signed(Algorithm::RS256, Some(&format!("rsa-{n}0")), &claims("eve"));
        assert_eq!(status(at, Some(&stranger)).await, 401);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(repository.served().requests, fetched);
}

#[test]
fn a_key_set_url_must_be_https_unless_it_is_on_this_host() {
    let error = Limits::from_toml(
        "[identity.jwt]\njwks_url = \"http://keys.example/jwks.json\"\n[limits]\napi = \"1/s\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("jwks_url must be https://"), "{error}");
}
