//! [`Traffic`]: every rule's traffic over time — a ring of counts and the most refused
//! clients per rule, by rule name so a reload keeps a rule's history — and the reports
//! the operator's page reads. Feature `insight`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

#[cfg(feature = "insight")]
use super::candidates::CandidateTraffic;
use super::heavy::{Heavy, WindowedTop};
#[cfg(feature = "insight")]
use super::peaks::PeakTracker;
use super::ring::{Counts, SlotCounts, TrafficRing, unix_seconds};
use super::seen::Seen;
use super::watch::{REFUSAL_SAMPLE, SAMPLE, Sampler, Watch};
use crate::clock::Timestamp;
use crate::key::Client;

/// Every rule's traffic, and the total; see the [module docs](crate::traffic).
pub struct Traffic {
    span: Duration,
    resolution: Duration,
    total: Arc<TrafficRing>,
    /// Whether someone reads the history: every request counted, or a sample.
    watch: Arc<Watch>,
    rules: RwLock<HashMap<Arc<str>, Arc<RuleTraffic>>>,
    /// Candidate limits' records, by rule name and label.
    #[cfg(feature = "insight")]
    candidates: RwLock<HashMap<CandidateName, Arc<CandidateTraffic>>>,
    /// Peak trackers, by rule name.
    #[cfg(feature = "insight")]
    peaks: RwLock<HashMap<Arc<str>, Arc<PeakTracker>>>,
}

/// A candidate limit's rule name and label.
#[cfg(feature = "insight")]
type CandidateName = (Arc<str>, Arc<str>);

/// One rule's traffic: its ring, and its most refused clients.
pub struct RuleTraffic {
    name: Arc<str>,
    ring: TrafficRing,
    total: Arc<TrafficRing>,
    watch: Arc<Watch>,
    /// Which requests, and which refusals, count while nobody reads the history.
    sampler: Sampler,
    refusals: Sampler,
    refused: Mutex<WindowedTop<Client<'static>>>,
    /// Reservations settled from responses (`cost = { reserve, from }`), since start.
    tokens: TokenTotals,
}

/// Tokens of a reserving rule's settled responses, since start.
#[derive(Debug, Default)]
struct TokenTotals {
    settlements: std::sync::atomic::AtomicU64,
    reserved: std::sync::atomic::AtomicU64,
    used: std::sync::atomic::AtomicU64,
    /// Usage by kind (`from = "usage"`): input, cached, output.
    kinds: [std::sync::atomic::AtomicU64; 3],
    /// A money rule's unit in micro-units of its currency (0: tokens), and the currency.
    unit_micros: std::sync::atomic::AtomicU64,
    currency: std::sync::atomic::AtomicU32,
}

/// What a reserving rule's responses cost, since start ([`RuleReport::tokens`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    /// Responses settled (a figure read, or the reservation kept).
    pub settlements: u64,
    /// Tokens reserved for them at admission.
    pub reserved: u64,
    /// Tokens they came to (the figure, or the reservation where none was usable).
    pub used: u64,
    /// Of the usage read (`from = "usage"`): input tokens not cached, cached and output.
    pub input: u64,
    /// See [`Tokens::input`].
    pub cached: u64,
    /// See [`Tokens::input`].
    pub output: u64,
    /// For a money rule (`rate = "$50/month"`): its currency; `reserved` and `used` then
    /// count [`unit_micros`](Tokens::unit_micros) millionths of it each.
    pub currency: Option<char>,
    /// See [`Tokens::currency`].
    pub unit_micros: u64,
}

impl Tokens {
    /// `units` of a money rule in whole cents (rounded down); `None` for a token rule.
    pub fn cents(&self, units: u64) -> Option<u64> {
        self.currency?;
        u64::try_from(u128::from(units) * u128::from(self.unit_micros) / 10_000).ok()
    }
}

