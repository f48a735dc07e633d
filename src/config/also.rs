//! Limits that compose (`[limits."KEY".also]`): named limits that apply to every request
//! under a rule's key, beside whichever rule is most specific.
//!
//! ```toml
//! [limits."/"]
//! rate = "100/min"                                    # per client
//! [limits."/".also]
//! everyone = { rate = "2000/s", per = "global" }      # one budget for all traffic
//! org = { rate = "10000/hour", per = "header:x-org" } # one budget per organisation
//!
//! [limits."api/search"]
//! rate = "10/s"                                       # "everyone" and "org" still apply
//! ```
//!
//! A request meets its most specific rule plus the `also` limits of every rule whose key
//! is a segment prefix of its key; it is admitted only if every one admits, and a refused
//! request charges none. Each `also` limit is a rule of its own in the rule set (named
//! `rule#name`, with buckets of its own, kept across reloads by the rule's key and its
//! name), reached through the rules it applies under ([`Rule::stack`]).
//!
//! ```
//! use tollgate::config::{AlsoBy, RuleSet};
//!
//! let rules = RuleSet::from_toml(
//!     "[limits.\"/\"]\nrate = \"100/min\"\n[limits.\"/\".also]\neveryone = { rate = \"2000/s\", per = \"global\" }\n\
//!      org = { rate = \"10000/hour\", per = \"header:x-org\" }\n\
//!      [limits.\"api/search\"]\nrate = \"10/s\"\n",
//! )?;
//! let search = rules.get("api/search").unwrap();
//! let met: Vec<&str> = rules.stack(search).map(|limit| limit.name()).collect();
//! assert_eq!(met, ["/#everyone", "/#org"]);
//! let org = rules.stack(search).nth(1).unwrap();
//! assert_eq!(org.also().unwrap().by().to_string(), "header:x-org");
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```
//!
//! [`Rule::stack`]: super::Rule::stack

use std::fmt;
use std::sync::Arc;

use crate::key::KeyPart;

/// Whose bucket an `also` limit keeps (`per`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlsoBy {
    /// `"client"`: one bucket per client, as a rule's (the default).
    Client,
    /// `"global"`: one bucket for every request under the rule's key.
    Global,
    /// A key part (`"host"`, `"method"`, `"header:NAME"`, `"query:NAME"`, `"cookie:NAME"`):
    /// one bucket per value, read from the request whether or not `[key] parts` names it;
    /// an absent value counts under `-`. Front ends without an HTTP request (RESP, gRPC)
    /// count such a limit per client.
    Part(KeyPart),
}

impl fmt::Display for AlsoBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlsoBy::Client => f.write_str("client"),
            AlsoBy::Global => f.write_str("global"),
            AlsoBy::Part(part) => write!(f, "{part}"),
        }
    }
}

impl std::str::FromStr for AlsoBy {
    type Err = String;

    fn from_str(text: &str) -> Result<AlsoBy, String> {
        match text.trim() {
            "client" => Ok(AlsoBy::Client),
            "global" => Ok(AlsoBy::Global),
            "" => Err("per is empty".into()),
            "route" => Err(
                "per = \"route\" is not a part a budget can be kept by (a rule's key is its route)"
                    .into(),
            ),
            other => match other.parse::<KeyPart>() {
                Ok(
                    part @ (KeyPart::Method
                    | KeyPart::Host
                    | KeyPart::Header(_)
                    | KeyPart::Query(_)
                    | KeyPart::Cookie(_)
                    | KeyPart::Json(_)
                    | KeyPart::Jwt(_)),
                ) => Ok(AlsoBy::Part(part)),
                Ok(_) | Err(_) => Err(format!(
                    "per = \"{other}\" must be \"client\", \"global\" or a key part: \"host\", \"method\", \"header:NAME\", \"query:NAME\", \"cookie:NAME\", \"json:/pointer\" or \"jwt:CLAIM\""
                )),
            },
        }
    }
}

/// What makes a rule an `also` limit: its name under the rule that carries it, whose
/// bucket it keeps, and whether the rate-limit headers show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlsoLimit {
    name: Arc<str>,
    by: AlsoBy,
    headers: bool,
}

impl AlsoLimit {
    pub(super) fn new(name: Arc<str>, by: AlsoBy, headers: bool) -> AlsoLimit {
        AlsoLimit { name, by, headers }
    }

    /// Its name under the rule that carries it (`everyone` of `/#everyone`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whose bucket it keeps.
    pub fn by(&self) -> &AlsoBy {
        &self.by
    }

    /// Whether `RateLimit`, `RateLimit-Policy` and the legacy headers show it (`headers =
    /// false`: enforced, never shown; a refusal by it still says `Retry-After`).
    pub fn in_headers(&self) -> bool {
        self.headers
    }
}

/// The most `also` limits one rule may carry: each costs every request under it one more
/// bucket update.
pub(crate) const MAX_ALSO: usize = 8;

/// Whether `name` can name an `also` limit: letters, digits, `_` and `-`, at most 64.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
