//! A rule's variants, each a rule of its own in the rule set: its `also` limits (buckets
//! of their own), its candidate limits (measured beside it), and its plans' limits
//! (sharing its id, so its buckets) — made from the rule, and found from it by index.

use std::sync::Arc;

use super::{Limit, Rule, RuleId, policies, structured_string};
use crate::config::also::AlsoLimit;

impl Rule {
    /// The `also` limit `also` of this rule: the same key and origin under `limit`, named
    /// `rule#name`, with buckets of its own (`id`).
    pub(in crate::config) fn for_also(&self, also: AlsoLimit, id: RuleId, limit: Limit) -> Rule {
        let name = format!("{}#{}", self.name, also.name());
        let mut variant = Rule::new(self.key.clone(), id, limit, self.origin.clone());
        variant.policy_name = structured_string(&name);
        variant.policies = policies(&variant.policy_name, &variant.limit);
        variant.name = Arc::from(name);
        variant.also = Some(Box::new(also));
        variant
    }

    /// Records that this rule's own `also` limit is at `index` in its rule set.
    pub(in crate::config) fn add_also(&mut self, index: usize) {
        self.own_also.push(index);
    }

    /// Where this rule's own `also` limits are in its rule set.
    pub(in crate::config) fn own_also(&self) -> &[usize] {
        &self.own_also
    }

