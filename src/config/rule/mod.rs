//! One compiled rule: its key and identity, what it limits, where it was written, and what
//! is computed once for it so that requests do not (the `RateLimit-Policy` values). Plain
//! data: what is counted for a rule belongs to the limiter enforcing it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use http::HeaderValue;

use crate::algorithm::Algorithm;
use crate::key::Client;
use crate::quota::Quota;

mod summary;
mod variants;

use super::also::AlsoLimit;
use super::cost::Settle;
use super::raw::Per;

/// A rule's identity inside one [`Limits`](crate::Limits): buckets are keyed by it.
///
/// Ids are never reused: a rule removed and later restored starts with fresh buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(u32);

impl RuleId {
    /// The buckets callers define with their own numbers rather than a rule's (smyte's
    /// `RL.*` commands, [`Limits::take_from`](crate::Limits::take_from)): no rule has this id.
    pub const CALLER_DEFINED: RuleId = RuleId(u32::MAX);

    /// The rule id `id`.
    pub const fn new(id: u32) -> RuleId {
        RuleId(id)
    }

    /// The number behind it.
    pub const fn get(self) -> u32 {
        self.0
    }
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
    /// The rule's own limit per plan: each plan's name and where its variant is in the
    /// rule set (after every rule a key can resolve to).
    plans: Vec<(Arc<str>, usize)>,
    /// For a plan's variant of a rule: the plan.
    plan: Option<Arc<str>>,
    /// The rule's candidate limits: each one's label and where its variant is in the rule
    /// set (after the plan variants). A plan variant has its rule's.
    candidates: Vec<(Arc<str>, usize)>,
    /// For a candidate's variant of a rule: its label.
    candidate: Option<Arc<str>>,
    /// Whether each client's peak rate is measured for suggestions (`suggest = true`, or
    /// candidates on a per-client rule).
    tracks_peaks: bool,
    /// `tracks_peaks` or candidates: whether requests are measured beside the decision.
    tuned: bool,
    /// For an `also` limit: its name, whose bucket, whether headers show it.
    also: Option<Box<AlsoLimit>>,
    /// The rule's own `also` limits: where each is in its rule set, in name order.
    own_also: Vec<usize>,
    /// The `also` limits a request resolved to this rule meets — its own and those of the
    /// rules whose keys are segment prefixes of its key, root first — by index in its rule
    /// set. Empty for most rules: one load on the request path says so.
    stack: Arc<[usize]>,
}