impl RuleTraffic {
    /// Counts one request decided at `now` (in the rule's ring and the total): one by one
    /// while someone reads the history, else one in 64 as 64, and one refusal in 8 as 8
    /// (see [`TrafficReport::exact_since`]).
    #[inline]
    pub fn record(&self, now: Timestamp, seen: Seen) {
        if let Some(weight) = self.weight(now, seen) {
            self.add(now, seen, weight);
        }
    }

    /// How many requests this one counts as: 1 while someone reads the history; else the
    /// sample's size for a sampled request, `None` for one left out.
    #[inline]
    fn weight(&self, now: Timestamp, seen: Seen) -> Option<u64> {
        if self.watch.watched(now) {
            return Some(1);
        }
        let (sampler, every) = match seen {
            Seen::Refused => (&self.refusals, REFUSAL_SAMPLE),
            _ => (&self.sampler, SAMPLE),
        };
        sampler.take(every).then_some(u64::from(every))
    }

    fn add(&self, now: Timestamp, seen: Seen, n: u64) {
        self.ring.add(now, seen, n);
        self.total.add(now, seen, n);
    }

    /// Counts one refusal of `client` at `now`: recorded as [`Seen::Refused`], and offered
    /// to the rule's top refused clients (an address is copied, not formatted; a header
    /// identity is copied once per refusal counted) — sampled as [`RuleTraffic::record`]
    /// says while nobody reads the history.
    pub fn refused(&self, now: Timestamp, client: &Client<'_>) {
        let Some(weight) = self.weight(now, Seen::Refused) else {
            return;
        };
        self.add(now, Seen::Refused, weight);
        let client = client.clone().into_owned();
        self.refused.lock().offer_weighted(now, client, weight);
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counts one settled reservation: `reserved` at admission, `used` in the end.
    pub fn settled(&self, reserved: u64, used: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.tokens.settlements.fetch_add(1, Relaxed);
        self.tokens.reserved.fetch_add(reserved, Relaxed);
        self.tokens.used.fetch_add(used, Relaxed);
    }

    /// Counts the usage one response reported, by kind: input, cached, output.
    pub fn usage(&self, input: u64, cached: u64, output: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        for (total, n) in self.tokens.kinds.iter().zip([input, cached, output]) {
            total.fetch_add(n, Relaxed);
        }
    }

    /// Says the rule counts money: `unit_micros` millionths of `currency` a token.
    pub fn counts_money(&self, currency: char, unit_micros: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.tokens.unit_micros.store(unit_micros, Relaxed);
        self.tokens.currency.store(u32::from(currency), Relaxed);
    }

    /// The rule's settled reservations so far.
    pub fn tokens(&self) -> Tokens {
        use std::sync::atomic::Ordering::Relaxed;
        let unit_micros = self.tokens.unit_micros.load(Relaxed);
        Tokens {
            settlements: self.tokens.settlements.load(Relaxed),
            reserved: self.tokens.reserved.load(Relaxed),
            used: self.tokens.used.load(Relaxed),
            input: self.tokens.kinds[0].load(Relaxed),
            cached: self.tokens.kinds[1].load(Relaxed),
            output: self.tokens.kinds[2].load(Relaxed),
            currency: (unit_micros > 0)
                .then(|| char::from_u32(self.tokens.currency.load(Relaxed)))
                .flatten(),
            unit_micros,
        }
    }
}

impl std::fmt::Debug for RuleTraffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleTraffic")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What [`Traffic::report`] returns: the series of every tracked rule and of the total.
#[derive(Clone, Debug, Serialize)]
pub struct TrafficReport {
    /// Seconds per slot.
    pub resolution_secs: f64,
    /// Seconds covered.
    pub span_secs: u64,
    /// Since when every request has been counted one by one (UNIX seconds): reading the
    /// history turns that on for one span. Before it, admitted, delayed and shadow-refused
    /// requests were sampled — one in [`TrafficReport::sample`] counted as that many — and
    /// refusals one in [`TrafficReport::refusal_sample`], in the charts and the most
    /// refused clients alike: those counts are estimates.
    #[serde(serialize_with = "unix_seconds")]
    pub exact_since: Timestamp,
    /// See [`TrafficReport::exact_since`].
    pub sample: u32,
    /// See [`TrafficReport::exact_since`].
    pub refusal_sample: u32,
    /// Every request's counts over the span.
    pub total: Counts,
    /// The total per slot, oldest first.
    pub series: Vec<SlotCounts>,
    /// The rules that saw traffic in the span, most refusals first.
    pub rules: Vec<RuleReport>,
}

/// One rule in a [`TrafficReport`].
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    /// The rule's name.
    pub rule: String,
    /// Its counts over the span.
    pub total: Counts,
    /// Per slot, oldest first.
    pub series: Vec<SlotCounts>,
    /// The clients it refused most over the span (approximately: see [`Heavy`]).
    pub top_refused: Vec<Heavy>,
    /// For a rule that reserves and settles: its settled responses' tokens since start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
}

