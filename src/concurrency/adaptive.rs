//! The adaptive concurrency limit (`concurrency = "adaptive"`): a gradient controller in
//! the manner of Envoy's adaptive concurrency filter, pure arithmetic over injected times.
//!
//! # The controller
//!
//! Every window (100 ms) the median latency of the requests that completed successfully in
//! it, `sample`, is compared with the upstream's no-load latency, `baseline`:
//!
//! ```text
//! gradient = clamp(baseline × 1.05 / sample, 0.5, 2.0)
//! limit    = gradient × limit + log10(limit)      (within [min, max])
//! ```
//!
//! While latency stays near the baseline the limit grows (5 % and a little headroom a
//! window); once requests queue at the upstream, latency grows with the limit and the
//! gradient pulls the limit back to where latency is flat. With an upstream of `C` workers
//! the fixed point is about `1.05·C + log10(C)`.
//!
//! # Measuring the baseline, even in the middle of an overload
//!
//! A baseline learnt as a long-term average of observed latency learns queueing as normal
//! and creeps upward (Netflix Gradient2's reported creep); one kept as the minimum ever seen
//! ratchets (Envoy's minRTT can only be refreshed by measuring it again). So the baseline is
//! *measured*, as Envoy does: the controller starts in a **probe**, and probes again every
//! 30 s (±15 %, jittered so that gateways do not probe together) and whenever the limit has
//! sat at its minimum for 5 windows (a limit stuck at its minimum recovers). During a probe
//! the cap is pinned to `min`; only requests *started* during the probe, with fewer than
//! `min` in flight, count; the baseline is the median of 32 of them. The upstream's queue
//! drains while pinned, so these requests see it unloaded — even when the gateway (re)starts
//! into an overload. A probe lasts 16 request times at a `min` of 2, and the limit
//! from before it is restored after: the rejections it causes are that short dip.
//!
//! # What never raises the limit
//!
//! Failed requests (a 5xx, an error, a client gone) and refusals are not samples: a fast
//! failure cannot look like a fast upstream. A window in which fewer than half the limit were
//! ever in flight is app-limited: the limit may fall but does not grow.
//!
//! # Why not a crate
//!
//! The tower adaptive-limiter crates on crates.io (e.g. `tower-limit`'s static limit,
//! adaptive forks of Netflix's algorithms) queue requests inside a `Service` and adapt one
//! limit per service; tollgate refuses at once (or waits a bounded `max_delay`), keeps a
//! limit per rule next to its rate, and needs the probe above, which none of them has.

/// Latency samples are aggregated over windows this long.
pub const WINDOW_NANOS: u64 = 100_000_000;
/// A probe ends after this many samples.
pub const PROBE_SAMPLES: usize = 32;
/// A probe gives up after this long (too little traffic), keeping what it measured if any.
pub const PROBE_TIMEOUT_NANOS: u64 = 5_000_000_000;
/// Probes recur about this often (±15 %).
pub const PROBE_EVERY_NANOS: u64 = 30_000_000_000;
/// Tolerated latency over the baseline before the limit stops growing.
const BUFFER: f64 = 0.05;
/// Windows at the minimum before a probe is forced.
const STUCK_WINDOWS: u32 = 5;

/// `concurrency = "adaptive"`'s numbers.
///
/// ```
/// let settings = tollgate::AdaptiveSettings::default();
/// assert_eq!((settings.min, settings.initial, settings.max), (2, 20, 1000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AdaptiveSettings {
    /// The lowest limit, and the concurrency the baseline is measured at.
    pub min: u32,
    /// The highest limit.
    pub max: u32,
    /// The limit to start from once the baseline is known.
    pub initial: u32,
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        AdaptiveSettings {
            min: 2,
            max: 1000,
            initial: 20,
        }
    }
}

/// One request that completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When it was admitted (ns, the limiter's clock).
    pub started: u64,
    /// When its response arrived.
    pub finished: u64,
    /// Requests in flight when it was admitted, itself included.
    pub in_flight: u32,
    /// Whether it succeeded (not a 5xx, an error, or dropped).
    pub ok: bool,
}

#[derive(Clone, Debug)]
enum Phase {
    /// Measuring the baseline: the cap is `min`; the limit to restore after.
    Probe {
        since: u64,
        samples: Vec<u64>,
        resume: f64,
    },
    /// Following the gradient until the next probe is due.
    Follow { next_probe: u64 },
}

/// One rule's adaptive limit.
#[derive(Clone, Debug)]
pub struct Controller {
    settings: AdaptiveSettings,
    limit: f64,
    baseline: Option<u64>,
    phase: Phase,
    window_start: u64,
    window: Vec<u64>,
    window_peak: u32,
    at_min: u32,
    random: u64,
}

