//! The Redis backend over TLS (`rediss://`, `[store.tls]`) against a real `redis-server`
//! serving TLS (`--tls-port`), with certificates the test makes: one budget shared over
//! TLS, a client certificate presented where the server requires one, and what is refused
//! — a server certificate from another CA or for another host, a missing client
//! certificate — decided as `on_backend_error` says, never an error to the caller.

use tollgate::Limits;
use tollgate::store::BackendStore;

use crate::support::certs::{Pair, Pki};
use crate::support::redis::{RedisOptions, RedisServer, RedisTlsOptions};

/// A redis-server serving TLS with `server`'s pair; client certificates from `pki`'s CA
/// required when `client_certs`.
fn tls_server(test: &str, pki: &Pki, server: &Pair, client_certs: bool) -> Option<RedisServer> {
    RedisServer::start_with(
        test,
        RedisOptions {
            tls: Some(RedisTlsOptions {
                cert: server.cert.clone(),
                key: server.key.clone(),
                ca: pki.ca.clone(),
                client_certs,
            }),
            ..RedisOptions::default()
        },
    )
}

/// A limiter on `url` with `tls` as its `[store.tls]` table, refusing when Redis cannot
/// answer (so a connection that fails shows as a refusal), one rule of 3 an hour.
fn limiter(url: &str, prefix: &str, tls: &str) -> Limits<BackendStore> {
    Limits::builder()
        .store(BackendStore::new())
        .from_toml(&format!(
            "[store]\nbackend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}:\"\n\
             on_backend_error = \"deny\"\ntimeout = \"500ms\"\n[store.tls]\n{tls}\n\
             [limits]\n\"/\" = \"3/h\"\n"
        ))
        .unwrap()
}