/// Counters kept per third of the window for the top refused clients.
const TOP_CAPACITY: usize = 32;

impl Traffic {
    /// Most rules tracked one by one.
    pub const MAX_RULES: usize = 1_000;

    /// 15 minutes at 5 s: what the admin page shows.
    pub const DEFAULT_SPAN: Duration = Duration::from_secs(900);
    /// See [`Traffic::DEFAULT_SPAN`].
    pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(5);

    /// Empty, over `span` in slots of `resolution`.
    pub fn new(span: Duration, resolution: Duration) -> Traffic {
        Traffic {
            span,
            resolution,
            total: Arc::new(TrafficRing::new(span, resolution)),
            watch: Arc::new(Watch::new()),
            rules: RwLock::new(HashMap::new()),
            #[cfg(feature = "insight")]
            candidates: RwLock::new(HashMap::new()),
            #[cfg(feature = "insight")]
            peaks: RwLock::new(HashMap::new()),
        }
    }

    #[cfg(feature = "insight")]
    /// Most candidate limits tracked (a day's ring each, about 60 KiB).
    pub const MAX_CANDIDATES: usize = 256;

    #[cfg(feature = "insight")]
    /// The record of candidate `label` of the rule named `rule`, made on first use (so a
    /// reload that keeps the candidate keeps its history); `None` past
    /// [`Traffic::MAX_CANDIDATES`].
    pub fn candidate(&self, rule: &str, label: &str) -> Option<Arc<CandidateTraffic>> {
        let key = (Arc::<str>::from(rule), Arc::<str>::from(label));
        if let Some(found) = self.candidates.read().get(&key) {
            return Some(Arc::clone(found));
        }
        let mut candidates = self.candidates.write();
        if let Some(found) = candidates.get(&key) {
            return Some(Arc::clone(found));
        }
        if candidates.len() >= Traffic::MAX_CANDIDATES {
            return None;
        }
        let record = Arc::new(CandidateTraffic::new(
            Arc::clone(&key.0),
            Arc::clone(&key.1),
        ));
        candidates.insert(key, Arc::clone(&record));
        Some(record)
    }

    #[cfg(feature = "insight")]
    /// The peak tracker of the rule named `rule`, counting in windows of `window` and
    /// keeping at most `capacity` clients: made on first use, kept across reloads, and
    /// begun afresh if the window changed. `None` past [`Traffic::MAX_RULES`].
    pub fn peaks(&self, rule: &str, window: Duration, capacity: usize) -> Option<Arc<PeakTracker>> {
        if let Some(found) = self.peaks.read().get(rule)
            && found.window() == window
        {
            found.set_capacity(capacity);
            return Some(Arc::clone(found));
        }
        let mut peaks = self.peaks.write();
        if let Some(found) = peaks.get(rule)
            && found.window() == window
        {
            return Some(Arc::clone(found));
        }
        if peaks.len() >= Traffic::MAX_RULES && !peaks.contains_key(rule) {
            return None;
        }
        let tracker = Arc::new(PeakTracker::new(window, capacity));
        peaks.insert(Arc::from(rule), Arc::clone(&tracker));
        Some(tracker)
    }

