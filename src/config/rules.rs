//! Validated, compiled rules: parse → validate → compile, once per load (STYLE habit 5).
//!
//! [`RuleSet`] is immutable. Finding a request's rule walks a segment trie: one hash probe
//! per route segment plus at most one for the client, however many rules there are.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::num::NonZeroU32;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{HeaderName, HeaderValue, StatusCode};
use ipnet::IpNet;
use toml::Spanned;

use super::error::{Diagnostic, Source};
use super::rate::Rate;
use super::raw::{OneOrMany, Per, RawFile, RawRule};
use super::store::StoreSettings;
use crate::Quota;
use crate::key::{ClientSettings, ClientSource, RouteSettings, TrustedProxies, normalize_route};
use crate::response::{BodyTemplate, ResponseSettings};
use crate::store::RuleId;

/// The whole active configuration: rules, and how keys and responses are made.
///
/// ```
/// use tollgate::Limits;
///
/// let limits = Limits::from_toml(r#"
///     [limits]
///     "/" = "20/s"
///     "api" = "100/min"
///     "api/search/192.168.11.3" = { rate = "100/s", burst = 500 }
/// "#)?;
/// let rules = limits.rules();
/// assert_eq!(rules.resolve("api/search", "203.0.113.7").unwrap().name(), "api");
/// assert_eq!(rules.resolve("api/search", "192.168.11.3").unwrap().name(), "api/search/192.168.11.3");
/// assert_eq!(rules.resolve("apiv2/search", "203.0.113.7").unwrap().name(), "/");
/// # Ok::<(), tollgate::config::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    table: PrefixTable,
    route: RouteSettings,
    client: ClientSettings,
    response: Arc<ResponseSettings>,
    gateway: GatewaySettings,
    store: StoreSettings,
    files: Vec<PathBuf>,
    /// The next unused rule id: ids are never reused, so a rule removed and later restored
    /// starts with fresh buckets.
    next_id: u32,
    /// 1 for the first set, +1 for each set compiled to replace another. Part of the set
    /// itself, so whoever sees these rules sees their generation: no reader can catch a
    /// new set under an old number.
    generation: u64,
}

/// One validated rule.
#[derive(Debug)]
pub struct Rule {
    key: String,
    name: Arc<str>,
    id: RuleId,
    limit: Limit,
    origin: Origin,
    policy_name: String,
    policies: Vec<HeaderValue>,
    /// `None` for unlimited rules, which count nothing.
    counters: Option<RuleCounters>,
}

/// Handles to the rule's request counters, made once when the rule is compiled so that
/// counting a request is an atomic add (no label strings built per request). They bind to
/// the `metrics` recorder installed at that moment; without one they are no-ops.
#[derive(Clone)]
pub(crate) struct RuleCounters {
    pub(crate) allowed: metrics::Counter,
    pub(crate) limited: metrics::Counter,
    pub(crate) shadow_limited: metrics::Counter,
}

impl RuleCounters {
    fn new(name: &str) -> RuleCounters {
        let name: Arc<str> = Arc::from(name);
        RuleCounters {
            allowed: metrics::counter!("tollgate_requests_total", "rule" => Arc::clone(&name), "outcome" => "allowed"),
            limited: metrics::counter!("tollgate_requests_total", "rule" => Arc::clone(&name), "outcome" => "limited"),
            shadow_limited: metrics::counter!("tollgate_requests_total", "rule" => name, "outcome" => "shadow_limited"),
        }
    }
}

impl fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuleCounters")
    }
}

/// The `[gateway]` table: what the example gateway listens on and proxies to. Read at
/// start-up (a running gateway does not move its listeners); the gateway's flags win.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewaySettings {
    /// `listen`: the proxy's address.
    pub listen: Option<std::net::SocketAddr>,
    /// `upstream`: the `http://` URL requests are proxied to.
    pub upstream: Option<http::Uri>,
    /// `admin`: the admin listener's address.
    pub admin: Option<std::net::SocketAddr>,
    /// `upstream_timeout`: how long to wait for the upstream's response headers.
    pub upstream_timeout: Option<std::time::Duration>,
    /// `admin_token`: a bearer token the admin listener requires.
    pub admin_token: Option<String>,
}

/// How a request key resolved, prefix by prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Explanation {
    /// The normalised route.
    pub route: String,
    /// The client segment.
    pub client: String,
    /// The request key, `route/client`.
    pub key: String,
    /// Each prefix looked up, most general first, and whether a rule is configured there.
    /// The walk stops at the first prefix that no rule starts with.
    pub tried: Vec<Step>,
    /// The rule that applies: the longest prefix with a rule.
    pub rule: Option<String>,
    /// The bucket the request would draw on (none for unlimited or unmatched requests).
    pub bucket: Option<String>,
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

/// What a rule does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// `unlimited = true`: no bucket, no headers.
    Unlimited,
    /// A bucket per client (or one global bucket) with one or more quotas.
    Limited {
        /// Every quota must admit a request.
        quotas: Vec<Quota>,
        /// Tokens each request takes.
        cost: u64,
        /// Per client, or one bucket for everyone.
        per: Per,
        /// How the quotas count.
        algorithm: crate::Algorithm,
        /// Refused requests hold the refill back (GCRA only).
        strict: bool,
        /// Measure and report, never refuse.
        shadow: bool,
        /// Only responses with these statuses take tokens; `None`: every request does.
        count_status: Option<StatusSet>,
    },
}

/// The statuses a `count_status` rule charges for: exact codes and classes (`"5xx"`).
///
/// ```
/// use http::StatusCode;
/// use tollgate::config::StatusSet;
///
/// let set = StatusSet::new([401, 403], ['5']);
/// assert!(set.contains(StatusCode::UNAUTHORIZED));
/// assert!(set.contains(StatusCode::BAD_GATEWAY));
/// assert!(!set.contains(StatusCode::OK));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet {
    codes: Vec<u16>,
    classes: Vec<char>,
}

impl StatusSet {
    /// Exact `codes` and whole `classes` (`'5'` for every 5xx).
    pub fn new(
        codes: impl IntoIterator<Item = u16>,
        classes: impl IntoIterator<Item = char>,
    ) -> StatusSet {
        StatusSet {
            codes: codes.into_iter().collect(),
            classes: classes.into_iter().collect(),
        }
    }

