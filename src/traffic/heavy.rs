//! The clients refused most, in bounded memory: the space-saving sketch (Metwally,
//! Agrawal, El Abbadi, 2005), and a window of them.
//!
//! A sketch of capacity `k` keeps `k` counters. A client already counted adds to its own;
//! a new one takes a free counter, or — all taken — the smallest, inheriting its count
//! (remembered as the new client's possible overcount). Every client seen more than `N / k`
//! times in a stream of `N` is guaranteed a counter, and each count is at most its error
//! above the truth: memory stays `k` entries whatever the number of distinct clients.
//!
//! [`WindowedTop`] keeps one sketch per third of its window and merges the live ones, so
//! the answer covers the last window (give or take a third) without storing any history.
//!
//! Clients are counted as values of any hashable type (the traffic registry counts the
//! request's `Client` itself: an address is hashed, not formatted, on the refusal path),
//! hashed with a per-process random seed so that nobody can aim names at one chain.
//!
//! ```
//! use tollgate::traffic::SpaceSaving;
//!
//! let mut top = SpaceSaving::new(2);
//! for client in ["a", "b", "a", "c", "a"] {
//!     top.offer(client, 1);
//! }
//! let best = &top.top(1)[0];
//! assert_eq!((best.client, best.count), ("a", 3));
//! ```

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{Timestamp, duration_nanos};

/// One client's estimate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Heavy<K = String> {
    /// The client.
    pub client: K,
    /// Its count: never below the truth, at most `error` above it.
    pub count: u64,
    /// How much of `count` may belong to clients it displaced.
    pub error: u64,
}

impl<K: std::fmt::Display> Heavy<K> {
    /// The same estimate with the client written out, as reports give it.
    pub fn named(&self) -> Heavy {
        Heavy {
            client: self.client.to_string(),
            count: self.count,
            error: self.error,
        }
    }
}

type Index<K> = HashMap<K, usize, foldhash::quality::RandomState>;

/// The space-saving sketch; see the [`traffic`](crate::traffic) module docs.
#[derive(Clone, Debug)]
pub struct SpaceSaving<K> {
    capacity: usize,
    entries: Vec<Heavy<K>>,
    index: Index<K>,
}

impl<K: Hash + Eq + Clone> SpaceSaving<K> {
    /// A sketch of `capacity` counters (at least one). Nothing is allocated until the
    /// first client is counted: a rule nobody is refused by costs no counters.
    pub fn new(capacity: usize) -> SpaceSaving<K> {
        SpaceSaving {
            capacity: capacity.max(1),
            entries: Vec::new(),
            index: Index::default(),
        }
    }

    /// Counts `weight` occurrences of `client`.
    pub fn offer(&mut self, client: K, weight: u64) {
        if let Some(&at) = self.index.get(&client) {
            if let Some(entry) = self.entries.get_mut(at) {
                entry.count = entry.count.saturating_add(weight);
            }
            return;
        }
        if self.entries.len() < self.capacity {
            self.index.insert(client.clone(), self.entries.len());
            self.entries.push(Heavy {
                client,
                count: weight,
                error: 0,
            });
            return;
        }
        // Full: the smallest counter goes to the newcomer, count and all.
        let Some((at, smallest)) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, entry)| entry.count)
            .map(|(at, entry)| (at, entry.count))
        else {
            return;
        };
        if let Some(entry) = self.entries.get_mut(at) {
            self.index.remove(&entry.client);
            self.index.insert(client.clone(), at);
            *entry = Heavy {
                client,
                count: smallest.saturating_add(weight),
                error: smallest,
            };
        }
    }

    /// The `n` largest counts, largest first.
    pub fn top(&self, n: usize) -> Vec<Heavy<K>> {
        let mut top = self.entries.clone();
        top.sort_by_key(|heavy| std::cmp::Reverse(heavy.count));
        top.truncate(n);
        top
    }

    /// Counters in use.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
    }
}

/// The clients counted most over roughly the last `window`: three sketches, one per third
/// of the window, the oldest dropped as a new third begins.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::Timestamp;
/// use tollgate::traffic::WindowedTop;
///
/// let mut top = WindowedTop::new(Duration::from_secs(900), 16);
/// let now = Timestamp::from_unix_nanos(1_000_000_000_000);
/// top.offer(now, "203.0.113.7");
/// assert_eq!(top.top(now, 5)[0].client, "203.0.113.7");
/// let much_later = now + Duration::from_secs(3_600);
/// assert!(top.top(much_later, 5).is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct WindowedTop<K> {
    third: u64,
    /// Each sketch with the number of the third it counts (`u64::MAX`: none yet).
    sketches: [(u64, SpaceSaving<K>); 3],
}

impl<K: Hash + Eq + Clone> WindowedTop<K> {
    /// Over `window`, `capacity` counters per third.
    pub fn new(window: Duration, capacity: usize) -> WindowedTop<K> {
        let sketch = || (u64::MAX, SpaceSaving::new(capacity));
        WindowedTop {
            third: (duration_nanos(window) / 3).max(1),
            sketches: [sketch(), sketch(), sketch()],
        }
    }

    /// Counts one occurrence of `client` at `now`.
    pub fn offer(&mut self, now: Timestamp, client: K) {
        self.offer_weighted(now, client, 1);
    }

