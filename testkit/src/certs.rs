//! Certificates for the TLS tests, made on the spot with rcgen and written as PEM files to a
//! temporary directory: a CA, server certificates it signs (valid for `localhost` and
//! `127.0.0.1`, expired, or for another host), client certificates, and a foreign CA whose
//! certificates nobody trusts.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA and the files it signs, in a temporary directory removed on drop.
pub struct Pki {
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA's certificate, PEM.
    pub ca: PathBuf,
    dir: tempfile::TempDir,
}

impl Pki {
    /// A new CA called `name`.
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = dir.path().join(format!("{name}-ca.pem"));
        std::fs::write(&ca, issuer.pem()).unwrap();
        Pki {
            name: name.to_owned(),
            issuer,
            ca,
            dir,
        }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `localhost` and `127.0.0.1`, valid now.
    pub fn server(&self, file: &str) -> Pair {
        self.issue(
            file,
            &["localhost", "127.0.0.1"],
            Purpose::Server,
            Validity::Now,
        )
    }

    /// A server certificate for `hosts`.
    pub fn server_for(&self, file: &str, hosts: &[&str]) -> Pair {
        self.issue(file, hosts, Purpose::Server, Validity::Now)
    }

    /// A server certificate for `localhost` and `127.0.0.1` that expired yesterday.
    pub fn expired_server(&self, file: &str) -> Pair {
        self.issue(
            file,
            &["localhost", "127.0.0.1"],
            Purpose::Server,
            Validity::Expired,
        )
    }

    /// A certificate for `localhost` and `127.0.0.1` good for both ends of a connection, as
    /// Redis Cluster nodes present theirs to each other on the cluster bus.
    pub fn node(&self, file: &str) -> Pair {
        self.issue(
            file,
            &["localhost", "127.0.0.1"],
            Purpose::Both,
            Validity::Now,
        )
    }

    /// A certificate for `hosts` good for both ends of a connection (a Cluster node's, or
    /// a Sentinel set's, named by DNS only).
    pub fn node_for(&self, file: &str, hosts: &[&str]) -> Pair {
        self.issue(file, hosts, Purpose::Both, Validity::Now)
    }

    /// A client certificate for `name`.
    pub fn client(&self, file: &str, name: &str) -> Pair {
        self.issue(file, &[name], Purpose::Client, Validity::Now)
    }

    fn issue(&self, file: &str, names: &[&str], purpose: Purpose, validity: Validity) -> Pair {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("{} {}", self.name, names.first().map_or("", String::as_str)),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match purpose {
            Purpose::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Purpose::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Purpose::Both => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        let now = time::OffsetDateTime::now_utc();
        match validity {
            Validity::Now => {
                params.not_before = now - time::Duration::days(1);
                params.not_after = now + time::Duration::days(30);
            }
            Validity::Expired => {
                params.not_before = now - time::Duration::days(30);
                params.not_after = now - time::Duration::days(1);
            }
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pair = Pair {
            cert: self.dir.path().join(format!("{file}.pem")),
            key: self.dir.path().join(format!("{file}-key.pem")),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }
}

enum Purpose {
    Server,
    Client,
    Both,
}

enum Validity {
    Now,
    Expired,
}