    /// Whether responses with `status` take tokens.
    pub fn contains(&self, status: http::StatusCode) -> bool {
        let code = status.as_u16();
        self.codes.contains(&code)
            || self
                .classes
                .iter()
                .any(|&class| class.to_digit(10) == Some(u32::from(code / 100)))
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .codes
            .iter()
            .map(ToString::to_string)
            .chain(self.classes.iter().map(|c| format!("{c}xx")))
            .collect();
        f.write_str(&items.join(", "))
    }
}

impl Limit {
    /// What kind of bucket the rule keeps: none, per client, or global.
    fn bucket_kind(&self) -> Option<Per> {
        match self {
            Limit::Unlimited => None,
            Limit::Limited { per, .. } => Some(*per),
        }
    }
}

/// Where a rule was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// 1-based line of the rule's key.
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

impl Rule {
    /// The normalised key (`""` for the root rule).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key as shown to people and in `RateLimit-Policy`: `"/"` for the root rule.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// The id its buckets are stored under.
    pub fn id(&self) -> RuleId {
        self.id
    }

    /// What it limits.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// Where it was written (the last file that set it, for layered configs).
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The rule's name as a structured-field string, for the `RateLimit` header.
    pub(crate) fn policy_name(&self) -> &str {
        &self.policy_name
    }

    /// The key a bucket of this rule is listed under: `login/203.0.113.7`, the client alone
    /// under the root rule, or the rule's name for its one global bucket.
    pub fn bucket_key(&self, client: &crate::key::Client<'_>) -> String {
        let mut key = String::new();
        self.write_bucket_key(&mut key, client);
        key
    }

    pub(crate) fn write_bucket_key(&self, out: &mut String, client: &crate::key::Client<'_>) {
        use std::fmt::Write as _;
        match &self.limit {
            Limit::Limited {
                per: Per::Global, ..
            } => out.push_str(&self.name),
            _ if self.key.is_empty() => {
                let _ = write!(out, "{client}");
            }
            _ => {
                let _ = write!(out, "{}/{client}", self.key);
            }
        }
    }

    /// Tokens a request takes under this rule (0 for unlimited rules).
    pub fn cost(&self) -> u64 {
        match &self.limit {
            Limit::Limited { cost, .. } => *cost,
            Limit::Unlimited => 0,
        }
    }

    /// Whether the rule only measures (`shadow = true`).
    pub fn is_shadow(&self) -> bool {
        matches!(self.limit, Limit::Limited { shadow: true, .. })
    }

    /// The statuses that take tokens, for `count_status` rules.
    pub fn count_status(&self) -> Option<&StatusSet> {
        match &self.limit {
            Limit::Limited { count_status, .. } => count_status.as_ref(),
            Limit::Unlimited => None,
        }
    }

    /// The rule's request counters (limited rules only).
    pub(crate) fn counters(&self) -> Option<&RuleCounters> {
        self.counters.as_ref()
    }

    /// The precomputed `RateLimit-Policy` value for quota `index`.
    pub(crate) fn policy(&self, index: usize) -> Option<&HeaderValue> {
        self.policies.get(index)
    }
}

impl RuleSet {
    /// Parses, validates and compiles config text into a rule set, without a store, a
    /// clock or a sweeper: for checking config in tooling (errors name the file
    /// `<inline>`). [`Limits::from_toml`](crate::Limits::from_toml) does this and starts
    /// limiting.
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    ///
    /// let rules = RuleSet::from_toml("[limits]\napi = \"10/s\"\n")?;
    /// assert_eq!(rules.resolve("api/search", "192.0.2.1").unwrap().key(), "api");
    ///
    /// let error = RuleSet::from_toml("[limits]\napi = \"ten a second\"\n").unwrap_err();
    /// assert!(error.to_string().contains("<inline>:2"));
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn from_toml(text: &str) -> Result<RuleSet, super::ConfigError> {
        RuleSet::compile(&[Source::new(inline_path(), text)], None)
            .map_err(super::ConfigError::Invalid)
    }

    /// The rule whose key is the longest segment prefix of `route "/" client`, if any.
    ///
    /// `route` must already be normalised (see [`normalize_route`]).
    pub fn resolve(&self, route: &str, client: &str) -> Option<&Rule> {
        self.resolve_with(route, || client.into())
            .and_then(|index| self.rules.get(index))
    }

