//! Why a request gets the rule it gets: the prefixes tried, most general first (the
//! gateway's `/explain`).

use super::also::AlsoBy;
use super::plans::PlanSource;
use super::prefix::Segments;
use super::rule_set::RuleSet;
use crate::key::Client;

/// How a request key resolved, prefix by prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Explanation {
    /// The normalised route.
    pub route: String,
    /// The parts beside the route (`[key] parts`), each with its value, in key order;
    /// empty with the default parts.
    pub parts: Vec<PartValue>,
    /// The client segment.
    pub client: String,
    /// The request key, `route/client`.
    pub key: String,
    /// Each prefix looked up, most general first, and whether a rule is configured there.
    /// The walk stops at the first prefix that no rule starts with.
    pub tried: Vec<Step>,
    /// The rule that applies: the longest prefix with a rule.
    pub rule: Option<String>,
    /// What kind of bucket that rule keeps ([`Rule::kind`](super::Rule::kind)):
    /// `gcra, delayed up to 2s`, `sliding-log, strict`, `unlimited`.
    pub kind: Option<String>,
    /// The bucket the request would draw on (none for unlimited or unmatched requests).
    pub bucket: Option<String>,
    /// For a rule with limits per plan: the plan the client is on, if any.
    pub plan: Option<String>,
    /// Where that plan came from.
    pub plan_source: Option<PlanSource>,
    /// Whether the rule has a limit of its own for that plan (otherwise the rule's own
    /// limit applies).
    pub plan_limit: bool,
    /// The limit that applies, as written (`100/1m`; `unlimited`; several quotas joined
    /// by `, `).
    pub limit: Option<String>,
    /// The `also` limits the request meets beside its rule, root first.
    pub also: Vec<AlsoStep>,
}

/// One `also` limit a request meets, as [`RuleSet::explain`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlsoStep {
    /// Its name, `rule#name`.
    pub limit: String,
    /// Whose bucket (`client`, `global`, `header:x-org`…).
    pub per: String,
    /// Its rates, as written.
    pub rates: String,
    /// The bucket the request would draw on; for a limit kept per key part, the part in
    /// braces (`/#org/{header:x-org}`: explain has no request to read it from).
    pub bucket: String,
    /// Whether the rate-limit headers list it.
    pub shown: bool,
}

/// One part of a key beside the route, as [`RuleSet::explain`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartValue {
    /// The part, as `[key] parts` names it (`method`, `header:x-tenant`).
    pub part: String,
    /// Its segment in the key (`-` when the request did not have it).
    pub value: String,
}

/// One prefix [`RuleSet::explain`] looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// The prefix (`/` for the root).
    pub prefix: String,
    /// Whether a rule is configured at exactly this prefix.
    pub has_rule: bool,
}

impl RuleSet {
    /// How `route` (normalised) and `client` resolve, prefix by prefix: what the gateway's
    /// `/explain` shows. With `[key] parts`, `route` is the key up to its client, parts
    /// included ([`KeyParts::match_path`](crate::key::KeyParts::match_path)), and the
    /// explanation names each part's value:
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// let limits = Limits::from_toml(
    ///     "[key]\nparts = [\"method\", \"route\", \"client\"]\n[limits]\n\"POST/orders\" = \"5/min\"\n",
    /// )?;
    /// let why = limits.rules().explain("POST/orders/42", "203.0.113.7");
    /// assert_eq!(why.rule.as_deref(), Some("POST/orders"));
    /// assert_eq!((why.parts[0].part.as_str(), why.parts[0].value.as_str()), ("method", "POST"));
    /// assert_eq!(why.route, "orders/42");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"9/s\"\napi = \"5/s\"\n")?;
    /// let why = limits.rules().explain("api/search", "203.0.113.7");
    /// assert_eq!(why.rule.as_deref(), Some("api"));
    /// assert_eq!(why.kind.as_deref(), Some("gcra"));
    /// let tried: Vec<_> = why.tried.iter().map(|s| (s.prefix.as_str(), s.has_rule)).collect();
    /// assert_eq!(tried, [("/", true), ("api", true), ("api/search", false)]);
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn explain(&self, route: &str, client: &str) -> Explanation {
        self.explain_as(route, client, None)
    }

