//! What verifying a request's credentials came to, kept in its extensions so a request is
//! verified once however many sources and key parts read it.

use std::borrow::Cow;
use std::sync::Arc;

use super::invalid::Invalid;

/// The claims of a verified token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claims(serde_json::Map<String, serde_json::Value>);

impl Claims {
    /// The claims of a token that verified.
    pub fn new(claims: serde_json::Map<String, serde_json::Value>) -> Claims {
        Claims(claims)
    }

    /// The token's `exp`, in Unix seconds.
    pub fn expires(&self) -> Option<u64> {
        let exp = self.0.get("exp")?;
        // A NumericDate may have a fraction (RFC 7519 §2): its whole seconds.
        exp.as_u64().or_else(|| {
            exp.as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(|x| x as u64)
        })
    }

    /// The claim `name` as key text: a string as it is, a number or boolean as written;
    /// `None` when absent, null, an object or a list.
    pub fn get(&self, name: &str) -> Option<Cow<'_, str>> {
        match self.0.get(name)? {
            serde_json::Value::String(text) => Some(Cow::Borrowed(text)),
            serde_json::Value::Number(number) => Some(Cow::Owned(number.to_string())),
            serde_json::Value::Bool(flag) => {
                Some(Cow::Borrowed(if *flag { "true" } else { "false" }))
            }
            _ => None,
        }
    }
}

/// What verifying a request's token came to: put in the request's extensions by the
/// layer, so a request is verified once however many sources and parts read its claims.
#[derive(Clone, Debug, PartialEq)]
pub enum Verified {
    /// No token was presented.
    Absent,
    /// A token that verified.
    Valid(Arc<Claims>),
    /// A token that did not.
    Invalid(Invalid),
}

impl Verified {
    /// The claims, if a token verified.
    pub fn claims(&self) -> Option<&Claims> {
        match self {
            Verified::Valid(claims) => Some(claims),
            _ => None,
        }
    }
}