    /// As [`resolve`](Self::resolve), asking for the client segment only if some rule could
    /// name a client at this route.
    pub(crate) fn resolve_with<'c>(
        &self,
        route: &str,
        client: impl FnOnce() -> std::borrow::Cow<'c, str>,
    ) -> Option<usize> {
        self.table
            .longest_prefix(route, client, self.route.case_insensitive)
    }

    /// The rule at `index` from [`resolve_with`](Self::resolve_with).
    pub(crate) fn rule(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index)
    }

    /// How `route` (normalised) and `client` resolve, prefix by prefix: what the gateway's
    /// `/explain` shows.
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"9/s\"\napi = \"5/s\"\n")?;
    /// let why = limits.rules().explain("api/search", "203.0.113.7");
    /// assert_eq!(why.rule.as_deref(), Some("api"));
    /// let tried: Vec<_> = why.tried.iter().map(|s| (s.prefix.as_str(), s.has_rule)).collect();
    /// assert_eq!(tried, [("/", true), ("api", true), ("api/search", false)]);
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn explain(&self, route: &str, client: &str) -> Explanation {
        let key = if route.is_empty() {
            client.to_owned()
        } else {
            format!("{route}/{client}")
        };
        let mut tried = Vec::new();
        let mut node = self.table.nodes.first();
        let mut prefix = String::new();
        tried.push(Step {
            prefix: "/".into(),
            has_rule: node.is_some_and(|n| n.rule.is_some()),
        });
        let segments = Segments(route).chain(std::iter::once(client));
        for segment in segments {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(segment);
            let lookup = if self.route.case_insensitive {
                segment.to_lowercase()
            } else {
                segment.to_owned()
            };
            node = node
                .and_then(|n| n.children.get(lookup.as_str()))
                .and_then(|&i| self.table.nodes.get(i));
            tried.push(Step {
                prefix: prefix.clone(),
                has_rule: node.is_some_and(|n| n.rule.is_some()),
            });
            if node.is_none() {
                break;
            }
        }
        let rule = self.resolve(route, client);
        Explanation {
            route: route.to_owned(),
            client: client.to_owned(),
            key,
            tried,
            rule: rule.map(|r| r.name().to_owned()),
            bucket: rule
                .filter(|r| matches!(r.limit(), Limit::Limited { .. }))
                .map(|r| r.bucket_key(&crate::key::Client::from_segment(client))),
        }
    }

    /// All rules, sorted by key.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// How paths become routes.
    pub fn route_settings(&self) -> &RouteSettings {
        &self.route
    }

    /// How clients are identified.
    pub fn client_settings(&self) -> &ClientSettings {
        &self.client
    }

    /// What a denial looks like.
    pub fn response(&self) -> &Arc<ResponseSettings> {
        &self.response
    }

    /// The `[gateway]` table.
    pub fn gateway(&self) -> &GatewaySettings {
        &self.gateway
    }

    /// The `[store]` table.
    pub fn store(&self) -> &StoreSettings {
        &self.store
    }

    /// Which applied set this is: 1 after the initial load, +1 per applied reload.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The files this set was loaded from, in order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The rule with normalised key `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Rule> {
        self.rules
            .binary_search_by(|rule| rule.key.as_str().cmp(key))
            .ok()
            .and_then(|index| self.rules.get(index))
    }

    /// Ids of `previous`'s rules whose buckets this set no longer uses (removed rules, and
    /// rules whose kind of bucket changed).
    pub(crate) fn retired_since(&self, previous: &RuleSet) -> Vec<RuleId> {
        previous
            .rules
            .iter()
            .filter(|old| self.get(&old.key).is_none_or(|new| new.id != old.id))
            .map(|old| old.id)
            .collect()
    }

    /// Validates and compiles `sources`, later files overriding earlier ones rule by rule
    /// and setting by setting.
    ///
    /// Rules that `previous` also had, with the same kind of bucket (per client, global, or
    /// none), keep their ids and so their buckets; changed numbers are carried over by the
    /// store. New rules get ids never used before.
    pub(crate) fn compile(
        sources: &[Source],
        previous: Option<&RuleSet>,
    ) -> Result<RuleSet, Vec<Diagnostic>> {
        let mut diagnostics = Vec::new();
        let mut parsed = Vec::new();
        for source in sources {
            // Refused rather than read as "no rules": an empty file is far more often a save
            // caught half-way, or a truncated deploy, than a wish to lift every limit.
            if source.text.trim().is_empty() {
                diagnostics.push(source.at(
                    0..0,
                    "file is empty (a save caught half-way?); write a comment in it if an empty file is intended",
                ));
                continue;
            }
            match toml::from_str::<RawFile>(&source.text) {
                Ok(raw) => parsed.push((source, raw)),
                Err(error) => diagnostics
                    .push(source.at(error.span().unwrap_or(0..0), error.message().trim_end())),
            }
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }

        let mut settings = Settings::default();
        for (source, raw) in &parsed {
            settings.apply(source, raw, &mut diagnostics);
        }

        // Rules: normalise with the final [key] settings, later files replacing earlier.
        let mut chosen: BTreeMap<String, (&Source, &Spanned<String>, &Spanned<RawRule>)> =
            BTreeMap::new();
        for (source, raw) in &parsed {
            let mut seen: HashMap<String, Range<usize>> = HashMap::new();
            for (key, rule) in &raw.limits {
                let normalised = normalize_rule_key(key.get_ref(), &settings.route);
                if let Some(first) = seen.get(&normalised) {
                    let first = source.at(first.clone(), "");
                    diagnostics.push(source.at(
                        key.span(),
                        format!(
                            "rule \"{}\" normalises to \"{}\", the same key as the rule on line {}",
                            key.get_ref(),
                            display_name(&normalised),
                            first.line
                        ),
                    ));
                    continue;
                }
                seen.insert(normalised.clone(), key.span());
                let depth = normalised.split('/').filter(|s| !s.is_empty()).count();
                if depth > settings.route.max_depth + 1 {
                    diagnostics.push(source.at(
                        key.span(),
                        format!(
                            "rule \"{}\" has {depth} segments but routes are cut at [key] max_depth = {}, so it can never match",
                            key.get_ref(),
                            settings.route.max_depth
                        ),
                    ));
                    continue;
                }
                chosen.insert(normalised, (source, key, rule));
            }
        }

        let mut rules = Vec::with_capacity(chosen.len());
        let mut next_id = previous.map_or(0, |set| set.next_id);
        for (key, (source, raw_key, rule)) in chosen {
            let Some(limit) = compile_limit(source, raw_key, rule, &mut diagnostics) else {
                continue;
            };
            let inherited = previous
                .and_then(|set| set.get(&key))
                .filter(|old| old.limit.bucket_kind() == limit.bucket_kind())
                .map(|old| old.id);
            let id = inherited.unwrap_or_else(|| {
                let id = RuleId::new(next_id);
                next_id = next_id.saturating_add(1);
                id
            });
            let origin = source.at(raw_key.span(), "");
            rules.push(Rule::new(
                key,
                id,
                limit,
                Origin {
                    file: origin.file,
                    line: origin.line,
                },
            ));
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        let table = PrefixTable::build(&rules);
        Ok(RuleSet {
            rules,
            table,
            route: settings.route,
            client: settings.client,
            response: Arc::new(settings.response),
            gateway: settings.gateway,
            store: settings.store,
            files: sources.iter().map(|s| s.path.clone()).collect(),
            next_id,
            generation: previous.map_or(1, |set| set.generation + 1),
        })
    }
}

