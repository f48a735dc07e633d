//! API keys the operator issued: `[identity.api_keys]`, a table of each key's SHA-256
//! digest → whose key it is (and optionally their plan).
//!
//! A key is never held in clear: the table names digests, and a presented key is hashed
//! and looked up. A known key makes the client the key's `id` (source `"api_key"` in
//! `[client] sources`); a key nobody issued is *invalid*, which `on_invalid` turns into
//! "as if absent" (the next source decides: an invented key lands in the address's budget)
//! or a 401.
//!
//! ```
//! use tollgate::key::ApiKeys;
//!
//! // What `tollgate api-key` prints for a new key, to paste into a key table.
//! let digest = ApiKeys::digest_hex(b"tg_live_3f9a7c");
//! assert_eq!(digest.len(), 64);
//! assert_eq!(ApiKeys::parse_digest(&digest), Some(ApiKeys::digest(b"tg_live_3f9a7c")));
//! ```

use std::collections::HashMap;

use http::{HeaderName, Request};

use sha2::{Digest as _, Sha256};

/// A key's SHA-256 digest.
pub type KeyDigest = [u8; 32];

/// Whose key a known API key is: a row of a key table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiKeyOwner {
    /// The identity requests with the key are counted under (one key segment).
    pub id: Box<str>,
    /// The plan the key's requests are on, if the table says.
    pub plan: Option<Box<str>>,
}

impl ApiKeyOwner {
    /// The owner `id`, on `plan`.
    pub fn new(id: impl Into<Box<str>>, plan: Option<Box<str>>) -> ApiKeyOwner {
        ApiKeyOwner {
            id: id.into(),
            plan,
        }
    }
}

/// The API keys issued: the header they come in and each key's owner, by digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeys {
    header: HeaderName,
    by_digest: HashMap<KeyDigest, ApiKeyOwner, foldhash::fast::FixedState>,
    any_plan: bool,
}

/// What a request presented as its API key.
#[derive(Debug, PartialEq, Eq)]
pub enum Presented<'k> {
    /// No key header (or an empty one).
    Absent,
    /// A key the tables name.
    Known(&'k ApiKeyOwner),
    /// A key nobody issued.
    Unknown,
}

impl ApiKeys {
    /// An empty table of keys read from `header`.
    pub fn new(header: HeaderName) -> ApiKeys {
        ApiKeys {
            header,
            by_digest: HashMap::default(),
            any_plan: false,
        }
    }

    /// Adds (or replaces) the key whose digest is `digest`.
    pub fn insert(&mut self, digest: KeyDigest, owner: ApiKeyOwner) {
        self.any_plan |= owner.plan.is_some();
        self.by_digest.insert(digest, owner);
    }

    /// Room for `more` keys.
    pub fn reserve(&mut self, more: usize) {
        self.by_digest.reserve(more);
    }

    /// The header keys are read from.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// How many keys the tables name.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether the tables name no key.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// Whether any key carries a plan.
    pub fn any_plan(&self) -> bool {
        self.any_plan
    }

    /// About how many bytes the table holds in memory.
    pub fn memory(&self) -> usize {
        let slots = self.by_digest.capacity() * (size_of::<(KeyDigest, ApiKeyOwner)>() + 1);
        let text: usize = self
            .by_digest
            .values()
            .map(|owner| owner.id.len() + owner.plan.as_ref().map_or(0, |plan| plan.len()))
            .sum();
        slots + text
    }

    /// The owner of the key `presented` (as sent, not its digest).
    pub fn owner(&self, presented: &[u8]) -> Option<&ApiKeyOwner> {
        self.by_digest.get(&ApiKeys::digest(presented))
    }

    /// What `request` presents in the key header: only its first copy is read.
    pub fn presented<B>(&self, request: &Request<B>) -> Presented<'_> {
        match request.headers().get(&self.header) {
            Some(value) if !value.is_empty() => match self.owner(value.as_bytes()) {
                Some(owner) => Presented::Known(owner),
                None => Presented::Unknown,
            },
            _ => Presented::Absent,
        }
    }

    /// The SHA-256 digest of `key`.
    pub fn digest(key: &[u8]) -> KeyDigest {
        Sha256::digest(key).into()
    }

    /// The digest of `key` as 64 lowercase hex digits, as key tables write it.
    pub fn digest_hex(key: &[u8]) -> String {
        use std::fmt::Write as _;
        let mut hex = String::with_capacity(64);
        for byte in ApiKeys::digest(key) {
            // Writing to a String cannot fail.
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    }

    /// A digest written as 64 hex digits (either case); `None` for anything else.
    pub fn parse_digest(text: &str) -> Option<KeyDigest> {
        let bytes = text.as_bytes();
        // from_str_radix alone would take a sign ("+f").
        if bytes.len() != 64 || !bytes.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut digest = [0u8; 32];
        for (out, pair) in digest.iter_mut().zip(bytes.chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *out = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> ApiKeys {
        let mut keys = ApiKeys::new(HeaderName::from_static("x-api-key"));
        keys.insert(
            ApiKeys::digest(b"secret-one"),
            ApiKeyOwner::new("team-a", Some("pro".into())),
        );
        keys
    }

    fn request(key: Option<&str>) -> Request<()> {
        let mut request = Request::builder();
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.body(()).unwrap()
    }

    #[test]
    fn a_known_key_names_its_owner_and_an_invented_one_is_unknown() {
        let keys = keys();
        match keys.presented(&request(Some("secret-one"))) {
            Presented::Known(owner) => {
                assert_eq!(&*owner.id, "team-a");
                assert_eq!(owner.plan.as_deref(), Some("pro"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            keys.presented(&request(Some("secret-two"))),
            Presented::Unknown
        );
        assert_eq!(keys.presented(&request(Some(""))), Presented::Absent);
        assert_eq!(keys.presented(&request(None)), Presented::Absent);
        assert!(keys.any_plan());
    }

    #[test]
    fn digests_are_sha256_and_parse_back_in_either_case() {
        // SHA-256("abc"), from FIPS 180-2's examples.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(ApiKeys::digest_hex(b"abc"), abc);
        assert_eq!(
            ApiKeys::parse_digest(&abc.to_uppercase()),
            Some(ApiKeys::digest(b"abc"))
        );
        let signed = format!("+f{}", &abc[2..]);
        for bad in [
            "",
            "ab",
            &abc[1..],
            &format!("{}zz", &abc[2..]),
            "é",
            &signed,
        ] {
            assert_eq!(ApiKeys::parse_digest(bad), None, "{bad}");
        }
    }
}