    /// Counts `weight` refusals of `client` at `now` (a sample standing for them).
    pub fn offer_weighted(&mut self, now: Timestamp, client: K, weight: u64) {
        let number = now.as_unix_nanos() / self.third;
        let (held, sketch) = &mut self.sketches[(number % 3) as usize];
        if *held != number {
            if *held != u64::MAX && *held > number {
                return; // older than the third this sketch now counts
            }
            sketch.clear();
            *held = number;
        }
        sketch.offer(client, weight);
    }

    /// The `n` clients counted most in the thirds still within the window at `now`.
    pub fn top(&self, now: Timestamp, n: usize) -> Vec<Heavy<K>> {
        let current = now.as_unix_nanos() / self.third;
        let mut merged: Index<K> = Index::default();
        let mut top: Vec<Heavy<K>> = Vec::new();
        for (held, sketch) in &self.sketches {
            if *held == u64::MAX || *held > current || current - *held > 2 {
                continue;
            }
            for entry in &sketch.entries {
                match merged.get(&entry.client) {
                    Some(&at) => {
                        if let Some(sum) = top.get_mut(at) {
                            sum.count = sum.count.saturating_add(entry.count);
                            sum.error = sum.error.saturating_add(entry.error);
                        }
                    }
                    None => {
                        merged.insert(entry.client.clone(), top.len());
                        top.push(entry.clone());
                    }
                }
            }
        }
        top.sort_by_key(|heavy| std::cmp::Reverse(heavy.count));
        top.truncate(n);
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A skewed stream: client `i` of 1,000 appears in proportion to 1 / (i + 1) (Zipf),
    /// interleaved, 50,000 in all.
    fn zipf_stream() -> Vec<String> {
        let weights: Vec<f64> = (0..1_000).map(|i| 1.0 / f64::from(i + 1)).collect();
        let total: f64 = weights.iter().sum();
        let counts: Vec<usize> = weights
            .iter()
            .map(|w| (w / total * 50_000.0).round() as usize)
            .collect();
        let mut stream = Vec::new();
        let mut left = counts.clone();
        // Round-robin over the clients so heavy and light ones are mixed all along.
        while left.iter().any(|&n| n > 0) {
            for (i, n) in left.iter_mut().enumerate() {
                if *n > 0 {
                    *n -= 1;
                    stream.push(format!("198.51.{}.{}", i / 256, i % 256));
                }
            }
        }
        stream
    }

    #[test]
    fn the_sketch_finds_the_top_clients_of_a_skewed_stream_in_bounded_memory() {
        let stream = zipf_stream();
        let mut sketch = SpaceSaving::new(32);
        for client in &stream {
            sketch.offer(client.as_str(), 1);
        }
        assert_eq!(sketch.len(), 32, "never more counters than its capacity");
        let mut truth: HashMap<&str, u64> = HashMap::new();
        for client in &stream {
            *truth.entry(client.as_str()).or_insert(0) += 1;
        }
        // The three heaviest, in order; and every client seen more than N / k times (the
        // sketch's guarantee) among its counters.
        let top: Vec<&str> = sketch.top(3).into_iter().map(|h| h.client).collect();
        assert_eq!(top, ["198.51.0.0", "198.51.0.1", "198.51.0.2"]);
        let kept: Vec<&str> = sketch.top(32).into_iter().map(|h| h.client).collect();
        let bound = stream.len() as u64 / 32;
        let guaranteed: Vec<&&str> = truth
            .iter()
            .filter(|(_, n)| **n > bound)
            .map(|(c, _)| c)
            .collect();
        assert!(guaranteed.len() >= 3);
        for client in guaranteed {
            assert!(kept.contains(client), "{client} was dropped");
        }
        for heavy in &sketch.top(32) {
            let real = truth[heavy.client];
            assert!(
                heavy.count >= real,
                "never under the truth: {heavy:?} vs {real}"
            );
            assert!(
                heavy.count - heavy.error <= real,
                "at most error over: {heavy:?}"
            );
        }
    }

    #[test]
    fn a_flood_of_distinct_clients_keeps_the_sketch_at_its_capacity() {
        let mut sketch = SpaceSaving::new(16);
        // 100,000 one-off clients, and a steady offender once in every eleven requests.
        for i in 0..100_000u32 {
            sketch.offer(format!("flood-{i}"), 1);
            if i % 10 == 0 {
                sketch.offer("203.0.113.7".to_owned(), 1);
            }
        }
        assert_eq!(sketch.len(), 16);
        assert!(sketch.index.len() <= 16);
        // Above N / k it is guaranteed a counter, and nothing else comes near it.
        let top = sketch.top(1);
        assert_eq!(top[0].client, "203.0.113.7", "{:?}", sketch.top(16));
        assert!(top[0].count >= 10_000);
    }

    #[test]
    fn the_window_forgets_thirds_that_have_passed() {
        let third = Duration::from_secs(300);
        let mut top = WindowedTop::new(3 * third, 8);
        let start = Timestamp::from_unix_nanos(1_767_225_600 * 1_000_000_000);
        for _ in 0..10 {
            top.offer(start, "early");
        }
        let later = start + third;
        for _ in 0..3 {
            top.offer(later, "late");
        }
        let both = top.top(later, 5);
        assert_eq!(both[0].client, "early");
        assert_eq!(both[1].client, "late");
        // Three thirds on, the first third has left the window; "late" is still in it.
        let after = start + 3 * third;
        let left = top.top(after, 5);
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].client, left[0].count), ("late", 3));
        // Counting there reuses the first third's sketch: "early" is gone for good.
        top.offer(after, "new");
        assert!(top.top(after, 5).iter().all(|h| h.client != "early"));
    }
}