impl Rule {
    fn new(key: String, id: RuleId, limit: Limit, origin: Origin) -> Rule {
        let name: Arc<str> = Arc::from(display_name(&key));
        let policy_name = structured_string(&name);
        let policies = match &limit {
            Limit::Unlimited => Vec::new(),
            Limit::Limited { quotas, .. } => quotas
                .iter()
                .filter_map(|quota| {
                    let window = crate::decision::ceil_secs(quota.window()).max(1);
                    let text = format!("{policy_name};q={};w={window}", quota.burst());
                    HeaderValue::from_str(&text).ok()
                })
                .collect(),
        };
        let counters = matches!(limit, Limit::Limited { .. }).then(|| RuleCounters::new(&name));
        Rule {
            key,
            name,
            id,
            limit,
            origin,
            policy_name,
            policies,
            counters,
        }
    }
}

/// The root rule is shown as `/`.
fn display_name(key: &str) -> &str {
    if key.is_empty() { "/" } else { key }
}

/// `name` as an RFC 8941 string: quoted, `"` and `\` escaped, bytes outside printable
/// ASCII percent-encoded so the header stays valid.
fn structured_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for byte in name.bytes() {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out.push('"');
    out
}

/// Rule keys are normalised like request paths, but never cut (a too-deep key is an error).
fn normalize_rule_key(key: &str, route: &RouteSettings) -> String {
    let uncapped = RouteSettings {
        max_depth: usize::MAX,
        ..route.clone()
    };
    normalize_route(key, &uncapped).into_owned()
}

