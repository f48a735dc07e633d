//! Each client's peak rate under a rule, for suggested limits: see [`PeakTracker`].

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sketches_ddsketch::{Config, DDSketch};

use crate::clock::{Timestamp, duration_nanos};
use crate::key::Client;

/// Clients whose names are kept, the heaviest peaks.
pub(crate) const HEAVY: usize = 64;

/// Shards of the per-client table.
const SHARDS: usize = 16;

/// A client idle this long (and two windows) is folded into the sketch.
const IDLE: Duration = Duration::from_secs(900);

/// The keys are already hashes: the table hashes them no further.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Table = HashMap<u64, Counts, BuildHasherDefault<Prehashed>>;

/// One client's counts: 28 bytes with its key.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// The window counted (its number since the epoch, truncated).
    window: u32,
    requests: u32,
    cost: u32,
    peak_requests: u32,
    peak_cost: u32,
}

impl Counts {
    /// The most it sent in one window, the open one included.
    fn peak_requests(&self) -> u32 {
        self.peak_requests.max(self.requests)
    }

    fn peak_cost(&self) -> u32 {
        self.peak_cost.max(self.cost)
    }
}

/// Each client's peak rate under a rule, for suggested limits: the most requests (and the
/// most cost) it sent in any one of the rule's windows, and the distribution of those peaks
/// over clients.
///
/// Per client, in a table of at most `[store] max_buckets` entries: the window being
/// counted, its requests and cost so far, and the largest counts of its windows before
/// (keyed by a seeded hash of the client, 28 bytes an entry). A client idle for two windows
/// and fifteen minutes, or pushed out when the table is full (the lowest peaks first), is
/// folded into the rule's [DDSketch](sketches_ddsketch) — fixed memory, quantiles within
/// 1 % — and forgotten; if it comes back it is a new sample. A question is answered from
/// the sketch with the table's clients added to a copy of it: one pass over the table.
/// Names are kept only for the heaviest 64 clients (offered as their windows close, and
/// every 32 requests while one is open; their exact peaks are read from the table when
/// asked), which are those a suggested limit refuses.
///
/// Windows are fixed, aligned to the Unix epoch, of the length of the rule's first rate's
/// period (a minute for `100/min`): a client's peak is the most it sent in one of them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::Timestamp;
/// use tollgate::key::Client;
/// use tollgate::traffic::PeakTracker;
///
/// let peaks = PeakTracker::new(Duration::from_secs(60), 1_000);
/// let now = Timestamp::from_unix_nanos(1_767_225_600_000_000_000);
/// for (client, requests) in [("a", 5), ("b", 10), ("c", 40)] {
///     for _ in 0..requests {
///         peaks.record(now, &Client::from_segment(client), 1);
///     }
/// }
/// let suggestion = peaks.suggest(now, 34.0);
/// assert_eq!(suggestion.clients, 3);
/// assert_eq!(suggestion.requests.max, 40);
/// // Refusing at most a third of the clients: a limit of 10 refuses only c.
/// assert_eq!(suggestion.requests.limit, 10);
/// assert_eq!(suggestion.requests.refused[0].client, "c");
/// ```
pub struct PeakTracker {
    window: u64,
    hasher: foldhash::quality::RandomState,
    shards: Box<[Mutex<Table>]>,
    held: AtomicUsize,
    capacity: AtomicUsize,
    /// Folded clients' peaks: requests, then cost.
    sketches: Mutex<(DDSketch, DDSketch)>,
    heavy: Mutex<Vec<HeavyPeak>>,
    /// The smallest peak in `heavy` once it is full: below it nobody is a candidate.
    heavy_floor: AtomicU64,
    /// Whether any request cost other than 1.
    costs_vary: AtomicBool,
    /// Clients folded into the sketch since the tracker began.
    folded: AtomicU64,
}

#[derive(Clone, Debug)]
struct HeavyPeak {
    /// The client's key in the table, where its exact counts are while it is there.
    hash: u64,
    client: Client<'static>,
    requests: u32,
    cost: u32,
}

/// The distribution of clients' peaks in one unit, and the limit a caller asked for.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeakDistribution {
    /// Half the clients peaked at or below this.
    pub p50: u64,
    /// 90 % of the clients.
    pub p90: u64,
    /// 99 %.
    pub p99: u64,
    /// 99.9 %.
    pub p999: u64,
    /// The highest peak.
    pub max: u64,
    /// The smallest limit per window that would have refused at most the asked share of
    /// clients (within the sketch's 1 %).
    pub limit: u64,
    /// The known clients whose peaks pass `limit` (heaviest first): those it would refuse.
    pub refused: Vec<PeakClient>,
}

