//! Plans: which plan a client is on, and so which of a rule's limits applies to it.
//!
//! A rule may carry limits per plan (`[limits."api".plans] pro = "1000/min"`); each plan's
//! variant of the rule shares the rule's buckets. Which plan a request's client is on comes
//! from, first found:
//!
//! 1. the application: a [`Plan`](crate::key::Plan) in the request's extensions;
//! 2. an authenticator in front: `[plans] header`, believed only when the request comes
//!    straight from one of `[client] trusted_proxies` (any other client could send it);
//! 3. membership: the tables of identity = "plan" that `[plans] members` names, files or
//!    URLs, read and reloaded with the rules;
//! 4. `[plans] default`.
//!
//! A plan a rule has no limits for (or no plan at all) gets the rule's own limit.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{HeaderName, Request};

use super::error::Diagnostic;
use super::members::{
    bad_plan_name, fingerprints, header_name, is_plan_name, member_sources, texts_of,
};
use super::raw::RawPlans;
use super::source::{ConfigSource, SourceText};
use crate::key::{
    ClientSettings, MAX_HEADER_IDENTITY, Plan, Presented, Verified, encode_segment,
    from_trusted_proxy,
};

/// The most bytes a membership file or document may hold: a million identities of
/// twenty-odd characters take about 30 MiB.
pub const MAX_MEMBERS_BYTES: u64 = 256 * 1024 * 1024;

/// `[plans]`, with the membership its sources held when the rules were compiled.
///
/// ```
/// let rules = tollgate::config::RuleSet::from_toml(
///     "[plans]\ndefault = \"free\"\nheader = \"x-plan\"\n",
/// )?;
/// assert_eq!(rules.plans().default_plan(), Some("free"));
/// assert_eq!(rules.plans().header().map(|h| h.as_str()), Some("x-plan"));
/// assert_eq!(rules.plans().members(), 0);
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Plans {
    default: Option<Arc<str>>,
    header: Option<HeaderName>,
    /// `[plans] claim`: the verified token's claim naming the plan.
    claim: Option<String>,
    /// The membership sources, resolved (relative paths against the file naming them).
    sources: Vec<ConfigSource>,
    members: Arc<Members>,
}

/// Where a request's plan came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanSource {
    /// The application's [`Plan`](crate::key::Plan) extension.
    Extension,
    /// `[plans] header`, from a trusted proxy.
    Header,
    /// A row of a `[plans] members` table.
    Members,
    /// `[plans] claim`: a claim of the verified token.
    Claim,
    /// The plan of the request's known API key (`[identity.api_keys]`).
    ApiKey,
    /// `[plans] default`.
    Default,
    /// Given by the caller (`TG.CHECK … PLAN`, a gRPC descriptor's `plan` entry).
    Caller,
}

impl fmt::Display for PlanSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanSource::Extension => "extension",
            PlanSource::Header => "header",
            PlanSource::Members => "members",
            PlanSource::Claim => "claim",
            PlanSource::ApiKey => "api_key",
            PlanSource::Default => "default",
            PlanSource::Caller => "caller",
        })
    }
}

/// Identity → plan, from the `[plans] members` sources (later sources override earlier).
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// Identity (as a key segment: percent-encoded, addresses canonical) → plan number.
    by_identity: HashMap<Box<str>, u16, foldhash::fast::RandomState>,
    /// Plan names, by number.
    names: Vec<Arc<str>>,
    /// The texts these were read from (source name, text length and hash), so that a
    /// reload of the rules alone reuses them rather than parsing a million rows again.
    read_from: Vec<(PathBuf, usize, u64)>,
}

impl Plans {
    /// `[plans] default`: the plan of a client nothing else names.
    pub fn default_plan(&self) -> Option<&str> {
        self.default.as_deref()
    }

    /// `[plans] claim`: the verified token's claim naming the plan.
    pub fn claim(&self) -> Option<&str> {
        self.claim.as_deref()
    }

    /// `[plans] header`.
    pub fn header(&self) -> Option<&HeaderName> {
        self.header.as_ref()
    }