fn compile_limit(
    source: &Source,
    key: &Spanned<String>,
    rule: &Spanned<RawRule>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Limit> {
    let before = diagnostics.len();
    let rule_span = rule.span();
    let name = key.get_ref();
    let raw = rule.get_ref();
    if raw.unlimited.as_ref().is_some_and(|u| *u.get_ref()) {
        let others = raw.rate.is_some()
            || raw.burst.is_some()
            || raw.cost.is_some()
            || raw.strict.is_some()
            || raw.shadow.is_some()
            || raw.algorithm.is_some()
            || raw.count_status.is_some();
        if others {
            diagnostics.push(source.at(
                rule_span,
                format!(
                    "rule \"{name}\" is unlimited and cannot also set a rate or how it is counted"
                ),
            ));
            return None;
        }
        return Some(Limit::Unlimited);
    }
    let algorithm = raw
        .algorithm
        .as_ref()
        .map_or(crate::Algorithm::Gcra, |a| *a.get_ref());
    if algorithm != crate::Algorithm::Gcra {
        if let Some(burst) = &raw.burst {
            diagnostics.push(source.at(
                burst.span(),
                format!("burst applies to algorithm = \"gcra\"; a {algorithm} allows each rate's count per period"),
            ));
        }
        if let Some(strict) = raw.strict.as_ref().filter(|s| *s.get_ref()) {
            diagnostics.push(source.at(
                strict.span(),
                format!("strict applies to algorithm = \"gcra\": a {algorithm} has no refill to hold back"),
            ));
        }
    }
    let count_status = raw
        .count_status
        .as_ref()
        .map(|list| compile_statuses(source, list, diagnostics));
    let Some(rate_field) = &raw.rate else {
        diagnostics.push(source.at(
            rule_span,
            format!("rule \"{name}\" needs a rate such as \"100/min\" (or unlimited = true)"),
        ));
        return None;
    };
    let span_of = |span: &Option<Range<usize>>, field: Range<usize>| -> Range<usize> {
        match span {
            Some(span) => span.clone(),
            None if field.is_empty() => rule_span.clone(),
            None => field,
        }
    };
    let mut rates = Vec::new();
    for (text, span) in &rate_field.get_ref().0 {
        match text.parse::<Rate>() {
            Ok(rate) => rates.push((rate, span_of(span, rate_field.span()))),
            Err(error) => {
                diagnostics.push(source.at(span_of(span, rate_field.span()), error.to_string()))
            }
        }
    }
    if rate_field.get_ref().0.is_empty() {
        diagnostics.push(source.at(rate_field.span(), "rate list is empty"));
    }

    let bursts: Vec<(i64, Range<usize>)> = match &raw.burst {
        None => rates
            .iter()
            .map(|(rate, span)| (i64::from(rate.count()), span.clone()))
            .collect(),
        Some(field) => {
            let OneOrMany(items) = field.get_ref();
            if items.len() != rate_field.get_ref().0.len() {
                diagnostics.push(source.at(
                    field.span(),
                    format!(
                        "rule \"{name}\" has {} rate(s) but {} burst value(s); give one burst per rate, or none",
                        rate_field.get_ref().0.len(),
                        items.len()
                    ),
                ));
                Vec::new()
            } else {
                items
                    .iter()
                    .map(|(burst, span)| (*burst, span_of(span, field.span())))
                    .collect()
            }
        }
    };
    let cost = match &raw.cost {
        None => 1,
        Some(cost) if *cost.get_ref() < 1 => {
            diagnostics.push(source.at(
                cost.span(),
                format!(
                    "cost must be at least 1, found {} (to exempt a route use unlimited = true)",
                    cost.get_ref()
                ),
            ));
            1
        }
        Some(cost) => u64::try_from(*cost.get_ref()).unwrap_or(1),
    };

    let mut quotas = Vec::new();
    if diagnostics.len() == before {
        for ((rate, _), (burst, burst_span)) in rates.iter().zip(&bursts) {
            let Some(burst) = u32::try_from(*burst).ok().and_then(NonZeroU32::new) else {
                diagnostics.push(source.at(
                    burst_span.clone(),
                    format!("burst must be between 1 and 4294967295, found {burst}"),
                ));
                continue;
            };
            if cost > u64::from(burst.get()) {
                let at = raw.cost.as_ref().map_or(rule_span.clone(), Spanned::span);
                diagnostics.push(source.at(
                    at,
                    format!(
                        "cost {cost} is larger than burst {burst} of rate \"{rate}\": such a request could never pass"
                    ),
                ));
                continue;
            }
            match Quota::new(*rate, burst) {
                Some(quota) => quotas.push(quota),
                None => diagnostics.push(source.at(
                    burst_span.clone(),
                    format!("burst {burst} at \"{rate}\" takes longer than 584 years to refill"),
                )),
            }
        }
    }
    (diagnostics.len() == before).then(|| Limit::Limited {
        quotas,
        cost,
        per: raw.per.unwrap_or_default(),
        algorithm,
        strict: raw.strict.as_ref().is_some_and(|s| *s.get_ref()),
        shadow: raw.shadow.as_ref().is_some_and(|s| *s.get_ref()),
        count_status: count_status.flatten(),
    })
}

/// `count_status = [401, 403, "5xx"]`.
fn compile_statuses(
    source: &Source,
    list: &Spanned<Vec<Spanned<toml::Value>>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<StatusSet> {
    let (mut codes, mut classes) = (Vec::new(), Vec::new());
    for item in list.get_ref() {
        match item.get_ref() {
            toml::Value::Integer(code @ 100..=599) => codes.push(*code as u16),
            toml::Value::String(class)
                if class.len() == 3
                    && class.ends_with("xx")
                    && matches!(class.as_bytes()[0], b'1'..=b'5') =>
            {
                classes.push(char::from(class.as_bytes()[0]));
            }
            other => {
                let found = match other {
                    toml::Value::String(text) => format!("\"{text}\""),
                    toml::Value::Integer(number) => number.to_string(),
                    other => other.type_str().to_owned(),
                };
                diagnostics.push(source.at(
                    item.span(),
                    format!(
                        "count_status takes status codes (401) or classes (\"5xx\"), found {found}"
                    ),
                ));
            }
        }
    }
    if list.get_ref().is_empty() {
        diagnostics.push(source.at(
            list.span(),
            "count_status is empty: list the statuses that take tokens",
        ));
        return None;
    }
    Some(StatusSet { codes, classes })
}

/// `[key]`, `[client]`, `[response]` and `[gateway]`, folded over the files in order.
#[derive(Default)]
struct Settings {
    route: RouteSettings,
    client: ClientSettings,
    response: ResponseSettings,
    gateway: GatewaySettings,
    store: StoreSettings,
}

impl Settings {
    fn apply(&mut self, source: &Source, raw: &RawFile, diagnostics: &mut Vec<Diagnostic>) {
        if let Some(fold) = raw.key.case_insensitive {
            self.route.case_insensitive = fold;
        }
        if let Some(depth) = &raw.key.max_depth {
            match usize::try_from(*depth.get_ref()) {
                Ok(d @ 1..=1024) => self.route.max_depth = d,
                _ => diagnostics.push(source.at(
                    depth.span(),
                    format!(
                        "max_depth must be between 1 and 1024, found {}",
                        depth.get_ref()
                    ),
                )),
            }
        }

        if let Some(sources) = &raw.client.sources {
            let mut parsed = Vec::new();
            for item in sources.get_ref() {
                match parse_source(item.get_ref()) {
                    Some(source) => parsed.push(source),
                    None => diagnostics.push(source.at(
                        item.span(),
                        format!(
                            "unknown client source \"{}\" (use \"ip\" or \"header:NAME\")",
                            item.get_ref()
                        ),
                    )),
                }
            }
            if sources.get_ref().is_empty() {
                diagnostics
                    .push(source.at(sources.span(), "sources must name at least one source"));
            }
            self.client.sources = parsed;
        }
        if let Some(proxies) = &raw.client.trusted_proxies {
            let mut networks = Vec::new();
            for item in proxies {
                match parse_network(item.get_ref()) {
                    Some(network) => networks.push(network),
                    None => diagnostics.push(source.at(
                        item.span(),
                        format!(
                            "trusted proxy \"{}\" is not an IP address or CIDR network",
                            item.get_ref()
                        ),
                    )),
                }
            }
            self.client.trusted_proxies = networks.into_iter().collect::<TrustedProxies>();
        }
        if let Some(prefix) = &raw.client.ipv6_prefix {
            match u8::try_from(*prefix.get_ref()) {
                Ok(p @ 1..=128) => self.client.ipv6_prefix = p,
                _ => diagnostics.push(source.at(
                    prefix.span(),
                    format!(
                        "ipv6_prefix must be between 1 and 128, found {}",
                        prefix.get_ref()
                    ),
                )),
            }
        }

        let response = &raw.response;
        if let Some(status) = &response.status {
            match u16::try_from(*status.get_ref())
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
            {
                Some(code) if code.is_client_error() || code.is_server_error() => {
                    self.response.status = code
                }
                _ => diagnostics.push(source.at(
                    status.span(),
                    format!(
                        "status must be a 4xx or 5xx code, found {}",
                        status.get_ref()
                    ),
                )),
            }
        }
        if let Some(style) = response.headers {
            self.response.headers = style;
        }
        if let Some(body) = &response.body {
            self.response.body = BodyTemplate::new(body);
        }
        self.apply_gateway(source, raw, diagnostics);
        self.store.apply(source, &raw.store, diagnostics);

        if let Some(content_type) = &response.content_type {
            match HeaderValue::from_str(content_type.get_ref()) {
                Ok(value) => self.response.content_type = value,
                Err(_) => diagnostics.push(source.at(
                    content_type.span(),
                    format!(
                        "content_type \"{}\" is not a valid header value",
                        content_type.get_ref()
                    ),
                )),
            }
        }
    }
}

impl Settings {
    fn apply_gateway(&mut self, source: &Source, raw: &RawFile, diagnostics: &mut Vec<Diagnostic>) {
        let gateway = &raw.gateway;
        let mut address = |field: &Option<Spanned<String>>,
                           name: &str,
                           slot: &mut Option<std::net::SocketAddr>| {
            if let Some(text) = field {
                match text.get_ref().trim().parse() {
                    Ok(address) => *slot = Some(address),
                    Err(_) => diagnostics.push(source.at(
                        text.span(),
                        format!(
                            "{name} \"{}\" is not an address like \"127.0.0.1:8080\"",
                            text.get_ref()
                        ),
                    )),
                }
            }
        };
        address(&gateway.listen, "listen", &mut self.gateway.listen);
        address(&gateway.admin, "admin", &mut self.gateway.admin);
        if let Some(text) = &gateway.upstream {
            match parse_upstream(text.get_ref()) {
                Ok(uri) => self.gateway.upstream = Some(uri),
                Err(message) => diagnostics.push(source.at(text.span(), message)),
            }
        }
        if let Some(text) = &gateway.upstream_timeout {
            match super::rate::parse_duration(text.get_ref()) {
                Some(timeout) if !timeout.is_zero() => {
                    self.gateway.upstream_timeout = Some(timeout)
                }
                _ => diagnostics.push(source.at(
                    text.span(),
                    format!(
                        "upstream_timeout \"{}\" is not a duration like \"30s\"",
                        text.get_ref()
                    ),
                )),
            }
        }
        if let Some(token) = &gateway.admin_token {
            match token.get_ref().trim() {
                "" => diagnostics.push(source.at(token.span(), "admin_token is empty")),
                token => self.gateway.admin_token = Some(token.to_owned()),
            }
        }
    }
}

/// An upstream URL: `http://host:port` with an optional path prefix.
pub fn parse_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .trim()
        .parse()
        .map_err(|_| format!("upstream \"{text}\" is not a URL like \"http://127.0.0.1:8000\""))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) if uri.query().is_none() => Ok(uri),
        (Some("https"), _) => Err(format!(
            "upstream \"{text}\" uses https, which the gateway does not speak; terminate TLS in front of it"
        )),
        _ => Err(format!(
            "upstream \"{text}\" must look like \"http://host:port[/prefix]\""
        )),
    }
}