impl Controller {
    /// A controller starting at `now` with a probe; `seed` jitters its probes.
    pub fn new(settings: AdaptiveSettings, now: u64, seed: u64) -> Controller {
        let settings = AdaptiveSettings {
            min: settings.min.max(1),
            max: settings.max.max(settings.min.max(1)),
            initial: settings
                .initial
                .clamp(settings.min.max(1), settings.max.max(1)),
        };
        Controller {
            settings,
            limit: f64::from(settings.initial),
            baseline: None,
            phase: Phase::Probe {
                since: now,
                samples: Vec::new(),
                resume: f64::from(settings.initial),
            },
            window_start: now,
            window: Vec::new(),
            window_peak: 0,
            at_min: 0,
            random: seed | 1,
        }
    }

    /// The cap in force: `min` during a probe, else the limit.
    pub fn limit(&self) -> u32 {
        match self.phase {
            Phase::Probe { .. } => self.settings.min,
            Phase::Follow { .. } => self.limit.round() as u32,
        }
    }

    /// The no-load latency last measured (ns).
    pub fn baseline(&self) -> Option<u64> {
        self.baseline
    }

    /// Whether the baseline is being measured now.
    pub fn probing(&self) -> bool {
        matches!(self.phase, Phase::Probe { .. })
    }

    /// The settings in force.
    pub fn settings(&self) -> AdaptiveSettings {
        self.settings
    }

    /// New numbers from a reload: the limit is kept within them.
    pub fn reconfigure(&mut self, settings: AdaptiveSettings) {
        let fresh = Controller::new(settings, 0, 1);
        self.settings = fresh.settings;
        self.limit = self
            .limit
            .clamp(f64::from(self.settings.min), f64::from(self.settings.max));
    }

    /// Learns from one completed request at `now` (normally `sample.finished`).
    pub fn record(&mut self, sample: Sample, now: u64) {
        let latency = sample.finished.saturating_sub(sample.started);
        match &mut self.phase {
            Phase::Probe {
                since,
                samples,
                resume,
            } => {
                // Only requests started in the probe, with the upstream no busier than `min`.
                if sample.ok && sample.started >= *since && sample.in_flight <= self.settings.min {
                    samples.push(latency);
                }
                let timed_out = now.saturating_sub(*since) >= PROBE_TIMEOUT_NANOS;
                if samples.len() >= PROBE_SAMPLES || timed_out {
                    if let Some(median) = median(samples) {
                        self.baseline = Some(median.max(1));
                    }
                    if self.baseline.is_some() {
                        self.limit = *resume;
                        let next_probe = now.saturating_add(self.jittered_interval());
                        self.phase = Phase::Follow { next_probe };
                        self.window_start = now;
                        self.window.clear();
                        self.window_peak = 0;
                        self.at_min = 0;
                    } else {
                        // Nothing measured yet: keep probing, from now.
                        *since = now;
                    }
                }
            }
            Phase::Follow { next_probe } => {
                let next_probe = *next_probe;
                if sample.ok {
                    self.window.push(latency);
                }
                self.window_peak = self.window_peak.max(sample.in_flight);
                if now.saturating_sub(self.window_start) >= WINDOW_NANOS {
                    self.close_window(now);
                }
                if now >= next_probe || self.at_min >= STUCK_WINDOWS {
                    self.start_probe(now);
                }
            }
        }
    }

    /// Moves the limit along the gradient of the window just ended.
    fn close_window(&mut self, now: u64) {
        let (min, max) = (f64::from(self.settings.min), f64::from(self.settings.max));
        if let (Some(sample), Some(baseline)) = (median(&mut self.window), self.baseline) {
            let gradient =
                (baseline as f64 * (1.0 + BUFFER) / sample.max(1) as f64).clamp(0.5, 2.0);
            let headroom = self.limit.log10().max(1.0);
            let mut next = gradient * self.limit + headroom;
            // App-limited: fewer than half the limit in flight says nothing about more.
            if f64::from(self.window_peak) < self.limit / 2.0 {
                next = next.min(self.limit);
            }
            self.limit = next.clamp(min, max);
        }
        self.at_min = if self.limit.round() <= min {
            self.at_min + 1
        } else {
            0
        };
        self.window_start = now;
        self.window.clear();
        self.window_peak = 0;
    }

    fn start_probe(&mut self, now: u64) {
        let resume = if self.at_min >= STUCK_WINDOWS {
            f64::from(self.settings.initial).max(self.limit)
        } else {
            self.limit
        };
        self.phase = Phase::Probe {
            since: now,
            samples: Vec::new(),
            resume,
        };
        self.at_min = 0;
    }

    /// The probe interval, ±15 %: xorshift, seeded per controller.
    fn jittered_interval(&mut self) -> u64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let unit = (self.random % 10_000) as f64 / 10_000.0;
        (PROBE_EVERY_NANOS as f64 * (0.85 + 0.3 * unit)) as u64
    }
}

/// The median of `values` (sorted in place); `None` when empty.
fn median(values: &mut [u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let middle = values.len() / 2;
    let (_, value, _) = values.select_nth_unstable(middle);
    Some(*value)
}

#[cfg(test)]
mod tests;
