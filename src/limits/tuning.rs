//! Beside each decision, what helps choose a limit: every candidate of the rule decides
//! the request on buckets of its own, and the client's request is counted toward its peak.
//! Neither ever changes a response: a candidate's answer is only recorded, and a shared
//! store's answer is waited for on the runtime, not by the request.
//!
//! A rule without candidates or `suggest` pays a branch; one with them pays a bucket
//! update per candidate and a table update for the peak (BENCHMARKS.md measures both).

use super::Active;
use super::Limits;
use super::detached::drive_detached;
use crate::clock::Timestamp;
use crate::config::Rule;
use crate::key::Client;
use crate::store::{CheckMode, Store};

impl<St: Store> Limits<St> {
    /// Measures a request of `client` under the rule at `index` of `rules`: when `counted`
    /// (a request the rule saw, not a later settlement) its peak, and its candidates'
    /// would-be decisions; else its candidates' buckets take the same `mode` and `cost`
    /// (a charge, a refund) so that they follow the rule's.
    #[inline(always)]
    pub(crate) fn tune(
        &self,
        rules: &Active,
        index: usize,
        client: &Client<'_>,
        how: (CheckMode, Option<u64>),
        now: Timestamp,
        counted: bool,
    ) {
        if rules.rule(index).is_some_and(Rule::is_tuned) {
            self.tune_slowly(rules, index, client, how, now, counted);
        }
    }

    /// [`tune`](Self::tune) once the rule is known to measure something: for a caller that
    /// has the rule at hand and has asked [`Rule::is_tuned`] itself (the layer's path).
    #[inline(never)]
    pub(super) fn tune_slowly(
        &self,
        rules: &Active,
        index: usize,
        client: &Client<'_>,
        (mode, cost): (CheckMode, Option<u64>),
        now: Timestamp,
        counted: bool,
    ) {
        let Some(rule) = rules.rule(index) else {
            return;
        };
        if counted && let Some(peaks) = rules.tuning(index).and_then(|t| t.peaks.as_ref()) {
            peaks.record(now, client, cost.unwrap_or_else(|| rule.cost()));
        }
        if mode == CheckMode::Peek && !counted {
            return; // a look at the rule's bucket: nothing for a candidate to follow
        }
        for (_, at) in rule.candidate_indices() {
            let Some(candidate) = rules.rule(*at) else {
                continue;
            };
            let Some(future) = self.start_check(candidate, client, mode, cost, now) else {
                continue;
            };
            let record = counted
                .then(|| rules.tuning(*at).and_then(|t| t.candidate.clone()))
                .flatten();
            let client = record.as_ref().map(|_| client.clone().into_owned());
            drive_detached(future, move |result| {
                if let (Some(record), Some(client), Ok(decision)) = (record, client, result) {
                    record.decided(now, &client, decision.allowed());
                }
            });
        }
    }
}

/// What [`Limits::suggest`] answers for one rule: its limit now, the distribution of its
/// clients' peaks, and the rate that would have refused at most the asked share of them.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
pub struct Suggestion {
    /// The rule's name.
    pub rule: String,
    /// Its key as written in `[limits]` (normalised).
    pub key: String,
    /// Where it is written: the file.
    pub file: String,
    /// ... and the line of its key.
    pub line: usize,
    /// Its rates now, as rate strings (the first is the one peaks are measured against).
    pub rates: Vec<String>,
    /// The rate to write instead of the first: the suggested limit per window.
    pub suggested_rate: String,
    /// The measurements it comes from.
    #[serde(flatten)]
    pub peaks: crate::traffic::PeakSuggestion,
}

/// A rate of `count` per `period` as people write it: `37/min`, `5/s`, `900/10s`.
fn rate_text(count: u64, period: std::time::Duration) -> String {
    let count = count.clamp(1, u64::from(u32::MAX));
    let written = match period.as_secs() {
        1 if period.subsec_nanos() == 0 => "s".to_owned(),
        60 if period.subsec_nanos() == 0 => "min".to_owned(),
        3_600 if period.subsec_nanos() == 0 => "h".to_owned(),
        86_400 if period.subsec_nanos() == 0 => "day".to_owned(),
        _ => {
            // The canonical form, "N/10s", without its count.
            let one = std::num::NonZeroU32::MIN;
            let text = crate::quota::Rate::new(one, period).map_or_else(
                || format!("{}ms", period.as_millis()),
                |rate| rate.to_string(),
            );
            text.split_once('/')
                .map_or(text.clone(), |(_, period)| period.to_owned())
        }
    };
    format!("{count}/{written}")
}

