//! The rules in force and what is counted for each of them, swapped in together: a request
//! is counted under the very rules that decided it, and a [`RuleSet`] stays plain data.

use std::ops::Deref;
use std::sync::Arc;

use crate::concurrency::Concurrency;
use crate::config::RuleSet;
use crate::traffic::{RuleCounters, Traffic};

/// One generation of rules, with each rule's counters (index for index).
pub(crate) struct Active {
    rules: Arc<RuleSet>,
    /// `None` for unlimited rules, which count nothing.
    counters: Box<[Option<RuleCounters>]>,
}

impl Active {
    /// `rules`, counting into the metrics recorder installed now and into `traffic`.
    pub(crate) fn new(rules: RuleSet, traffic: &Traffic) -> Active {
        let counters = rules
            .all_rules()
            .iter()
            .map(|rule| {
                (!rule.is_unlimited()).then(|| {
                    let cap = rule.concurrency().map(|cap| match cap {
                        Concurrency::Fixed(n) => n,
                        Concurrency::Adaptive(settings) => settings.min,
                    });
                    RuleCounters::new(rule.name(), cap, traffic)
                })
            })
            .collect();
        Active {
            rules: Arc::new(rules),
            counters,
        }
    }

    /// The rule set, shared.
    pub(crate) fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The counters of the rule at `index` (limited rules only).
    pub(crate) fn counters(&self, index: usize) -> Option<&RuleCounters> {
        self.counters.get(index).and_then(Option::as_ref)
    }
}

impl Deref for Active {
    type Target = RuleSet;

    fn deref(&self) -> &RuleSet {
        &self.rules
    }
}
