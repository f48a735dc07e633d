//! What a request's credentials come to, as `/explain` shows it: the client a verified
//! token or known API key makes, why a credential failed, and the token's claims the rules
//! use — never the token or key.

use serde_json::{Value, json};
use tollgate::config::RuleSet;
use tollgate::key::{Client, ClientSource, Invalid, Verified};

/// What an explained request's credentials came to.
pub(crate) struct Identity {
    /// The client a verified token or known API key makes (`None`: none did).
    pub(crate) client: Option<String>,
    /// Why a presented credential failed.
    invalid: Option<&'static str>,
    /// The verified token's claims that the rules use, with their values.
    claims: Vec<(String, Option<String>)>,
}

impl Identity {
    /// The identity the layer would find in `request` (verified by
    /// `Limits::verify_identity`) from its tokens and API keys alone — not from its
    /// address or plain headers.
    pub(crate) fn of(rules: &RuleSet, request: &http::Request<()>) -> Identity {
        let settings = rules.client_settings();
        let claims = match request.extensions().get::<Verified>() {
            Some(Verified::Valid(claims)) => rules
                .claims_used()
                .into_iter()
                .map(|claim| (claim.to_owned(), claims.get(claim).map(|v| v.into_owned())))
                .collect(),
            _ => Vec::new(),
        };
        // Only what a credential makes: the other sources are the caller's `client`.
        let mut credentials = settings.clone();
        credentials
            .sources
            .retain(|source| matches!(source, ClientSource::ApiKey | ClientSource::Jwt(_)));
        let (client, invalid) = Client::identify_checked(request, &credentials);
        let client = match client {
            Client::Key(key) => Some(key.into_owned()),
            _ => None,
        };
        Identity {
            client,
            invalid: invalid.map(Invalid::reason),
            claims,
        }
    }

    /// As `/explain` shows it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "client": self.client,
            "invalid": self.invalid,
            "claims": self
                .claims
                .iter()
                .map(|(claim, value)| json!({"claim": claim, "value": value}))
                .collect::<Vec<_>>(),
        })
    }
}