/// A client whose peak a suggested limit would refuse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeakClient {
    /// The client's key segment.
    pub client: String,
    /// Its peak per window.
    pub peak: u64,
}

/// What [`PeakTracker::suggest`] answers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeakSuggestion {
    /// The window peaks are counted in, in seconds.
    pub window_secs: u64,
    /// Clients measured (those in the table, and those folded into the sketch).
    pub clients: u64,
    /// The share of clients the limit may refuse, in per cent.
    pub refuse_percent: f64,
    /// Peaks in requests per window.
    pub requests: PeakDistribution,
    /// Peaks in cost per window, where some request cost other than 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<PeakDistribution>,
}

fn sketch() -> DDSketch {
    // 1 % relative accuracy; at most 2,048 bins (16 KiB) whatever the values; a peak of 1
    // (the least a measured client has) is above the smallest value indexed.
    DDSketch::new(Config::new(0.01, 2_048, 0.5))
}

impl PeakTracker {
    /// A tracker counting in windows of `window`, keeping at most `capacity` clients.
    pub fn new(window: Duration, capacity: usize) -> PeakTracker {
        PeakTracker {
            window: duration_nanos(window).max(1),
            hasher: foldhash::quality::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            held: AtomicUsize::new(0),
            capacity: AtomicUsize::new(capacity.max(SHARDS)),
            sketches: Mutex::new((sketch(), sketch())),
            heavy: Mutex::new(Vec::new()),
            heavy_floor: AtomicU64::new(0),
            costs_vary: AtomicBool::new(false),
            folded: AtomicU64::new(0),
        }
    }