impl<St: Store> Limits<St> {
    /// What each candidate limit of the rules in force would have done over the last 15
    /// minutes, hour and day, with up to `top` of the clients each would have refused most.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml(
    ///     "[limits.api]\nrate = \"100/min\"\ncandidates = [\"2/min\"]\n",
    /// )?;
    /// for _ in 0..5 {
    ///     assert!(limits.check("api/203.0.113.7", 1).await?.allowed(), "never enforced");
    /// }
    /// let report = &limits.candidates(5)[0];
    /// assert_eq!((report.rule.as_str(), report.candidate.as_str()), ("api", "2/min"));
    /// assert_eq!(report.windows[0].would_refuse, 3);
    /// assert_eq!(report.windows[0].top[0].client, "203.0.113.7");
    /// # Ok(()) }
    /// ```
    pub fn candidates(&self, top: usize) -> Vec<crate::traffic::CandidateReport> {
        let now = self.now();
        let rules = self.rules();
        rules
            .rules()
            .iter()
            .flat_map(|rule| rules.candidates(rule))
            .filter_map(|(label, candidate)| {
                let record = self.traffic().candidate(candidate.name(), label)?;
                Some(record.report(now, top))
            })
            .collect()
    }

    /// The distribution of the peaks of the clients of rule `rule` (its name, `/` for the
    /// root rule) at its window, and the limit that would have refused at most
    /// `refuse_percent` % of them. `None` when the rule measures no peaks (give it
    /// `suggest = true` or candidates).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits.api]\nrate = \"100/min\"\nsuggest = true\n")?;
    /// for (client, requests) in [("a", 3), ("b", 5), ("c", 60)] {
    ///     for _ in 0..requests {
    ///         limits.check(&format!("api/{client}"), 1).await?;
    ///     }
    /// }
    /// let suggestion = limits.suggest("api", 34.0).unwrap();
    /// assert_eq!(suggestion.suggested_rate, "5/min");
    /// assert_eq!(suggestion.peaks.requests.refused[0].client, "c");
    /// assert!(limits.suggest("elsewhere", 1.0).is_none());
    /// # Ok(()) }
    /// ```
    pub fn suggest(&self, rule: &str, refuse_percent: f64) -> Option<Suggestion> {
        let rules = self.rules();
        let found = rules
            .rules()
            .iter()
            .find(|r| r.name() == rule || r.key() == rule)?;
        let tracker = self.traffic().peaks_of(found.name())?;
        let peaks = tracker.suggest(self.now(), refuse_percent);
        Some(Suggestion {
            rule: found.name().to_owned(),
            key: found.key().to_owned(),
            file: found.origin().file.display().to_string(),
            line: found.origin().line,
            rates: found
                .quotas()
                .iter()
                .map(|quota| rate_text(u64::from(quota.rate().count()), quota.rate().period()))
                .collect(),
            suggested_rate: rate_text(peaks.requests.limit, tracker.window()),
            peaks,
        })
    }

    /// The names of the rules in force that measure their clients' peaks.
    pub fn suggesting(&self) -> Vec<String> {
        self.rules()
            .rules()
            .iter()
            .filter(|rule| rule.tracks_peaks())
            .map(|rule| rule.name().to_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::rate_text;

    #[test]
    fn rates_are_written_as_people_write_them() {
        assert_eq!(rate_text(37, Duration::from_secs(60)), "37/min");
        assert_eq!(rate_text(5, Duration::from_secs(1)), "5/s");
        assert_eq!(rate_text(900, Duration::from_secs(10)), "900/10s");
        assert_eq!(
            rate_text(0, Duration::from_secs(3_600)),
            "1/h",
            "never a zero rate"
        );
    }
}