    /// [`explain`](Self::explain) for a request whose plan is `plan` (as the application's
    /// [`Plan`](crate::key::Plan) or a trusted plan header would say); `None`: the plan
    /// membership or `[plans] default` gives.
    ///
    /// ```
    /// use tollgate::config::PlanSource;
    ///
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[plans]\ndefault = \"free\"\n[limits.api]\nrate = \"100/min\"\nplans = { free = \"10/min\", pro = \"1000/min\" }\n",
    /// )?;
    /// let why = rules.explain("api", "203.0.113.7");
    /// assert_eq!((why.plan.as_deref(), why.plan_source), (Some("free"), Some(PlanSource::Default)));
    /// assert_eq!(why.limit.as_deref(), Some("10/1m"));
    /// let why = rules.explain_as("api", "203.0.113.7", Some("gold"));
    /// assert_eq!((why.plan.as_deref(), why.plan_limit), (Some("gold"), false));
    /// assert_eq!(why.limit.as_deref(), Some("100/1m"), "no gold entry: the rule's own");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn explain_as(&self, route: &str, client: &str, plan: Option<&str>) -> Explanation {
        let key = if route.is_empty() {
            client.to_owned()
        } else {
            format!("{route}/{client}")
        };
        let segments: Vec<&str> = Segments(route).chain(std::iter::once(client)).collect();
        let found = self.table().trace(
            segments.iter().copied(),
            self.route_settings().case_insensitive,
        );
        let mut prefix = String::new();
        let mut tried = Vec::with_capacity(found.len());
        for (depth, has_rule) in found.into_iter().enumerate() {
            if let Some(segment) = depth.checked_sub(1).and_then(|i| segments.get(i)) {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(segment);
            }
            tried.push(Step {
                prefix: if depth == 0 {
                    "/".into()
                } else {
                    prefix.clone()
                },
                has_rule,
            });
        }
        let mut rule = self.resolve(route, client);
        let mut chosen = None;
        if let Some(base) = rule.filter(|r| r.has_plans()) {
            chosen = match plan {
                Some(plan) => Some((plan.to_owned(), PlanSource::Caller)),
                None => self
                    .plans()
                    .for_identity(|| client.into())
                    .map(|(plan, source)| (plan.into_owned(), source)),
            };
            if let Some(variant) = chosen
                .as_ref()
                .and_then(|(plan, _)| self.plan_variant(base, plan))
            {
                rule = Some(variant);
            }
        }
        let (parts, bare_route) = match self.route_settings().parts.split(route) {
            Some((parts, bare)) => (
                parts
                    .into_iter()
                    .map(|(part, value)| PartValue {
                        part,
                        value: value.to_owned(),
                    })
                    .collect(),
                bare,
            ),
            None => (Vec::new(), route),
        };
        let client_of = Client::from_segment(client);
        let also = rule
            .filter(|r| !r.is_unlimited())
            .map(|r| {
                self.stack(r)
                    .filter_map(|limit| {
                        let entry = limit.also()?;
                        Some(AlsoStep {
                            limit: limit.name().to_owned(),
                            per: entry.by().to_string(),
                            rates: limit
                                .quotas()
                                .iter()
                                .map(|q| q.rate().to_string())
                                .collect::<Vec<_>>()
                                .join(", "),
                            bucket: match entry.by() {
                                AlsoBy::Part(part) => format!("{}/{{{part}}}", limit.name()),
                                _ => limit.bucket_key(&client_of),
                            },
                            shown: entry.in_headers(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Explanation {
            also,
            route: bare_route.to_owned(),
            parts,
            client: client.to_owned(),
            key,
            tried,
            rule: rule.map(|r| r.name().to_owned()),
            kind: rule.map(|r| r.kind()),
            bucket: rule
                .filter(|r| !r.is_unlimited())
                .map(|r| r.bucket_key(&Client::from_segment(client))),
            plan_limit: rule.is_some_and(|r| r.plan().is_some()),
            plan_source: chosen.as_ref().map(|(_, source)| *source),
            plan: chosen.map(|(plan, _)| plan),
            limit: rule.map(|r| {
                if r.is_unlimited() {
                    "unlimited".to_owned()
                } else {
                    let rates: Vec<String> =
                        r.quotas().iter().map(|q| q.rate().to_string()).collect();
                    rates.join(", ")
                }
            }),
        }
    }
}