    #[cfg(feature = "insight")]
    /// The peak tracker of the rule named `rule`, if one was made.
    pub fn peaks_of(&self, rule: &str) -> Option<Arc<PeakTracker>> {
        self.peaks.read().get(rule).cloned()
    }

    #[cfg(feature = "insight")]
    /// Folds every tracker's idle clients into its sketch; how many went.
    pub fn sweep_peaks(&self, now: Timestamp) -> usize {
        let trackers: Vec<Arc<PeakTracker>> = self.peaks.read().values().cloned().collect();
        trackers.iter().map(|tracker| tracker.sweep(now)).sum()
    }

    /// The traffic of the rule named `name`, made on first use; `None` past
    /// [`Traffic::MAX_RULES`] rules.
    pub fn rule(&self, name: &str) -> Option<Arc<RuleTraffic>> {
        if let Some(found) = self.rules.read().get(name) {
            return Some(Arc::clone(found));
        }
        let mut rules = self.rules.write();
        if let Some(found) = rules.get(name) {
            return Some(Arc::clone(found));
        }
        if rules.len() >= Traffic::MAX_RULES {
            return None;
        }
        let name: Arc<str> = Arc::from(name);
        let traffic = Arc::new(RuleTraffic {
            name: Arc::clone(&name),
            ring: TrafficRing::new(self.span, self.resolution),
            total: Arc::clone(&self.total),
            watch: Arc::clone(&self.watch),
            sampler: Sampler::default(),
            refusals: Sampler::default(),
            refused: Mutex::new(WindowedTop::new(self.span, TOP_CAPACITY)),
            tokens: TokenTotals::default(),
        });
        rules.insert(name, Arc::clone(&traffic));
        Some(traffic)
    }

