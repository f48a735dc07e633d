//! [`RuleSet`]: the whole compiled configuration, immutable, and how a request finds its
//! rule in it.

use std::any::Any;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use super::also::AlsoBy;
use super::identity::ReadKeys;
use super::money::Prices;
use super::plans::Plans;
use super::prefix::PrefixTable;
use super::rule::{Rule, RuleId};
use super::settings::{ReloadSettings, ResponseSettings, Settings, StoreSettings};
use crate::key::{ClientSettings, ClientSource, KeyPart, RouteSettings};

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
    /// The rules a key can resolve to (sorted by key), then the variants of rules for
    /// their plans, then their candidates.
    rules: Vec<Rule>,
    /// How many of `rules` a key can resolve to.
    resolvable: usize,
    /// `[plans]` and the membership read from its sources.
    plans: Arc<Plans>,
    table: PrefixTable,
    route: RouteSettings,
    client: ClientSettings,
    response: Arc<ResponseSettings>,
    store: StoreSettings,
    reload: ReloadSettings,
    files: Vec<PathBuf>,
    /// The next unused rule id: ids are never reused, so a rule removed and later restored
    /// starts with fresh buckets.
    next_id: u32,
    /// 1 for the first set, +1 for each set compiled to replace another. Part of the set
    /// itself, so whoever sees these rules sees their generation: no reader can catch a
    /// new set under an old number.
    generation: u64,
    /// What the embedding program's [`Extension`](super::Extension)s made of their tables.
    extensions: Vec<Arc<dyn Any + Send + Sync>>,
    /// What the rules need of a request's JSON body (none: it is never read).
    body: Option<Arc<BodyNeeds>>,
    /// `[prices]`: what each model's tokens cost, for money rules.
    prices: Arc<Prices>,
    /// The API key tables as read (`[identity.api_keys]`), kept for the next compile.
    key_tables: Option<ReadKeys>,
}

/// What a rule set needs of a request's JSON body: the values at `pointers` (key parts and
/// `also` limits kept per `json:` part) and, if `estimates`, the prompt and output ceiling.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BodyNeeds {
    /// The JSON pointers whose values make keys.
    pub pointers: Vec<String>,
    /// Whether a rule reserves an estimate (`reserve = "estimate"`).
    pub estimates: bool,
}

impl RuleSet {
    /// A rule set of `rules` (sorted by key; then `variants`, the rules' plan variants)
    /// under `settings`, read from `files`.
    pub(super) fn assemble(
        mut rules: Vec<Rule>,
        variants: Vec<Rule>,
        settings: Settings,
        files: Vec<PathBuf>,
        next_id: u32,
        generation: u64,
    ) -> RuleSet {
        let resolvable = rules.len();
        rules.extend(variants);
        RuleSet {
            table: PrefixTable::build(&rules[..resolvable]),
            rules,
            resolvable,
            plans: Arc::new(settings.plans),
            route: settings.route,
            client: settings.client,
            response: Arc::new(settings.response),
            store: settings.store,
            reload: settings.reload,
            files,
            next_id,
            generation,
            extensions: Vec::new(),
            body: None,
            prices: Arc::new(settings.prices),
            key_tables: settings.keys,
        }
    }

    /// Lets `change` finish the rules (all of them, and how many a key resolves to) before
    /// the set is used.
    pub(super) fn with_rules(&mut self, change: impl FnOnce(&mut [Rule], usize)) {
        change(&mut self.rules, self.resolvable);
        self.body = self.find_body_needs();
    }

    /// What the rules and key parts need of a request's body, if anything.
    fn find_body_needs(&self) -> Option<Arc<BodyNeeds>> {
        let mut pointers: Vec<String> = Vec::new();
        let also_parts = self
            .rules
            .iter()
            .filter_map(|rule| match rule.also()?.by() {
                AlsoBy::Part(part) => Some(part),
                _ => None,
            });
        for part in self.route.parts.iter().chain(also_parts) {
            if let KeyPart::Json(pointer) = part
                && !pointers.contains(pointer)
            {
                pointers.push(pointer.clone());
            }
        }
        let estimates = self.rules.iter().any(|rule| {
            rule.settle()
                .is_some_and(|settle| settle.estimate.is_some())
        });
        (estimates || !pointers.is_empty()).then(|| {
            Arc::new(BodyNeeds {
                pointers,
                estimates,
            })
        })
    }

    /// What these rules need of a request's JSON body: `None` when nothing (the body is
    /// then never read).
    ///
    /// ```
    /// use tollgate::config::RuleSet;
    ///
    /// let rules = RuleSet::from_toml("[key]\nparts = [\"route\", \"json:/model\", \"client\"]\n[limits]\n\"/\" = \"10/s\"\n")?;
    /// assert_eq!(rules.body_needs().unwrap().pointers, ["/model"]);
    /// assert!(RuleSet::from_toml("[limits]\n\"/\" = \"10/s\"\n")?.body_needs().is_none());
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn body_needs(&self) -> Option<&Arc<BodyNeeds>> {
        self.body.as_ref()
    }

