//! The rules in force and what is counted for each of them, swapped in together: a request
//! is counted under the very rules that decided it, and a [`RuleSet`] stays plain data.

use std::ops::Deref;
use std::sync::Arc;

use crate::concurrency::Concurrency;
use crate::config::RuleSet;
use crate::store::StoreRules;
#[cfg(feature = "insight")]
use crate::traffic::{CandidateTraffic, PeakTracker};
use crate::traffic::{Reserves, RuleCounters, Traffic};

/// One generation of rules, with each rule's counters (index for index).
pub(crate) struct Active {
    rules: Arc<RuleSet>,
    /// The rules as the store is told of them.
    store_rules: StoreRules,
    /// `None` for unlimited rules and candidates, which count nothing of their own.
    counters: Box<[Option<RuleCounters>]>,
    /// What is measured beside the decision, per rule and variant (index for index).
    #[cfg(feature = "insight")]
    tuning: Box<[Tuning]>,
}

/// A rule's peak tracker (if it measures peaks), or a candidate's record.
#[cfg(feature = "insight")]
#[derive(Default)]
pub(crate) struct Tuning {
    pub(crate) peaks: Option<Arc<PeakTracker>>,
    pub(crate) candidate: Option<Arc<CandidateTraffic>>,
}

impl Active {
    /// `rules`, counting into the metrics recorder installed now and into `traffic`.
    pub(crate) fn new(rules: RuleSet, traffic: &Traffic) -> Active {
        let counters = rules
            .all_rules()
            .iter()
            .map(|rule| {
                (!rule.is_unlimited() && rule.candidate().is_none()).then(|| {
                    let cap = rule.concurrency().map(|cap| match cap {
                        Concurrency::Fixed(n) => n,
                        Concurrency::Adaptive(settings) => settings.min,
                    });
                    RuleCounters::new(
                        rule.name(),
                        cap,
                        rule.settle().map(|settle| match settle.from {
                            crate::config::CostSource::Usage => Reserves::Usage,
                            _ => Reserves::Figure,
                        }),
                        traffic,
                    )
                })
            })
            .collect();
        {
            // Made now, so each series exists at 0 before the first failed credential.
            let client = rules.client_settings();
            let action = client.on_invalid.as_str();
            let reasons = crate::key::Invalid::ALL.into_iter().filter(|reason| {
                if *reason == crate::key::Invalid::UnknownKey {
                    client.api_keys.is_some()
                } else {
                    client.jwt.is_some()
                }
            });
            for reason in reasons {
                let _ = metrics::counter!("tollgate_invalid_credentials_total", "reason" => reason.reason(), "action" => action);
            }
        }
        #[cfg(feature = "insight")]
        let tuning = rules
            .all_rules()
            .iter()
            .map(|rule| Tuning {
                // A plan's variant counts peaks in its rule's window, into its rule's
                // tracker: one distribution per rule, whatever plans its clients are on.
                peaks: rule
                    .tracks_peaks()
                    .then(|| rules.get(rule.key()).unwrap_or(rule).quotas().first())
                    .flatten()
                    .and_then(|quota| {
                        traffic.peaks(
                            rule.name(),
                            quota.rate().period(),
                            rules.store().max_buckets,
                        )
                    }),
                candidate: rule
                    .candidate()
                    .and_then(|label| traffic.candidate(rule.name(), label)),
            })
            .collect();
        Active {
            store_rules: StoreRules::new(&rules),
            rules: Arc::new(rules),
            counters,
            #[cfg(feature = "insight")]
            tuning,
        }
    }

    /// The rule set, shared.
    pub(crate) fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The rule set as the store is told of it.
    pub(crate) fn store_rules(&self) -> &StoreRules {
        &self.store_rules
    }

    /// The counters of the rule at `index` (limited rules only).
    pub(crate) fn counters(&self, index: usize) -> Option<&RuleCounters> {
        self.counters.get(index).and_then(Option::as_ref)
    }

    /// What is measured beside the decision for the rule at `index`.
    #[cfg(feature = "insight")]
    pub(crate) fn tuning(&self, index: usize) -> Option<&Tuning> {
        self.tuning.get(index)
    }
}

impl Deref for Active {
    type Target = RuleSet;

    fn deref(&self) -> &RuleSet {
        &self.rules
    }
}