    /// Every series as of `now`, with up to `top` refused clients per rule. Reading is what
    /// makes every request count one by one for the next span
    /// ([`TrafficReport::exact_since`]).
    pub fn report(&self, now: Timestamp, top: usize) -> TrafficReport {
        let exact_since = self.watch.read(now, self.span);
        let mut rules: Vec<RuleReport> = self
            .rules
            .read()
            .values()
            .filter_map(|rule| {
                let series = rule.ring.series(now);
                let total = Counts::of(&series);
                (total != Counts::default()).then(|| RuleReport {
                    rule: rule.name.to_string(),
                    total,
                    series,
                    top_refused: rule
                        .refused
                        .lock()
                        .top(now, top)
                        .into_iter()
                        .map(|heavy| heavy.named())
                        .collect(),
                    tokens: Some(rule.tokens()).filter(|t| t.settlements > 0),
                })
            })
            .collect();
        rules.sort_by(|a, b| {
            (b.total.refused, b.total.shadow_refused, b.total.admitted)
                .cmp(&(a.total.refused, a.total.shadow_refused, a.total.admitted))
                .then_with(|| a.rule.cmp(&b.rule))
        });
        let series = self.total.series(now);
        let total = Counts::of(&series);
        TrafficReport {
            resolution_secs: self.resolution.as_secs_f64(),
            span_secs: self.span.as_secs(),
            exact_since,
            sample: SAMPLE,
            refusal_sample: REFUSAL_SAMPLE,
            total,
            series,
            rules,
        }
    }
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic")
            .field("span", &self.span)
            .field("resolution", &self.resolution)
            .field("rules", &self.rules.read().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    #[test]
    fn rules_are_listed_by_refusals_and_the_total_adds_them_up() {
        let traffic = Traffic::new(Duration::from_secs(60), Duration::from_secs(5));
        let now = FakeClock::new().now();
        // Someone is reading: every request counts one by one.
        traffic.report(now, 0);
        let (search, login) = (
            traffic.rule("search").unwrap(),
            traffic.rule("login").unwrap(),
        );
        for _ in 0..5 {
            search.record(now, Seen::Admitted);
        }
        login.record(now, Seen::Admitted);
        let (heavy, light) = (
            Client::from_segment("203.0.113.7"),
            Client::from_segment("198.51.100.1"),
        );
        login.refused(now, &heavy);
        login.refused(now, &heavy);
        login.refused(now, &light);
        let idle = traffic.rule("idle").unwrap();
        drop(idle);
        let report = traffic.report(now, 5);
        let names: Vec<&str> = report.rules.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(
            names,
            ["login", "search"],
            "most refused first; idle rules left out"
        );
        assert_eq!(report.total.total(), 9);
        assert_eq!(report.total.refused, 3);
        let top = &report.rules[0].top_refused;
        assert_eq!((top[0].client.as_str(), top[0].count), ("203.0.113.7", 2));
        assert_eq!(report.series.len(), 12);
        // The same name is the same history (a reload keeps a rule's traffic).
        assert!(Arc::ptr_eq(&login, &traffic.rule("login").unwrap()));
    }

    #[test]
    fn unread_history_is_sampled_and_a_read_makes_it_exact() {
        let traffic = Traffic::new(Duration::from_secs(60), Duration::from_secs(5));
        let clock = FakeClock::new();
        let api = traffic.rule("api").unwrap();
        let client = Client::from_segment("203.0.113.7");
        for _ in 0..640 {
            api.record(clock.now(), Seen::Admitted);
        }
        for _ in 0..3 {
            api.refused(clock.now(), &client);
        }
        api.record(clock.now(), Seen::Admitted);
        let report = traffic.report(clock.now(), 5);
        let rule = &report.rules[0];
        // 641 admissions: the 1st, 65th, … 641st counted, as 64 each.
        assert_eq!(rule.total.admitted, 11 * u64::from(SAMPLE));
        // 3 refusals: the first counted, as 8, in the chart and the most refused alike.
        assert_eq!(rule.total.refused, u64::from(REFUSAL_SAMPLE));
        assert_eq!(rule.top_refused[0].count, u64::from(REFUSAL_SAMPLE));
        assert_eq!(report.exact_since, clock.now(), "exact from this read on");
        // Read: every request counts from now on, for one span.
        clock.advance(Duration::from_secs(5));
        for _ in 0..5 {
            api.record(clock.now(), Seen::Admitted);
        }
        let report = traffic.report(clock.now(), 5);
        let last = report.rules[0].series.last().unwrap().counts;
        assert_eq!(last.admitted, 5);
        let five_ago = Timestamp::from_unix_nanos(clock.now().as_unix_nanos() - 5_000_000_000);
        assert_eq!(report.exact_since, five_ago);
        // Unread for a whole span: sampling again, and the next read says so.
        clock.advance(Duration::from_secs(61));
        for _ in 0..SAMPLE {
            api.record(clock.now(), Seen::Admitted);
        }
        let report = traffic.report(clock.now(), 5);
        assert_eq!(report.rules[0].total.admitted, u64::from(SAMPLE));
        assert_eq!(report.exact_since, clock.now());
    }

    #[test]
    fn the_number_of_rules_tracked_is_bounded() {
        let traffic = Traffic::new(Duration::from_secs(60), Duration::from_secs(5));
        for i in 0..Traffic::MAX_RULES {
            assert!(traffic.rule(&format!("rule-{i}")).is_some());
        }
        assert!(traffic.rule("one-too-many").is_none());
        assert!(
            traffic.rule("rule-0").is_some(),
            "known rules are still found"
        );
    }
}