    /// The window peaks are counted in.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// Bounds the table to `capacity` clients (`[store] max_buckets`).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity.max(SHARDS), Ordering::Relaxed);
    }

    /// Clients in the table now.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether no client is in the table.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts one request of `client` at `now`, costing `cost`.
    pub fn record(&self, now: Timestamp, client: &Client<'_>, cost: u64) {
        if cost != 1 && !self.costs_vary.load(Ordering::Relaxed) {
            self.costs_vary.store(true, Ordering::Relaxed);
        }
        let window = (now.as_unix_nanos() / self.window) as u32;
        let hash = self.hasher.hash_one(client);
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        let Some(shard) = self.shards.get(hash as usize % SHARDS) else {
            return;
        };
        let (closed, open, added) = {
            let mut table = shard.lock();
            let mut added = false;
            let counts = table.entry(hash).or_insert_with(|| {
                added = true;
                Counts {
                    window,
                    ..Counts::default()
                }
            });
            let mut closed = None;
            if counts.window != window {
                if counts.window > window {
                    return; // a late stamp from a window already closed
                }
                counts.peak_requests = counts.peak_requests();
                counts.peak_cost = counts.peak_cost();
                closed = Some(*counts);
                counts.window = window;
                counts.requests = 0;
                counts.cost = 0;
            }
            counts.requests = counts.requests.saturating_add(1);
            counts.cost = counts.cost.saturating_add(cost);
            (closed, *counts, added)
        };
        if added {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        let floor = self.heavy_floor.load(Ordering::Relaxed);
        if let Some(closed) = closed
            && u64::from(closed.peak_requests) > floor
        {
            self.offer_heavy(hash, client, closed.peak_requests, closed.peak_cost);
        }
        if u64::from(open.requests) > floor
            && (open.requests.is_multiple_of(32) || open.requests.is_power_of_two())
        {
            self.offer_heavy(hash, client, open.peak_requests(), open.peak_cost());
        }
        if added && self.held.load(Ordering::Relaxed) > self.capacity.load(Ordering::Relaxed) {
            self.make_room();
        }
    }

    /// Keeps `client`'s name if its peak is among the heaviest.
    fn offer_heavy(&self, hash: u64, client: &Client<'_>, requests: u32, cost: u32) {
        let mut heavy = self.heavy.lock();
        if let Some(known) = heavy.iter_mut().find(|known| known.hash == hash) {
            known.requests = known.requests.max(requests);
            known.cost = known.cost.max(cost);
        } else if heavy.len() < HEAVY {
            heavy.push(HeavyPeak {
                hash,
                client: client.clone().into_owned(),
                requests,
                cost,
            });
        } else if let Some(lightest) = heavy.iter_mut().min_by_key(|known| known.requests)
            && lightest.requests < requests
        {
            *lightest = HeavyPeak {
                hash,
                client: client.clone().into_owned(),
                requests,
                cost,
            };
        }
        if heavy.len() >= HEAVY {
            let floor = heavy.iter().map(|known| known.requests).min().unwrap_or(0);
            self.heavy_floor.store(u64::from(floor), Ordering::Relaxed);
        }
    }

    /// Folds clients idle for two windows and 15 minutes into the sketch; how many went.
    pub fn sweep(&self, now: Timestamp) -> usize {
        let idle_windows = (duration_nanos(IDLE) / self.window).max(2);
        let current = (now.as_unix_nanos() / self.window) as u32;
        self.fold_where(|counts| current.saturating_sub(counts.window) as u64 > idle_windows)
    }

    /// The table is past its bound: folds the idle, then the lowest peaks, down to 15/16.
    fn make_room(&self) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let target = capacity - capacity / 16;
        let mut peaks: Vec<u32> = Vec::with_capacity(self.len());
        for shard in self.shards.iter() {
            peaks.extend(shard.lock().values().map(Counts::peak_requests));
        }
        let excess = peaks.len().saturating_sub(target);
        if excess == 0 {
            return;
        }
        let threshold = *peaks.select_nth_unstable(excess - 1).1;
        let mut budget = excess;
        self.fold_where(|counts| {
            if budget > 0 && counts.peak_requests() <= threshold {
                budget -= 1;
                true
            } else {
                false
            }
        });
    }

    /// Folds the clients `fold` picks into the sketch and drops them from the table.
    fn fold_where(&self, mut fold: impl FnMut(&Counts) -> bool) -> usize {
        let mut heavy_hashes: Vec<u64> = self.heavy.lock().iter().map(|k| k.hash).collect();
        heavy_hashes.sort_unstable();
        let (mut folded, mut heavy_folded) = (Vec::new(), Vec::new());
        for shard in self.shards.iter() {
            shard.lock().retain(|hash, counts| {
                if !fold(counts) {
                    return true;
                }
                folded.push(*counts);
                if heavy_hashes.binary_search(hash).is_ok() {
                    heavy_folded.push((*hash, *counts));
                }
                false
            });
        }
        if folded.is_empty() {
            return 0;
        }
        // A heavy client leaving the table leaves its final peak with its name.
        for known in self.heavy.lock().iter_mut() {
            if let Some((_, counts)) = heavy_folded.iter().find(|(hash, _)| *hash == known.hash) {
                known.requests = known.requests.max(counts.peak_requests());
                known.cost = known.cost.max(counts.peak_cost());
            }
        }
        self.held.fetch_sub(folded.len(), Ordering::Relaxed);
        self.folded
            .fetch_add(folded.len() as u64, Ordering::Relaxed);
        let mut sketches = self.sketches.lock();
        for counts in &folded {
            sketches.0.add(f64::from(counts.peak_requests()));
            sketches.1.add(f64::from(counts.peak_cost()));
        }
        folded.len()
    }

    /// The distribution of clients' peaks as of now, and the limit per window that would
    /// have refused at most `refuse_percent` % of them (clamped to 0–100).
    pub fn suggest(&self, _now: Timestamp, refuse_percent: f64) -> PeakSuggestion {
        let refuse_percent = if refuse_percent.is_finite() {
            refuse_percent.clamp(0.0, 100.0)
        } else {
            1.0
        };
        let (mut requests, mut cost) = self.sketches.lock().clone();
        for shard in self.shards.iter() {
            let table = shard.lock();
            for counts in table.values() {
                requests.add(f64::from(counts.peak_requests()));
                cost.add(f64::from(counts.peak_cost()));
            }
        }
        let mut heavy = self.heavy.lock().clone();
        // The heavy clients' exact peaks, from the table while they are in it (their
        // names were offered every 32 requests).
        for known in &mut heavy {
            if let Some(counts) = self
                .shards
                .get(known.hash as usize % SHARDS)
                .and_then(|shard| shard.lock().get(&known.hash).copied())
            {
                known.requests = known.requests.max(counts.peak_requests());
                known.cost = known.cost.max(counts.peak_cost());
            }
        }
        let keep = 1.0 - refuse_percent / 100.0;
        let by_requests: Vec<(String, u64)> = heavy
            .iter()
            .map(|known| (known.client.to_string(), u64::from(known.requests)))
            .collect();
        let by_cost: Vec<(String, u64)> = heavy
            .iter()
            .map(|known| (known.client.to_string(), u64::from(known.cost)))
            .collect();
        PeakSuggestion {
            window_secs: Duration::from_nanos(self.window).as_secs(),
            clients: requests.count() as u64,
            refuse_percent,
            requests: distribution(&requests, keep, by_requests),
            cost: self
                .costs_vary
                .load(Ordering::Relaxed)
                .then(|| distribution(&cost, keep, by_cost)),
        }
    }

    /// Memory held: the table's slots and the sketches' bins, roughly.
    pub fn memory_bytes(&self) -> usize {
        let table: usize = self
            .shards
            .iter()
            .map(|shard| shard.lock().capacity() * (std::mem::size_of::<(u64, Counts)>() + 1))
            .sum();
        let sketches = self.sketches.lock();
        table + (sketches.0.length() + sketches.1.length()) * 8 + HEAVY * 64
    }
}