    /// How many identities the membership sources name.
    pub fn members(&self) -> usize {
        self.members.by_identity.len()
    }

    /// About how many bytes the membership table holds in memory: its hash table and each
    /// identity's own allocation (rounded up to the allocator's 16-byte steps).
    pub fn members_memory(&self) -> usize {
        let members = &*self.members;
        let slots = members.by_identity.capacity() * (size_of::<(Box<str>, u16)>() + 1);
        let keys: usize = members
            .by_identity
            .keys()
            .map(|identity| identity.len().div_ceil(16) * 16)
            .sum();
        slots + keys
    }

    /// The plan membership puts `identity` (a key's client segment) on.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("plans.toml"), "\"user-42\" = \"pro\"\n\"198.51.100.7\" = \"enterprise\"\n")?;
    /// std::fs::write(dir.path().join("limits.toml"), "[plans]\nmembers = [\"plans.toml\"]\n[limits.api]\nrate = \"10/min\"\nplans.pro = \"1000/min\"\n")?;
    /// let limits = tollgate::Limits::load([dir.path().join("limits.toml")])?;
    /// let rules = limits.rules();
    /// assert_eq!(rules.plans().member_plan("user-42"), Some("pro"));
    /// assert_eq!(rules.plans().member_plan("user-7"), None);
    /// assert_eq!(rules.plans().members(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn member_plan(&self, identity: &str) -> Option<&str> {
        let members = &*self.members;
        let &number = members.by_identity.get(identity)?;
        members.names.get(usize::from(number)).map(|name| &**name)
    }

    /// The membership sources (`[plans] members`), relative paths resolved against the
    /// file that names them.
    pub fn member_sources(&self) -> impl Iterator<Item = &Path> {
        self.sources.iter().map(ConfigSource::name)
    }

    /// The plan of `request`, whose client's key segment `identity` gives (asked only if
    /// membership is consulted), and where it came from; `None`: no plan.
    pub(crate) fn choose<'a, B>(
        &'a self,
        request: &'a Request<B>,
        client: &ClientSettings,
        identity: impl FnOnce() -> Cow<'a, str>,
    ) -> Option<(Cow<'a, str>, PlanSource)> {
        if let Some(Plan(plan)) = request.extensions().get::<Plan>() {
            return Some((Cow::Borrowed(&**plan), PlanSource::Extension));
        }
        if let Some(claim) = &self.claim
            && let Some(Verified::Valid(claims)) = request.extensions().get::<Verified>()
            && let Some(plan) = claims.get(claim)
            && is_plan_name(&plan)
        {
            return Some((Cow::Owned(plan.into_owned()), PlanSource::Claim));
        }
        if let Some(keys) = &client.api_keys
            && keys.any_plan()
            && let Presented::Known(owner) = keys.presented(request)
            && let Some(plan) = &owner.plan
        {
            return Some((Cow::Owned(plan.to_string()), PlanSource::ApiKey));
        }
        if let Some(name) = &self.header
            && let Some(value) = request.headers().get(name)
            && let Ok(plan) = value.to_str()
            && is_plan_name(plan)
            && from_trusted_proxy(request, &client.trusted_proxies)
        {
            return Some((Cow::Borrowed(plan), PlanSource::Header));
        }
        self.for_identity(identity)
    }

    /// The plan membership or the default gives a client by its key segment.
    pub(crate) fn for_identity<'a>(
        &'a self,
        identity: impl FnOnce() -> Cow<'a, str>,
    ) -> Option<(Cow<'a, str>, PlanSource)> {
        if !self.members.by_identity.is_empty()
            && let Some(plan) = self.member_plan(&identity())
        {
            return Some((Cow::Borrowed(plan), PlanSource::Members));
        }
        self.default
            .as_deref()
            .map(|plan| (Cow::Borrowed(plan), PlanSource::Default))
    }

    /// Folds one file's `[plans]` over what earlier files set.
    pub(super) fn apply(
        &mut self,
        source: &SourceText,
        raw: &RawPlans,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        if let Some(default) = &raw.default {
            if is_plan_name(default.get_ref()) {
                self.default = Some(Arc::from(default.get_ref().as_str()));
            } else {
                diagnostics.push(source.at(default.span(), bad_plan_name(default.get_ref())));
            }
        }
        if let Some(claim) = &raw.claim {
            let name = claim.get_ref().trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                diagnostics.push(source.at(
                    claim.span(),
                    "claim must name a token claim, such as \"plan\"",
                ));
            } else {
                self.claim = Some(name.to_owned());
            }
        }
        if let Some(header) = &raw.header
            && let Some(name) = header_name(source, header, diagnostics)
        {
            self.header = Some(name);
        }
        if let Some(members) = &raw.members {
            self.sources = member_sources(source, members, diagnostics);
        }
    }

    /// Takes in the membership `texts` (the sources' texts, any order), reusing `previous`'s
    /// when every text is the same. Problems go to `diagnostics`, each at its row.
    pub(super) fn read_members(
        &mut self,
        texts: &[&SourceText],
        previous: Option<&Plans>,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let ordered = texts_of(&self.sources, texts, "[plans] members", diagnostics);
        let read_from = fingerprints(&ordered);
        if let Some(previous) = previous
            && previous.members.read_from == read_from
        {
            self.members = Arc::clone(&previous.members);
            return;
        }
        let mut members = Members {
            read_from,
            ..Members::default()
        };
        for text in ordered {
            members.read(text, diagnostics);
        }
        self.members = Arc::new(members);
    }
}