fn parse_source(text: &str) -> Option<ClientSource> {
    let text = text.trim();
    if text == "ip" {
        return Some(ClientSource::Ip);
    }
    let name = text.strip_prefix("header:")?.trim();
    HeaderName::from_bytes(name.as_bytes())
        .ok()
        .map(ClientSource::Header)
}

fn parse_network(text: &str) -> Option<IpNet> {
    let text = text.trim();
    text.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .ok()
}

/// Rule keys as a trie of segments.
#[derive(Debug, Default)]
struct PrefixTable {
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    rule: Option<usize>,
    children: hashbrown::HashMap<Box<str>, usize, foldhash::fast::RandomState>,
}

impl PrefixTable {
    fn build(rules: &[Rule]) -> PrefixTable {
        let mut table = PrefixTable {
            nodes: vec![Node::default()],
        };
        for (index, rule) in rules.iter().enumerate() {
            let mut at = 0;
            for segment in Segments(&rule.key) {
                at = match table.nodes[at].children.get(segment) {
                    Some(&next) => next,
                    None => {
                        let next = table.nodes.len();
                        table.nodes.push(Node::default());
                        table.nodes[at].children.insert(segment.into(), next);
                        next
                    }
                };
            }
            table.nodes[at].rule = Some(index);
        }
        table
    }

    fn longest_prefix<'c>(
        &self,
        route: &str,
        client: impl FnOnce() -> std::borrow::Cow<'c, str>,
        case_insensitive: bool,
    ) -> Option<usize> {
        let mut node = self.nodes.first()?;
        let mut best = node.rule;
        for segment in Segments(route) {
            match node.children.get(segment).and_then(|&i| self.nodes.get(i)) {
                Some(next) => {
                    node = next;
                    best = next.rule.or(best);
                }
                None => return best,
            }
        }
        if !node.children.is_empty() {
            let client = client();
            let found = if case_insensitive && client.chars().any(char::is_uppercase) {
                node.children.get(client.to_lowercase().as_str())
            } else {
                node.children.get(client.as_ref())
            };
            if let Some(next) = found.and_then(|&i| self.nodes.get(i)) {
                best = next.rule.or(best);
            }
        }
        best
    }
}

/// The non-empty `/`-separated segments of a route, found byte by byte: cheaper than
/// `str::split` for the short segments of a URL path.
struct Segments<'a>(&'a str);

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            if self.0.is_empty() {
                return None;
            }
            let end = self
                .0
                .bytes()
                .position(|b| b == b'/')
                .unwrap_or(self.0.len());
            let (segment, rest) = self.0.split_at(end);
            self.0 = rest.get(1..).unwrap_or("");
            if !segment.is_empty() {
                return Some(segment);
            }
        }
    }
}

/// Loads and compiles `paths` from disk.
pub(crate) fn read_sources(paths: &[PathBuf]) -> Result<Vec<Source>, super::ConfigError> {
    if paths.is_empty() {
        return Err(super::ConfigError::NoFiles);
    }
    paths.iter().map(|path| read_source(path)).collect()
}

/// The most bytes a config file may hold: 10,000 rules take well under 1 MiB, so a larger
/// file is a mistake (a log or an image saved over the config), refused without reading it
/// all.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("limits.toml");
/// std::fs::write(&file, vec![b'#'; tollgate::config::MAX_CONFIG_BYTES as usize + 1])?;
/// let error = tollgate::Limits::load([&file]).unwrap_err();
/// assert!(error.to_string().contains("larger than 16777216 bytes"), "{error}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

fn read_source(path: &Path) -> Result<Source, super::ConfigError> {
    use std::io::Read;
    let read_error = |source| super::ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // Opened non-blocking: a named pipe saved in the file's place would otherwise make the
    // open wait for a writer for ever, and every later reload behind it. (Regular files
    // read the same either way.)
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(read_error)?;
    // Only regular files, checked on the open file so nothing can be swapped in between:
    // a directory, a pipe or a device is never a config.
    let kind = file.metadata().map_err(read_error)?.file_type();
    if !kind.is_file() {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file (a {})", describe_file_type(kind)),
        )));
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells "too large" apart from "exactly at it".
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(super::ConfigError::TooLarge {
            path: path.to_owned(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|error| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                error.utf8_error().valid_up_to()
            ),
        ))
    })?;
    Ok(Source::new(path, text))
}

/// What a file that is not a regular file is, for the error.
fn describe_file_type(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            return "named pipe";
        }
        if kind.is_socket() {
            return "socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "device";
        }
    }
    "special file"
}