    /// The API key tables as read, for the next compile to reuse.
    pub(crate) fn key_tables(&self) -> Option<&ReadKeys> {
        self.key_tables.as_ref()
    }

    /// `[prices]`: what each model's tokens cost, for money rules (`rate = "$50/month"`).
    pub fn prices(&self) -> &Prices {
        &self.prices
    }

    /// Keeps what the extensions made of their tables.
    pub(super) fn extended(&mut self, outputs: Vec<Arc<dyn Any + Send + Sync>>) {
        self.extensions = outputs;
    }

    /// The next rule id a recompile may hand out.
    pub(super) fn next_id(&self) -> u32 {
        self.next_id
    }

    /// The trie of rule keys, for [`explain`](Self::explain).
    pub(super) fn table(&self) -> &PrefixTable {
        &self.table
    }
}

impl RuleSet {
    /// The rule whose key is the longest segment prefix of `route "/" client`, if any.
    ///
    /// `route` must already be normalised (see [`normalize_route`](crate::key::normalize_route)).
    pub fn resolve(&self, route: &str, client: &str) -> Option<&Rule> {
        self.resolve_with(route, || client.into())
            .and_then(|index| self.rules.get(index))
    }

    /// Whether some rule's key starts with the segment `first` (already normalised). A
    /// front end naming metrics after what its callers send (an Envoy domain, say) labels
    /// with it only names that rules know, so a caller cannot grow the label set.
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml("[limits]\n\"edge/api\" = \"5/s\"\n")?;
    /// assert!(rules.has_rules_under("edge"));
    /// assert!(!rules.has_rules_under("api"));
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn has_rules_under(&self, first: &str) -> bool {
        self.table.has_first_segment(first)
    }