fn ca_line(pki: &Pki) -> String {
    format!("ca_file = \"{}\"\n", pki.ca.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_budget_over_tls_presenting_a_client_certificate() {
    let pki = Pki::new("redis");
    let server_pair = pki.server("redis");
    let Some(server) = tls_server(
        "two_instances_share_one_budget_over_tls",
        &pki,
        &server_pair,
        true,
    ) else {
        return;
    };
    let url = server.tls_url().unwrap();
    let client = pki.client("gateway", "gateway");
    let tls = format!(
        "{}cert_file = \"{}\"\nkey_file = \"{}\"\n",
        ca_line(&pki),
        client.cert.display(),
        client.key.display()
    );
    let (a, b) = (limiter(&url, "tls", &tls), limiter(&url, "tls", &tls));
    let mut admitted = 0;
    for limits in [&a, &b, &a, &b, &a] {
        if limits.check("x/203.0.113.7", 1).await.unwrap().allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "one budget of 3, shared over TLS");
    assert_eq!(
        server.command("EXISTS tls:{/203.0.113.7}c").as_deref(),
        Some(":1"),
        "the bucket is in Redis"
    );

    // Without a client certificate, the server refuses the handshake: decided as
    // on_backend_error says (deny), never an error.
    let bare = limiter(&url, "tls", &ca_line(&pki));
    let refused = bare.check("x/198.51.100.1", 1).await.unwrap();
    assert!(!refused.allowed());
    assert_eq!(
        server.command("EXISTS tls:{/198.51.100.1}c").as_deref(),
        Some(":0"),
        "nothing reached Redis without a client certificate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_or_for_another_host_is_refused_unless_told_not_to_check() {
    let ours = Pki::new("ours");
    let theirs = Pki::new("theirs");
    for (what, pki, pair) in [
        ("another CA", &theirs, theirs.server("foreign")),
        (
            "another host",
            &ours,
            ours.server_for("elsewhere", &["redis.example.net"]),
        ),
        ("expired", &ours, ours.expired_server("expired")),
    ] {
        let Some(server) = tls_server("a_certificate_from_another_ca", pki, &pair, false) else {
            return;
        };
        let url = server.tls_url().unwrap();
        let checked = limiter(&url, "refused", &ca_line(&ours));
        let decision = checked.check("x/203.0.113.9", 1).await.unwrap();
        assert!(
            !decision.allowed(),
            "{what}: refused, as on_backend_error = \"deny\""
        );
        assert_eq!(
            server.command("EXISTS refused:{/203.0.113.9}c").as_deref(),
            Some(":0"),
            "{what}: nothing was sent to a server whose certificate did not verify"
        );

        let unchecked = limiter(
            &url,
            "refused",
            "danger_accept_invalid_certificates = true\n",
        );
        let decision = unchecked.check("x/203.0.113.9", 1).await.unwrap();
        assert!(
            decision.allowed(),
            "{what}: accepted when told not to check"
        );
        assert_eq!(
            server.command("EXISTS refused:{/203.0.113.9}c").as_deref(),
            Some(":1")
        );
    }
}

#[test]
fn tls_settings_are_checked_where_they_are_written() {
    for (text, expected) in [
        (
            "[store]\nbackend = \"redis\"\nurl = \"rediss://cache:6380\"\n[store.tls]\ncert_file = \"c.pem\"\n",
            "<inline>:4:1: [store.tls] cert_file and key_file go together",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://cache:6379\"\n[store.tls]\nca_file = \"ca.pem\"\n",
            "<inline>:4:1: [store.tls] applies to rediss:// URLs",
        ),
        (
            "[store]\nbackend = \"redis\"\npassword_env = \"TOLLGATE_TEST_NO_SUCH_VARIABLE\"\n",
            "<inline>:3:16: password_env: the environment variable TOLLGATE_TEST_NO_SUCH_VARIABLE is not set",
        ),
        (
            "[store]\nbackend = \"redis\"\npassword_env = \"s3cret!\"\n",
            "<inline>:3:16: password_env names the environment variable holding it",
        ),
        (
            "[store]\nbackend = \"redis-sentinel\"\n",
            "<inline>:2:11: backend = \"redis-sentinel\" needs sentinels",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"rediss://10.0.0.5:6380\"\n[store.tls]\nserver_name = \"redis internal\"\n",
            "<inline>:5:15: server_name \"redis internal\" is not a DNS name",
        ),
    ] {
        let error = Limits::from_toml(text).unwrap_err().to_string();
        assert!(error.starts_with(expected), "{text}\n{error}");
    }
}

#[test]
fn a_password_written_in_the_url_works_but_is_shown_nowhere() {
    let limits = Limits::builder()
        .store(BackendStore::new())
        .from_toml("[store]\nbackend = \"redis\"\nurl = \"redis://app:hunter2@10.0.0.5:6379/0\"\n")
        .unwrap();
    let rules = limits.rules();
    let redis = &rules.store().redis;
    assert_eq!(redis.url, "redis://10.0.0.5:6379/0", "moved out of the URL");
    assert_eq!(redis.connection.username.as_deref(), Some("app"));
    assert_eq!(
        redis.connection.password.as_ref().map(|p| p.expose()),
        Some("hunter2")
    );
    let shown = format!("{:?} {:?}", rules.store(), limits.store());
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// A Redis whose certificate names a DNS host only, reached by address: verified against
/// `[store.tls] server_name` (and refused without it, or with another name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_a_dns_name_is_verified_against_server_name_when_reached_by_address() {
    let pki = Pki::new("named");
    let pair = pki.server_for("redis-internal", &["redis.internal"]);
    let Some(server) = tls_server("a_certificate_for_a_dns_name", &pki, &pair, true) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}", server.tls_port().unwrap());
    let client = pki.client("gateway", "gateway");
    let files = format!(
        "{}cert_file = \"{}\"\nkey_file = \"{}\"\n",
        ca_line(&pki),
        client.cert.display(),
        client.key.display()
    );
    for (name, admitted) in [
        (None, false),
        (Some("other.internal"), false),
        (Some("redis.internal"), true),
        (Some("REDIS.internal."), true),
    ] {
        let table = match name {
            Some(name) => format!("{files}server_name = \"{name}\"\n"),
            None => files.clone(),
        };
        let limits = limiter(&url, "named", &table);
        let decision = limits.check("x/203.0.113.1", 1).await.unwrap();
        assert_eq!(decision.allowed(), admitted, "server_name {name:?}");
    }
    assert_eq!(
        server.command("EXISTS named:{/203.0.113.1}c").as_deref(),
        Some(":1"),
        "decided in Redis"
    );
    let limits = limiter(
        &url,
        "named",
        &format!("{files}server_name = \"redis.internal\"\n"),
    );
    let mut admitted = 0;
    for _ in 0..3 {
        if limits.check("x/203.0.113.1", 1).await.unwrap().allowed() {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 1,
        "3 an hour, 2 spent over the named connections before"
    );
}