    /// Where this rule's plan variants are in its rule set.
    pub(in crate::config) fn plan_variant_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.plans.iter().map(|&(_, index)| index)
    }

    /// Sets the `also` limits a request resolved to this rule meets.
    pub(in crate::config) fn set_stack(&mut self, stack: Arc<[usize]>) {
        self.stack = stack;
    }

    /// The `also` limits a request resolved to this rule meets, by index in its rule set
    /// (see [`RuleSet::stack`](crate::config::RuleSet::stack)).
    #[inline]
    pub(crate) fn stack_indices(&self) -> &Arc<[usize]> {
        &self.stack
    }

    /// For an `also` limit (what [`RuleSet::stack`](crate::config::RuleSet::stack) yields), what
    /// makes it one; `None` for rules themselves.
    pub fn also(&self) -> Option<&AlsoLimit> {
        self.also.as_deref()
    }

    /// This rule's candidate `label`: the same key and origin under `limit`, with buckets
    /// of its own (`id`).
    pub(in crate::config) fn for_candidate(
        &self,
        label: Arc<str>,
        id: RuleId,
        limit: Limit,
    ) -> Rule {
        let mut variant = Rule::new(self.key.clone(), id, limit, self.origin.clone());
        variant.candidate = Some(label);
        variant
    }

    /// Records that candidate `label`'s variant of this rule is at `index` in its rule set.
    pub(in crate::config) fn add_candidate(&mut self, label: Arc<str>, index: usize) {
        self.candidates.push((label, index));
        self.tuned = true;
    }

    /// Gives a plan's variant its rule's candidates.
    pub(in crate::config) fn share_candidates(&mut self, candidates: &[(Arc<str>, usize)]) {
        self.candidates = candidates.to_vec();
        self.tuned = self.tracks_peaks || !self.candidates.is_empty();
    }

    /// Sets whether clients' peak rates are measured under this rule.
    pub(in crate::config) fn set_tracks_peaks(&mut self, tracks: bool) {
        self.tracks_peaks = tracks;
        self.tuned = tracks || !self.candidates.is_empty();
    }

    /// Where this rule's candidates are in its rule set, with their labels.
    pub(crate) fn candidate_indices(&self) -> &[(Arc<str>, usize)] {
        &self.candidates
    }

    /// Whether a request under the rule is measured beside its decision: its peak, or its
    /// candidates' decisions. One load, for the request path.
    #[cfg(feature = "insight")]
    #[inline]
    pub(crate) fn is_tuned(&self) -> bool {
        self.tuned
    }

    /// Whether the rule has candidate limits (`candidates = [...]`).
    pub fn has_candidates(&self) -> bool {
        !self.candidates.is_empty()
    }

    /// For a candidate's variant of a rule (what
    /// [`RuleSet::candidates`](crate::config::RuleSet::candidates) lists), its label: its rates as
    /// written. `None` for rules themselves.
    pub fn candidate(&self) -> Option<&str> {
        self.candidate.as_deref()
    }

    /// Whether each client's peak rate at the rule's window is measured, for suggested
    /// limits: `suggest = true`, or candidates on a per-client rule.
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits]\napi = { rate = \"100/min\", suggest = true }\nlogin = \"5/min\"\n",
    /// )?;
    /// assert!(rules.get("api").unwrap().tracks_peaks());
    /// assert!(!rules.get("login").unwrap().tracks_peaks());
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn tracks_peaks(&self) -> bool {
        self.tracks_peaks
    }

    /// The name the rule's buckets go by in a shared store: its key, and for a candidate
    /// the key and the candidate's label after `#` (no request path holds a `#`), `/`
    /// written `:` so that the last `/` of a bucket name still comes before the client.
    pub(crate) fn store_key(&self) -> std::borrow::Cow<'_, str> {
        if let Some(also) = &self.also {
            // `also` names hold no `/` or `:`; candidate labels are rates, which always do.
            return std::borrow::Cow::Owned(format!("{}#{}", self.key, also.name()));
        }
        match &self.candidate {
            None => std::borrow::Cow::Borrowed(&self.key),
            Some(label) => {
                std::borrow::Cow::Owned(format!("{}#{}", self.key, label.replace('/', ":")))
            }
        }
    }

    /// This rule's variant for `plan`: the same key, id (so the same buckets) and origin,
    /// under `limit`.
    pub(in crate::config) fn for_plan(&self, plan: Arc<str>, limit: Limit) -> Rule {
        let mut variant = Rule::new(self.key.clone(), self.id, limit, self.origin.clone());
        variant.plan = Some(plan);
        variant.tracks_peaks = self.tracks_peaks;
        variant.tuned = self.tracks_peaks;
        variant
    }

    /// Records that plan `plan`'s variant of this rule is at `index` in its rule set.
    pub(in crate::config) fn add_plan(&mut self, plan: Arc<str>, index: usize) {
        self.plans.push((plan, index));
    }

    /// Where this rule's variant for `plan` is in its rule set, if the rule has one.
    pub(crate) fn plan_index(&self, plan: &str) -> Option<usize> {
        self.plans
            .iter()
            .find(|(name, _)| &**name == plan)
            .map(|&(_, index)| index)
    }

    /// Whether the rule has limits of its own for some plans.
    pub fn has_plans(&self) -> bool {
        !self.plans.is_empty()
    }

    /// The plans the rule has limits of its own for, in name order.
    ///
    /// ```
    /// let rules = tollgate::config::RuleSet::from_toml(
    ///     "[limits.api]\nrate = \"10/min\"\nplans = { pro = \"1000/min\", enterprise = { unlimited = true } }\n",
    /// )?;
    /// let api = rules.get("api").unwrap();
    /// assert_eq!(api.plans().collect::<Vec<_>>(), ["enterprise", "pro"]);
    /// assert_eq!(rules.plan_variant(api, "pro").unwrap().quotas()[0].burst(), 1000);
    /// assert!(rules.plan_variant(api, "enterprise").unwrap().is_unlimited());
    /// assert!(rules.plan_variant(api, "free").is_none());
    /// # Ok::<(), tollgate::config::ConfigError>(())
    /// ```
    pub fn plans(&self) -> impl Iterator<Item = &str> {
        self.plans.iter().map(|(name, _)| &**name)
    }

    /// For a plan's variant of a rule (what [`RuleSet::plan_variant`](crate::config::RuleSet::plan_variant)
    /// returns), the plan; `None` for the rule itself.
    pub fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }
}