/// The path shown for config given as a string rather than a file.
pub(crate) fn inline_path() -> &'static Path {
    Path::new("<inline>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::HeaderStyle;

    fn compile(text: &str) -> Result<RuleSet, String> {
        RuleSet::compile(&[Source::new("limits.toml", text)], None).map_err(|d| {
            d.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    fn resolved(set: &RuleSet, route: &str, client: &str) -> Option<String> {
        set.resolve(route, client).map(|r| r.name().to_owned())
    }

    #[test]
    fn longest_segment_prefix_wins() {
        let set = compile(
            r#"
            [limits]
            "/" = "20/s"
            "api" = "100/min"
            "api/search" = "10/s"
            "api/search/192.168.11.3" = { rate = "100/s", burst = 500 }
            "#,
        )
        .unwrap();
        assert_eq!(
            resolved(&set, "api/search", "203.0.113.7").unwrap(),
            "api/search"
        );
        assert_eq!(
            resolved(&set, "api/search/deep", "1.2.3.4").unwrap(),
            "api/search"
        );
        assert_eq!(resolved(&set, "api/other", "1.2.3.4").unwrap(), "api");
        assert_eq!(resolved(&set, "api", "1.2.3.4").unwrap(), "api");
        assert_eq!(
            resolved(&set, "api/search", "192.168.11.3").unwrap(),
            "api/search/192.168.11.3"
        );
        assert_eq!(resolved(&set, "apiv2/search", "1.2.3.4").unwrap(), "/");
        assert_eq!(resolved(&set, "", "1.2.3.4").unwrap(), "/");
    }

    #[test]
    fn without_a_root_rule_unmatched_requests_have_no_rule() {
        let set = compile("[limits]\napi = \"1/s\"\n").unwrap();
        assert_eq!(resolved(&set, "other", "1.2.3.4"), None);
    }

    #[test]
    fn a_client_rule_names_a_key_segment_not_a_string_prefix() {
        let set = compile("[limits]\n\"api/1.2.3.4\" = \"1/s\"\n").unwrap();
        assert_eq!(resolved(&set, "api", "1.2.3.4").unwrap(), "api/1.2.3.4");
        assert_eq!(resolved(&set, "api", "1.2.3.45"), None);
    }

    #[test]
    fn case_insensitive_matching_covers_rule_keys_too() {
        let set = compile("[key]\ncase_insensitive = true\n[limits]\n\"API/Search\" = \"1/s\"\n\"api/Key1\" = \"2/s\"\n").unwrap();
        assert_eq!(resolved(&set, "api/search", "c").unwrap(), "api/search");
        assert_eq!(resolved(&set, "api", "KEY1").unwrap(), "api/key1");
    }

    #[test]
    fn rule_keys_are_normalised() {
        let set = compile("[limits]\n\"/api//search/./\" = \"1/s\"\n\"\" = \"1/s\"\n").unwrap();
        let keys: Vec<_> = set.rules().iter().map(Rule::key).collect();
        assert_eq!(keys, ["", "api/search"]);
        assert_eq!(set.rules()[0].name(), "/");
    }

    #[test]
    fn quotas_burst_cost_and_per_compile() {
        let set = compile(
            r#"
            [limits.api]
            rate = ["100/min", "5/s"]
            burst = [150, 5]
            cost = 2
            [limits.export]
            rate = "50/s"
            per = "global"
            [limits.healthz]
            unlimited = true
            "#,
        )
        .unwrap();
        let api = set.resolve("api", "x").unwrap();
        let Limit::Limited {
            quotas, cost, per, ..
        } = api.limit()
        else {
            panic!("api is limited")
        };
        assert_eq!(
            quotas.iter().map(Quota::burst).collect::<Vec<_>>(),
            [150, 5]
        );
        assert_eq!((*cost, *per), (2, Per::Client));
        assert_eq!(
            api.policy(0).unwrap(),
            &HeaderValue::from_static("\"api\";q=150;w=90")
        );
        let export = set.resolve("export", "x").unwrap();
        assert!(matches!(
            export.limit(),
            Limit::Limited {
                per: Per::Global,
                ..
            }
        ));
        assert_eq!(
            set.resolve("healthz", "x").unwrap().limit(),
            &Limit::Unlimited
        );
    }

    #[test]
    fn invalid_configs_name_file_line_column_and_problem() {
        let cases = [
            (
                "[limits]\napi = \"0/s\"\n",
                "limits.toml:2:7: rate count must be at least 1",
            ),
            (
                "[limits]\napi = \"5/fortnight\"\n",
                "limits.toml:2:7: unknown time unit \"fortnight\"",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nburst = 0\n",
                "limits.toml:3:9: burst must be between 1",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncost = 11\n",
                "limits.toml:3:8: cost 11 is larger than burst 10",
            ),
            (
                "[limits.api]\nrate = \"10/s\"\ncost = 0\n",
                "limits.toml:3:8: cost must be at least 1",
            ),
            (
                "[limits.api]\nrate = [\"1/s\", \"bad\"]\n",
                "limits.toml:2:16: expected a rate",
            ),
            (
                "[limits.api]\nrate = []\n",
                "limits.toml:2:8: rate list is empty",
            ),
            (
                "[limits.api]\nrate = [\"1/s\", \"5/m\"]\nburst = 3\n",
                "limits.toml:3:9: rule \"api\" has 2 rate(s) but 1 burst value(s)",
            ),
            (
                "[limits.api]\nburst = 3\n",
                "limits.toml:1:1: rule \"api\" needs a rate",
            ),
            (
                "[limits.api]\nunlimited = true\nrate = \"1/s\"\n",
                "rule \"api\" is unlimited and cannot also set a rate",
            ),
            (
                "[limits.api]\nunlimited = true\nshadow = true\n",
                "rule \"api\" is unlimited and cannot also set a rate",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nalgorithm = \"leaky\"\n",
                "limits.toml:3:13: unknown variant `leaky`",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\nburst = 3\nalgorithm = \"fixed-window\"\n",
                "limits.toml:3:9: burst applies to algorithm = \"gcra\"; a fixed-window allows",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\nstrict = true\nalgorithm = \"sliding-window\"\n",
                "limits.toml:3:10: strict applies to algorithm = \"gcra\": a sliding-window has no refill",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\ncount_status = [401, \"6xx\", 99, true]\n",
                "limits.toml:3:22: count_status takes status codes (401) or classes (\"5xx\"), found \"6xx\"",
            ),
            (
                "[limits.api]\nrate = \"9/s\"\ncount_status = []\n",
                "limits.toml:3:16: count_status is empty",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nbrust = 3\n",
                "limits.toml:3:1: unknown field `brust`",
            ),
            (
                "[limits.api]\nrate = \"1/s\"\nper = \"everyone\"\n",
                "limits.toml:3:7: unknown variant `everyone`",
            ),
            (
                "[limits]\n\"/api/\" = \"1/s\"\n\"api\" = \"2/s\"\n",
                "limits.toml:3:1: rule \"api\" normalises to \"api\", the same key as the rule on line 2",
            ),
            (
                "[key]\nmax_depth = 2\n[limits]\n\"a/b/c/d\" = \"1/s\"\n",
                "limits.toml:4:1: rule \"a/b/c/d\" has 4 segments",
            ),
            (
                "[key]\nmax_depth = 0\n",
                "limits.toml:2:13: max_depth must be between 1 and 1024, found 0",
            ),
            (
                "[client]\nsources = [\"cookie:x\"]\n",
                "limits.toml:2:12: unknown client source \"cookie:x\"",
            ),
            (
                "[client]\ntrusted_proxies = [\"10.0.0.0/33\"]\n",
                "limits.toml:2:20: trusted proxy \"10.0.0.0/33\"",
            ),
            (
                "[client]\nipv6_prefix = 129\n",
                "limits.toml:2:15: ipv6_prefix must be between 1 and 128",
            ),
            (
                "[response]\nstatus = 200\n",
                "limits.toml:2:10: status must be a 4xx or 5xx code, found 200",
            ),
            (
                "[response]\nheaders = \"fancy\"\n",
                "limits.toml:2:11: unknown variant `fancy`",
            ),
            ("[limits\n", "limits.toml:1:8:"),
        ];
        for (text, expected) in cases {
            let error = compile(text).expect_err(text);
            assert!(
                error.starts_with(expected) || error.contains(expected),
                "config {text:?}\n  gave {error}\n  expected {expected}"
            );
        }
    }

    #[test]
    fn an_empty_file_is_refused_but_a_comment_is_a_valid_empty_override() {
        let error = compile(" \n").unwrap_err();
        assert!(
            error.starts_with("limits.toml:1:1: file is empty"),
            "{error}"
        );
        assert!(
            compile("# no overrides on this server\n")
                .unwrap()
                .rules()
                .is_empty()
        );
    }

    #[test]
    fn every_way_to_count_compiles() {
        let set = compile(
            r#"
            [limits.login]
            rate = "5/min"
            strict = true
            count_status = [401, 403, "5xx"]
            [limits.beta]
            rate = "10/s"
            shadow = true
            [limits.upload]
            rate = ["100/min", "10/s"]
            algorithm = "sliding-window"
            cost = 10
            "#,
        )
        .unwrap();
        let Limit::Limited {
            strict,
            count_status,
            ..
        } = set.get("login").unwrap().limit()
        else {
            panic!("limited")
        };
        assert!(*strict);
        let statuses = count_status.as_ref().unwrap();
        assert!(
            statuses.contains(StatusCode::FORBIDDEN) && statuses.contains(StatusCode::BAD_GATEWAY)
        );
        assert!(!statuses.contains(StatusCode::OK));
        assert!(matches!(
            set.get("beta").unwrap().limit(),
            Limit::Limited { shadow: true, .. }
        ));
        assert!(matches!(
            set.get("upload").unwrap().limit(),
            Limit::Limited {
                algorithm: crate::Algorithm::SlidingWindow,
                cost: 10,
                ..
            }
        ));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let error = compile("[limits]\na = \"0/s\"\nb = \"x\"\n").unwrap_err();
        assert_eq!(error.lines().count(), 2, "{error}");
    }

    #[test]
    fn later_files_override_earlier_rule_by_rule() {
        let set = RuleSet::compile(
            &[
                Source::new(
                    "global.toml",
                    "[limits]\n\"/\" = \"10/s\"\napi = \"100/min\"\n[response]\nstatus = 503\n",
                ),
                Source::new(
                    "local.toml",
                    "[limits]\napi = \"5/min\"\n[response]\nheaders = \"both\"\n",
                ),
            ],
            None,
        )
        .unwrap();
        let api = set.resolve("api", "x").unwrap();
        assert_eq!(api.origin().file, PathBuf::from("local.toml"));
        assert!(matches!(api.limit(), Limit::Limited { quotas, .. } if quotas[0].burst() == 5));
        assert_eq!(set.resolve("other", "x").unwrap().name(), "/");
        assert_eq!(set.response().status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(set.response().headers, HeaderStyle::Both);
    }

    #[test]
    fn rule_ids_survive_recompiles_unless_the_bucket_kind_changes() {
        let first = compile("[limits]\na = \"1/s\"\nb = \"1/s\"\nc = \"1/s\"\n").unwrap();
        let second = RuleSet::compile(
            &[Source::new(
                "limits.toml",
                "[limits]\na = \"5/s\"\nb = { rate = \"1/s\", per = \"global\" }\nd = \"1/s\"\n",
            )],
            Some(&first),
        )
        .unwrap();
        let id = |set: &RuleSet, key: &str| set.get(key).map(Rule::id);
        assert_eq!(id(&second, "a"), id(&first, "a"), "a changed numbers only");
        assert_ne!(id(&second, "b"), id(&first, "b"), "b became global");
        let mut retired = second.retired_since(&first);
        retired.sort();
        let mut expected = vec![id(&first, "b").unwrap(), id(&first, "c").unwrap()];
        expected.sort();
        assert_eq!(retired, expected);
        // Restoring c later gives it an id it never had.
        let third = RuleSet::compile(
            &[Source::new(
                "limits.toml",
                "[limits]\na = \"5/s\"\nc = \"1/s\"\n",
            )],
            Some(&second),
        )
        .unwrap();
        assert_ne!(id(&third, "c"), id(&first, "c"));
        assert_eq!(id(&third, "a"), id(&first, "a"));
    }

    #[test]
    fn policy_names_are_valid_structured_strings() {
        assert_eq!(structured_string("api"), "\"api\"");
        assert_eq!(structured_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(structured_string("café"), "\"caf%C3%A9\"");
    }
}