    /// As [`resolve`](Self::resolve), asking for the client segment only if some rule could
    /// name a client at this route.
    pub(crate) fn resolve_with<'c>(
        &self,
        route: &str,
        client: impl FnOnce() -> Cow<'c, str>,
    ) -> Option<usize> {
        self.table
            .longest_prefix(route, client, self.route.case_insensitive)
    }

    /// The rule at `index` from [`resolve_with`](Self::resolve_with).
    pub(crate) fn rule(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index)
    }

    /// All rules, sorted by key (their plan variants are reached through
    /// [`plan_variant`](Self::plan_variant)).
    pub fn rules(&self) -> &[Rule] {
        &self.rules[..self.resolvable]
    }

    /// Every rule and plan variant, by index: what the limiter keeps counters for.
    pub(crate) fn all_rules(&self) -> &[Rule] {
        &self.rules
    }

    /// `rule`'s variant for `plan`, if the rule has limits of its own for that plan.
    pub fn plan_variant(&self, rule: &Rule, plan: &str) -> Option<&Rule> {
        rule.plan_index(plan)
            .and_then(|index| self.rules.get(index))
    }

    /// The index of the rule at `index` as `plan` has it: its variant's, or its own.
    pub(crate) fn plan_index(&self, index: usize, plan: Option<&str>) -> usize {
        plan.and_then(|plan| self.rules.get(index)?.plan_index(plan))
            .unwrap_or(index)
    }

    /// The index of the rule at `index` for a caller-given key: its variant for `plan` if
    /// given, else for the plan `[plans]` membership or default gives the client whose key
    /// segment `identity` makes; the rule's own index when it has no plans.
    pub(crate) fn plan_index_for<'a>(
        &'a self,
        index: usize,
        plan: Option<&'a str>,
        identity: impl FnOnce() -> Cow<'a, str>,
    ) -> usize {
        if !self.rules.get(index).is_some_and(Rule::has_plans) {
            return index;
        }
        let chosen = match plan {
            Some(plan) => Some(Cow::Borrowed(plan)),
            None => self.plans.for_identity(identity).map(|(plan, _)| plan),
        };
        self.plan_index(index, chosen.as_deref())
    }

    /// The `also` limits a request resolved to `rule` meets (`[limits."KEY".also]` of its
    /// own and of every rule whose key is a segment prefix of its key), root first: each a
    /// rule of its own, named `rule#name`. See the [`also` module](super::AlsoLimit).
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits.\"/\".also]\neveryone = { rate = \"2000/s\", per = \"global\" }\n[limits.login]\nrate = \"5/min\"\n",
    /// )?;
    /// let login = rules.get("login").unwrap();
    /// let everyone = rules.stack(login).next().unwrap();
    /// assert_eq!(everyone.name(), "/#everyone");
    /// assert_eq!(everyone.per(), Some(tollgate::config::Per::Global));
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn stack<'s>(&'s self, rule: &'s Rule) -> impl Iterator<Item = &'s Rule> + 's {
        rule.stack_indices()
            .iter()
            .filter_map(|&index| self.rules.get(index))
    }

    /// The names of the token claims the rules use — as client sources, key parts, `also`
    /// limits' `per` and `[plans] claim` — each once, in that order: what `explain` shows
    /// of a verified token (never the token).
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[key]\nparts = [\"jwt:tenant\", \"route\", \"client\"]\n[plans]\nclaim = \"plan\"\n[limits]\napi = \"1/s\"\n",
    /// )?;
    /// assert_eq!(rules.claims_used(), ["tenant", "plan"]);
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn claims_used(&self) -> Vec<&str> {
        let sources = self
            .client
            .sources
            .iter()
            .filter_map(|source| match source {
                ClientSource::Jwt(claim) => Some(claim.as_str()),
                _ => None,
            });
        let also_parts = self
            .also_limits()
            .filter_map(|rule| match rule.also()?.by() {
                AlsoBy::Part(part) => Some(part),
                _ => None,
            });
        let parts = self
            .route
            .parts
            .iter()
            .chain(also_parts)
            .filter_map(|part| match part {
                KeyPart::Jwt(claim) => Some(claim.as_str()),
                _ => None,
            });
        let mut used: Vec<&str> = Vec::new();
        for claim in sources.chain(parts).chain(self.plans.claim()) {
            if !used.contains(&claim) {
                used.push(claim);
            }
        }
        used
    }

    /// Every `also` limit of every rule, each once.
    pub fn also_limits(&self) -> impl Iterator<Item = &Rule> {
        self.rules[self.resolvable..]
            .iter()
            .filter(|rule| rule.also().is_some())
    }

    /// Every rule that keeps buckets of its own: the rules, their candidates and their
    /// `also` limits (a plan's variant shares its rule's).
    pub(crate) fn bucket_rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules().iter().chain(
            self.rules[self.resolvable..]
                .iter()
                .filter(|rule| rule.also().is_some() || rule.candidate().is_some()),
        )
    }

    /// The `also` limit `name` of `rule` (its own, not its ancestors'), if it has one.
    pub fn also_named(&self, rule: &Rule, name: &str) -> Option<&Rule> {
        rule.own_also()
            .iter()
            .filter_map(|&index| self.rules.get(index))
            .find(|also| also.also().is_some_and(|a| a.name() == name))
    }

    /// `rule`'s candidate limits, each with its label (its rates as written), in the order
    /// written. A plan's variant has its rule's.
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits.api]\nrate = \"100/min\"\ncandidates = [\"20/min\", [\"50/min\", \"5/s\"]]\n",
    /// )?;
    /// let api = rules.get("api").unwrap();
    /// let labels: Vec<&str> = rules.candidates(api).map(|(label, _)| label).collect();
    /// assert_eq!(labels, ["20/min", "50/min, 5/s"]);
    /// let (_, twenty) = rules.candidates(api).next().unwrap();
    /// assert_eq!(twenty.quotas()[0].burst(), 20);
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn candidates<'s>(&'s self, rule: &'s Rule) -> impl Iterator<Item = (&'s str, &'s Rule)> {
        rule.candidate_indices()
            .iter()
            .filter_map(|(label, index)| Some((&**label, self.rules.get(*index)?)))
    }

    /// `rule`'s candidate labelled `label`, if it has one.
    pub(crate) fn candidate_named<'s>(&'s self, rule: &'s Rule, label: &str) -> Option<&'s Rule> {
        self.candidates(rule)
            .find(|(name, _)| *name == label)
            .map(|(_, candidate)| candidate)
    }

    /// `[plans]`: which plan a client is on.
    pub fn plans(&self) -> &Plans {
        &self.plans
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

    /// What an [`Extension`](super::Extension) registered on the limiter made of its table
    /// for these rules: the first of its outputs that is a `T`. See
    /// [`config::extension`](super::extension).
    pub fn extension<T: Any>(&self) -> Option<&T> {
        self.extensions
            .iter()
            .find_map(|output| output.downcast_ref::<T>())
    }

    /// The `[store]` table.
    pub fn store(&self) -> &StoreSettings {
        &self.store
    }

    /// The `[reload]` table (from the local files).
    pub fn reload(&self) -> &ReloadSettings {
        &self.reload
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
        self.rules()
            .binary_search_by(|rule| rule.key().cmp(key))
            .ok()
            .and_then(|index| self.rules.get(index))
    }

    /// Ids of `previous`'s rules whose buckets this set no longer uses (removed rules, and
    /// rules whose kind of bucket changed).
    pub(crate) fn retired_since(&self, previous: &RuleSet) -> Vec<RuleId> {
        let mut retired: Vec<RuleId> = previous
            .rules()
            .iter()
            .filter(|old| self.get(old.key()).is_none_or(|new| new.id() != old.id()))
            .map(Rule::id)
            .collect();
        // Candidates dropped, or whose kind of bucket changed.
        for old in previous.rules() {
            for (label, was) in previous.candidates(old) {
                let kept = self
                    .get(old.key())
                    .and_then(|new| self.candidate_named(new, label))
                    .is_some_and(|now| now.id() == was.id());
                if !kept {
                    retired.push(was.id());
                }
            }
        }
        retired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;

    fn compile(text: &str) -> Result<RuleSet, ConfigError> {
        RuleSet::from_toml(text)
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
}