/// The quantiles of `sketch`, and the limit keeping `keep` of its clients, with the known
/// clients above it.
fn distribution(sketch: &DDSketch, keep: f64, heavy: Vec<(String, u64)>) -> PeakDistribution {
    let at = |q: f64| -> u64 {
        sketch
            .quantile(q)
            .ok()
            .flatten()
            .map_or(0, |value| value.round() as u64)
    };
    let max = sketch.max().map_or(0, |value| value.round() as u64);
    // A limit at the quantile admits every client at or below it. Peaks are whole
    // requests and the sketch answers within 1 % of one, so the nearest whole number is
    // the peak it stands for (rounding up would turn 5.02 into 6).
    let limit = if keep >= 1.0 {
        max
    } else {
        sketch
            .quantile(keep)
            .ok()
            .flatten()
            .map_or(0, |value| value.round() as u64)
            .min(max)
    };
    let mut refused: Vec<PeakClient> = heavy
        .into_iter()
        .filter(|(_, peak)| *peak > limit)
        .map(|(client, peak)| PeakClient { client, peak })
        .collect();
    refused.sort_by(|a, b| b.peak.cmp(&a.peak).then_with(|| a.client.cmp(&b.client)));
    PeakDistribution {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        p999: at(0.999),
        max,
        limit,
        refused,
    }
}

impl std::fmt::Debug for PeakTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeakTracker")
            .field("window", &self.window())
            .field("clients", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    fn client(i: usize) -> Client<'static> {
        Client::from_segment(&format!("client-{i}")).into_owned()
    }

    #[test]
    fn a_client_s_peak_is_its_busiest_window_not_its_total() {
        let clock = FakeClock::new();
        let peaks = PeakTracker::new(Duration::from_secs(60), 1_000);
        // 30 in one minute, then 10 a minute for five minutes.
        for _ in 0..30 {
            peaks.record(clock.now(), &client(0), 1);
        }
        for _ in 0..5 {
            clock.advance(Duration::from_secs(60));
            for _ in 0..10 {
                peaks.record(clock.now(), &client(0), 1);
            }
        }
        let suggestion = peaks.suggest(clock.now(), 1.0);
        assert_eq!((suggestion.clients, suggestion.requests.max), (1, 30));
        assert!(suggestion.cost.is_none(), "every request cost 1");
    }

    #[test]
    fn idle_clients_fold_into_the_sketch_and_still_count() {
        let clock = FakeClock::new();
        let peaks = PeakTracker::new(Duration::from_secs(60), 1_000);
        for i in 0..100 {
            for _ in 0..=i {
                peaks.record(clock.now(), &client(i), 3);
            }
        }
        clock.advance(Duration::from_secs(3_600));
        assert_eq!(peaks.sweep(clock.now()), 100);
        assert!(peaks.is_empty());
        let suggestion = peaks.suggest(clock.now(), 10.0);
        assert_eq!(suggestion.clients, 100);
        assert_eq!(suggestion.requests.max, 100);
        let limit = suggestion.requests.limit;
        assert!((89..=92).contains(&limit), "{limit}");
        let cost = suggestion.cost.expect("requests cost 3");
        assert!((267..=276).contains(&cost.limit), "{}", cost.limit);
        assert_eq!(suggestion.requests.refused[0].client, "client-99");
    }

    #[test]
    fn a_client_seen_once_peaked_at_one_not_zero() {
        let clock = FakeClock::new();
        let peaks = PeakTracker::new(Duration::from_secs(60), 1_000);
        for i in 0..10 {
            peaks.record(clock.now(), &client(i), 1);
        }
        let suggestion = peaks.suggest(clock.now(), 1.0);
        assert_eq!((suggestion.requests.p50, suggestion.requests.max), (1, 1));
        assert_eq!(suggestion.requests.limit, 1);
    }

    #[test]
    fn the_table_stays_within_its_bound_under_a_flood_of_clients() {
        let clock = FakeClock::new();
        let peaks = PeakTracker::new(Duration::from_secs(60), 1_024);
        for i in 0..20_000 {
            peaks.record(clock.now(), &client(i), 1);
        }
        assert!(peaks.len() <= 1_024, "{}", peaks.len());
        assert_eq!(peaks.suggest(clock.now(), 1.0).clients, 20_000);
    }
}
