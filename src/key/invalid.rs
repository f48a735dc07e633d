//! Credentials that fail: why (`Invalid`), and what is done about it (`OnInvalid`).

use std::fmt;

/// What to do with a credential that fails: `[identity] on_invalid`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnInvalid {
    /// As if it were absent: the next `[client] sources` entry decides (the default).
    #[default]
    Anonymous,
    /// Answer 401 with `WWW-Authenticate: Bearer error="invalid_token"`; nothing charged.
    Reject,
}

impl OnInvalid {
    /// As written in config: `anonymous` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnInvalid::Anonymous => "anonymous",
            OnInvalid::Reject => "reject",
        }
    }
}

impl fmt::Display for OnInvalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a presented credential was not believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Invalid {
    /// An API key no key table names.
    UnknownKey,
    /// A token that is not a JWT: bad base64 or JSON, too long, not three parts.
    Malformed,
    /// A token signed with an algorithm not accepted (`none` never is), or not of its
    /// key's family.
    Algorithm,
    /// A token whose `kid` names no key of the set.
    UnknownSigningKey,
    /// A token whose signature does not verify.
    Signature,
    /// A token past its `exp` (and the leeway).
    Expired,
    /// A token before its `nbf` (less the leeway).
    NotYetValid,
    /// A token from another issuer.
    Issuer,
    /// A token for another audience.
    Audience,
    /// A token without a claim it must carry (`exp`).
    MissingClaim,
}

impl Invalid {
    /// Every reason, for metrics made at 0.
    pub const ALL: [Invalid; 10] = [
        Invalid::UnknownKey,
        Invalid::Malformed,
        Invalid::Algorithm,
        Invalid::UnknownSigningKey,
        Invalid::Signature,
        Invalid::Expired,
        Invalid::NotYetValid,
        Invalid::Issuer,
        Invalid::Audience,
        Invalid::MissingClaim,
    ];

    /// The `reason` label of `tollgate_invalid_credentials_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Invalid::UnknownKey => "unknown key",
            Invalid::Malformed => "malformed",
            Invalid::Algorithm => "algorithm",
            Invalid::UnknownSigningKey => "unknown signing key",
            Invalid::Signature => "signature",
            Invalid::Expired => "expired",
            Invalid::NotYetValid => "not yet valid",
            Invalid::Issuer => "issuer",
            Invalid::Audience => "audience",
            Invalid::MissingClaim => "missing claim",
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}