/// What a rule does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[expect(
    clippy::large_enum_variant,
    reason = "a rule set holds few rules, compiled once; boxing would cost every decision a pointer chase"
)]
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
        algorithm: Algorithm,
        /// Refused requests hold the refill back (GCRA only).
        strict: bool,
        /// Delay and warm-up (token-bucket rules only).
        shaping: crate::Shaping,
        /// A cap on requests in flight (`concurrency`); the rule may then have no rate.
        concurrency: Option<crate::Concurrency>,
        /// Measure and report, never refuse.
        shadow: bool,
        /// Only responses with these statuses take tokens; `None`: every request does.
        count_status: Option<StatusSet>,
        /// `cost = { reserve, from }`: `cost` is reserved at admission, and the response's
        /// own figure settles it.
        settle: Option<Settle>,
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
    pub(super) fn bucket_kind(&self) -> Option<Per> {
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
    pub(super) fn new(key: String, id: RuleId, limit: Limit, origin: Origin) -> Rule {
        let name: Arc<str> = Arc::from(display_name(&key));
        let policy_name = structured_string(&name);
        let policies = policies(&policy_name, &limit);
        Rule {
            key,
            name,
            id,
            limit,
            origin,
            policy_name,
            policies,
            plans: Vec::new(),
            plan: None,
            candidates: Vec::new(),
            candidate: None,
            tracks_peaks: false,
            tuned: false,
            also: None,
            own_also: Vec::new(),
            stack: Arc::from([]),
        }
    }

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
    pub fn bucket_key(&self, client: &Client<'_>) -> String {
        let mut key = String::new();
        self.write_bucket_key(&mut key, client);
        key
    }

    pub(crate) fn write_bucket_key(&self, out: &mut String, client: &Client<'_>) {
        use std::fmt::Write as _;
        match &self.limit {
            Limit::Limited {
                per: Per::Global, ..
            } => out.push_str(&self.name),
            // An `also` limit's bucket: `rule#name/value` (`/#org/acme`).
            _ if self.also.is_some() => {
                let _ = write!(out, "{}/{client}", self.name);
            }
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

    /// A count of this rule's bucket as headers show it: itself, or for a money rule
    /// (`rate = "$50/month"`) whole cents.
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    ///
    /// let rules = RuleSet::from_toml("[limits]\nllm = { rate = \"$50/month\", cost = { reserve = 10, from = \"usage\" } }\n")?;
    /// let llm = rules.get("llm").unwrap();
    /// assert_eq!(llm.cost(), 100_000, "10 cents, in micro-dollars");
    /// assert_eq!(llm.shown(50_000_000), 5000, "$50 shown in cents");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn shown(&self, count: u64) -> u64 {
        match self.settle().and_then(|settle| settle.money) {
            Some(money) => money.cents(count),
            None => count,
        }
    }

    /// Whether the rule only measures (`shadow = true`).
    pub fn is_shadow(&self) -> bool {
        matches!(self.limit, Limit::Limited { shadow: true, .. })
    }

    /// Where the actual cost is read, for rules that reserve and settle
    /// (`cost = { reserve, from }`).
    pub fn settle(&self) -> Option<&Settle> {
        match &self.limit {
            Limit::Limited { settle, .. } => settle.as_ref(),
            Limit::Unlimited => None,
        }
    }

    /// The statuses that take tokens, for `count_status` rules.
    pub fn count_status(&self) -> Option<&StatusSet> {
        match &self.limit {
            Limit::Limited { count_status, .. } => count_status.as_ref(),
            Limit::Unlimited => None,
        }
    }

    /// The quotas every request must pass, all at once (none for unlimited rules).
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits]\napi = { rate = [\"100/min\", \"5/s\"], per = \"global\" }\nhealthz = { unlimited = true }\n",
    /// )?;
    /// let api = rules.get("api").unwrap();
    /// assert_eq!(api.quotas().len(), 2);
    /// assert_eq!(api.per(), Some(tollgate::config::Per::Global));
    /// assert_eq!(api.algorithm(), Some(tollgate::Algorithm::Gcra));
    /// assert!(!api.is_strict() && !api.is_unlimited());
    /// assert!(rules.get("healthz").unwrap().is_unlimited());
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn quotas(&self) -> &[Quota] {
        match &self.limit {
            Limit::Limited { quotas, .. } => quotas,
            Limit::Unlimited => &[],
        }
    }

    /// Whose bucket a request draws on: each client's, or the rule's one global bucket
    /// (`None` for unlimited rules, which keep no bucket).
    pub fn per(&self) -> Option<Per> {
        self.limit.bucket_kind()
    }

    /// How the quotas count (`None` for unlimited rules).
    pub fn algorithm(&self) -> Option<Algorithm> {
        match &self.limit {
            Limit::Limited { algorithm, .. } => Some(*algorithm),
            Limit::Unlimited => None,
        }
    }

    /// How the rule shapes traffic besides refusing: `on_limit = "delay"`, `warmup`
    /// (`None` for unlimited rules).
    pub fn shaping(&self) -> Option<crate::Shaping> {
        match &self.limit {
            Limit::Limited { shaping, .. } => Some(*shaping),
            Limit::Unlimited => None,
        }
    }

    /// What kind of bucket the rule keeps, in a few words: the algorithm and its shaping
    /// (what `--check`, `/config`, `/explain` and `/buckets` show).
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits]\nup = { rate = \"5/s\", on_limit = \"delay\", max_delay = \"2s\", warmup = \"30s\" }\n\
    ///      login = { rate = \"5/h\", algorithm = \"sliding-log\", strict = true }\n",
    /// )?;
    /// assert_eq!(rules.get("up").unwrap().kind(), "gcra, delayed up to 2s, warm-up 30s");
    /// assert_eq!(rules.get("login").unwrap().kind(), "sliding-log, strict");
    ///
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits]\napi = { rate = \"10000/month\", calendar = \"Europe/Berlin\" }\n",
    /// )?;
    /// assert_eq!(rules.get("api").unwrap().kind(), "fixed-window, per calendar month in Europe/Berlin");
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn kind(&self) -> String {
        let Limit::Limited {
            quotas,
            algorithm,
            strict,
            shaping,
            concurrency,
            per,
            ..
        } = &self.limit
        else {
            return "unlimited".to_owned();
        };
        let mut kind = if quotas.is_empty() {
            String::new()
        } else {
            algorithm.to_string()
        };
        for calendar in quotas.iter().filter_map(Quota::calendar) {
            kind.push_str(&format!(", per calendar {calendar}"));
        }
        match concurrency {
            None => {}
            Some(cap) => {
                if !kind.is_empty() {
                    kind.push_str(", ");
                }
                match cap {
                    crate::Concurrency::Fixed(n) => {
                        let whose = match per {
                            super::Per::Client => "per client",
                            super::Per::Global => "for the rule",
                        };
                        kind.push_str(&format!("at most {n} in flight {whose}"));
                    }
                    crate::Concurrency::Adaptive(settings) => kind.push_str(&format!(
                        "adaptive concurrency {}..{}",
                        settings.min, settings.max
                    )),
                }
            }
        }
        if let Some(delay) = shaping.delay() {
            kind.push_str(&format!(", delayed up to {:?}", delay.max()));
            if let Some(after) = delay.after() {
                kind.push_str(&format!(" after {after} at once"));
            }
        }
        if let Some(warmup) = shaping.warmup() {
            kind.push_str(&format!(", warm-up {warmup:?}"));
        }
        if *strict {
            kind.push_str(", strict");
        }
        kind
    }

    /// The rule's cap on requests in flight, if any (`concurrency`).
    pub fn concurrency(&self) -> Option<crate::Concurrency> {
        match &self.limit {
            Limit::Limited { concurrency, .. } => *concurrency,
            Limit::Unlimited => None,
        }
    }

    /// Whether refused requests hold the refill back (`strict = true`).
    pub fn is_strict(&self) -> bool {
        matches!(self.limit, Limit::Limited { strict: true, .. })
    }

    /// Whether the rule limits nothing (`unlimited = true`).
    pub fn is_unlimited(&self) -> bool {
        matches!(self.limit, Limit::Unlimited)
    }

    /// The precomputed `RateLimit-Policy` value for quota `index`.
    pub(crate) fn policy(&self, index: usize) -> Option<&HeaderValue> {
        self.policies.get(index)
    }
}

/// Each quota's `RateLimit-Policy` value under `policy_name`.
fn policies(policy_name: &str, limit: &Limit) -> Vec<HeaderValue> {
    match limit {
        Limit::Unlimited => Vec::new(),
        Limit::Limited { quotas, settle, .. } => quotas
            .iter()
            .filter_map(|quota| {
                let window = crate::decision::ceil_secs(quota.window()).max(1);
                let burst = u64::from(quota.burst());
                let shown = match settle.as_ref().and_then(|s| s.money) {
                    Some(money) => money.cents(burst),
                    None => burst,
                };
                let text = format!("{policy_name};q={shown};w={window}");
                HeaderValue::from_str(&text).ok()
            })
            .collect(),
    }
}

/// The root rule is shown as `/`.
pub(super) fn display_name(key: &str) -> &str {
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

#[cfg(test)]
mod tests {
    use super::structured_string;

    #[test]
    fn policy_names_are_valid_structured_strings() {
        assert_eq!(structured_string("api"), "\"api\"");
        assert_eq!(structured_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(structured_string("café"), "\"caf%C3%A9\"");
    }
}