impl Members {
    /// Reads one membership table: `"identity" = "plan"` rows, later rows overriding.
    fn read(&mut self, source: &SourceText, diagnostics: &mut Vec<Diagnostic>) {
        let shape = "a membership table is rows of \"identity\" = \"plan\"";
        let Some(rows) = super::members::rows(source, shape, diagnostics) else {
            return;
        };
        self.by_identity.reserve(rows.len());
        let before = diagnostics.len();
        for (identity, plan) in &rows {
            let identity = identity.get_ref();
            let toml::de::DeValue::String(plan_name) = plan.get_ref() else {
                diagnostics.push(source.at(
                    plan.span(),
                    format!(
                        "the plan of \"{}\" must be a string such as \"pro\"",
                        identity.escape_debug()
                    ),
                ));
                continue;
            };
            let plan_name: &str = plan_name;
            if !is_plan_name(plan_name) {
                diagnostics.push(source.at(plan.span(), bad_plan_name(plan_name)));
                continue;
            }
            let Some(identity) = identity_segment(identity) else {
                diagnostics.push(source.at(
                    plan.span(),
                    format!(
                        "identity \"{}\" must be 1 to {MAX_HEADER_IDENTITY} bytes",
                        identity.escape_debug()
                    ),
                ));
                continue;
            };
            let number = match self.names.iter().position(|name| &**name == plan_name) {
                Some(number) => number,
                None => {
                    self.names.push(Arc::from(plan_name));
                    self.names.len() - 1
                }
            };
            let Ok(number) = u16::try_from(number) else {
                diagnostics.push(source.at(plan.span(), "more than 65,536 distinct plans"));
                return;
            };
            self.by_identity.insert(identity, number);
            // Errors are listed a screenful at a time, not a million.
            if diagnostics.len() - before >= 20 {
                return;
            }
        }
        self.by_identity.shrink_to_fit();
    }
}

/// The key segment a membership row's identity matches: an address in its canonical form,
/// anything else percent-encoded as a client segment is.
fn identity_segment(identity: &str) -> Option<Box<str>> {
    if identity.is_empty() || identity.len() > MAX_HEADER_IDENTITY {
        return None;
    }
    if let Ok(address) = identity.parse::<std::net::IpAddr>() {
        return Some(address.to_canonical().to_string().into_boxed_str());
    }
    Some(encode_segment(identity).into_owned().into_boxed_str())
}
