//! The controller against a simulated upstream: `C` workers and a FIFO queue (latency flat up
//! to `C` in flight, growing beyond), offered three times its capacity from the first moment.
//! Deterministic: simulated time, no sleeping.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;

/// An upstream of `workers` that each take `service` (±20 %, deterministic) per request,
/// first come first served.
struct Upstream {
    free_at: Vec<u64>,
    service: u64,
    random: u64,
}

impl Upstream {
    fn new(workers: usize, service: u64) -> Upstream {
        Upstream {
            free_at: vec![0; workers],
            service,
            random: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn service_time(&mut self) -> u64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let unit = (self.random % 1_000) as f64 / 1_000.0;
        (self.service as f64 * (0.8 + 0.4 * unit)) as u64
    }

    /// When a request arriving at `at` finishes.
    fn serve(&mut self, at: u64) -> u64 {
        let (index, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, free)| free)
            .unwrap_or((0, at));
        let finish = free.max(at) + self.service_time();
        if let Some(slot) = self.free_at.get_mut(index) {
            *slot = finish;
        }
        finish
    }

    /// Keeps `workers` of them: the others finish what they hold and take nothing more.
    fn resize(&mut self, workers: usize) {
        self.free_at.sort_unstable();
        self.free_at.truncate(workers);
    }
}

/// What a run saw: the cap every 10 ms, and per second what was admitted and its latency.
struct Run {
    limits: Vec<(u64, u32)>,
    controller: Controller,
}

/// Offers `3 × capacity` for `seconds`; `change` resizes the upstream at a given time.
fn simulate(workers: usize, service: u64, seconds: u64, change: Option<(u64, usize)>) -> Run {
    simulate_from(Upstream::new(workers, service), seconds, change)
}

/// The same against an upstream in any state (a backlog left by another instance, say).
fn simulate_from(mut upstream: Upstream, seconds: u64, change: Option<(u64, usize)>) -> Run {
    let (workers, service) = (upstream.free_at.len(), upstream.service);
    let mut controller = Controller::new(AdaptiveSettings::default(), 0, 7);
    let capacity_per_second = workers as u64 * SECOND / service;
    let gap = SECOND / (3 * capacity_per_second);
    let mut completions: BinaryHeap<Reverse<(u64, u64, u32)>> = BinaryHeap::new();
    let mut in_flight = 0u32;
    let mut limits = Vec::new();
    let mut next_record = 0;
    let (mut admitted, mut refused, mut latencies) = (0u64, 0u64, Vec::new());
    let mut changed = false;
    let mut now = 0;
    while now < seconds * SECOND {
        if let Some((at, size)) = change
            && !changed
            && now >= at
        {
            upstream.resize(size);
            changed = true;
        }
        while let Some(&Reverse((finish, started, seen))) = completions.peek() {
            if finish > now {
                break;
            }
            completions.pop();
            in_flight -= 1;
            latencies.push(finish - started);
            let sample = Sample {
                started,
                finished: finish,
                in_flight: seen,
                ok: true,
            };
            controller.record(sample, finish);
        }
        if in_flight < controller.limit() {
            in_flight += 1;
            admitted += 1;
            let finish = upstream.serve(now);
            completions.push(Reverse((finish, now, in_flight)));
        } else {
            refused += 1;
        }
        while next_record <= now {
            limits.push((next_record, controller.limit()));
            if next_record % SECOND == 0 && next_record > 0 {
                latencies.sort_unstable();
                let p50 = latencies.get(latencies.len() / 2).copied().unwrap_or(0);
                eprintln!(
                    "t={:>3}s limit={:>4} baseline={:>5.1}ms admitted={admitted:>5}/s refused={refused:>5}/s p50={:>6.1}ms",
                    next_record / SECOND,
                    controller.limit(),
                    controller.baseline().unwrap_or(0) as f64 / MS as f64,
                    p50 as f64 / MS as f64
                );
                (admitted, refused) = (0, 0);
                latencies.clear();
            }
            next_record += 10 * MS;
        }
        now += gap;
    }
    Run { limits, controller }
}

/// The share of the cap readings in `[from, to)` within `[low, high]`.
fn share_within(run: &Run, from: u64, to: u64, low: f64, high: f64) -> f64 {
    let readings: Vec<u32> = run
        .limits
        .iter()
        .filter(|&&(at, _)| at >= from && at < to)
        .map(|&(_, limit)| limit)
        .collect();
    let inside = readings
        .iter()
        .filter(|&&limit| (low..=high).contains(&f64::from(limit)))
        .count();
    inside as f64 / readings.len().max(1) as f64
}

#[test]
fn overloaded_from_the_first_second_the_limit_finds_the_upstreams_capacity() {
    let (workers, service) = (32, 20 * MS);
    let run = simulate(workers, service, 60, None);
    let c = workers as f64;
    let entered = run
        .limits
        .iter()
        .find(|&&(_, limit)| (0.8 * c..=1.25 * c).contains(&f64::from(limit)))
        .map(|&(at, _)| at);
    assert!(
        entered.is_some_and(|at| at < 10 * SECOND),
        "entered [0.8 C, 1.25 C] at {entered:?}"
    );
    assert_mostly_within(&run, entered.unwrap_or(0), 60 * SECOND, 0.8 * c, 1.25 * c);
    // After a minute of overload the baseline is the no-load latency, not the queue's.
    assert_baseline_near(&run, service);
}

#[test]
fn restarting_into_an_overload_with_a_backlog_still_measures_the_no_load_latency() {
    // Another instance left three requests per worker queued: the first ones we send wait
    // behind 60 ms of backlog. The probe's median still finds the 20 ms.
    let (workers, service) = (32, 20 * MS);
    let mut upstream = Upstream::new(workers, service);
    upstream.free_at = vec![3 * service; workers];
    let run = simulate_from(upstream, 15, None);
    assert_baseline_near(&run, service);
    let c = workers as f64;
    assert_mostly_within(&run, 5 * SECOND, 15 * SECOND, 0.8 * c, 1.25 * c);
}

#[test]
fn when_the_upstream_halves_the_limit_follows_within_two_seconds() {
    let (workers, service) = (32, 20 * MS);
    let run = simulate(workers, service, 40, Some((20 * SECOND, workers / 2)));
    let c = (workers / 2) as f64;
    let at_two_seconds = run
        .limits
        .iter()
        .find(|&&(at, _)| at >= 22 * SECOND)
        .map(|&(_, limit)| f64::from(limit))
        .unwrap_or(0.0);
    assert!(
        (at_two_seconds - c).abs() <= 0.25 * c,
        "limit {at_two_seconds} two seconds after the upstream went to {c} workers"
    );
    assert_mostly_within(&run, 22 * SECOND, 40 * SECOND, 0.75 * c, 1.25 * c);
}

#[test]
fn a_limit_stuck_at_its_minimum_recovers() {
    let mut controller = Controller::new(AdaptiveSettings::default(), 0, 3);
    // A baseline measured far too low (1 ms), then real latencies of 20 ms: the gradient
    // pins the limit to its minimum...
    let mut now = 0;
    now = probe(&mut controller, now, MS);
    assert_eq!(controller.baseline(), Some(MS));
    for _ in 0..200 {
        now += 10 * MS;
        controller.record(sample(now - 20 * MS, now, 2), now);
        if controller.probing() {
            break;
        }
    }
    // ...until five windows at the minimum force a new measurement.
    assert!(
        controller.probing(),
        "a probe after the limit sat at its minimum"
    );
    probe(&mut controller, now, 20 * MS);
    assert_eq!(controller.baseline(), Some(20 * MS));
    assert!(controller.limit() >= AdaptiveSettings::default().initial);
}

#[test]
fn fast_failures_and_light_load_never_raise_the_limit() {
    let mut controller = Controller::new(AdaptiveSettings::default(), 0, 3);
    let mut now = 0;
    now = probe(&mut controller, now, 10 * MS);
    let start = controller.limit();
    // Failures answering in 1 ms, with the limit full.
    for _ in 0..100 {
        now += 5 * MS;
        let mut failed = sample(now - MS, now, start);
        failed.ok = false;
        controller.record(failed, now);
    }
    assert_eq!(controller.limit(), start, "failures are not samples");
    // Fast successes, but never more than a quarter of the limit in flight: app-limited.
    for _ in 0..100 {
        now += 5 * MS;
        controller.record(sample(now - 10 * MS, now, start / 4), now);
    }
    assert_eq!(
        controller.limit(),
        start,
        "light load says nothing about more"
    );
}

/// Asserts the cap stayed within `[low, high]` at least 90 % of the time in `[from, to)`.
fn assert_mostly_within(run: &Run, from: u64, to: u64, low: f64, high: f64) {
    let share = share_within(run, from, to, low, high);
    assert!(
        share >= 0.9,
        "inside the band {:.1} % of the time",
        share * 100.0
    );
}

/// Asserts the measured no-load latency is within 10 % of `service`.
fn assert_baseline_near(run: &Run, service: u64) {
    let baseline = run.controller.baseline().unwrap_or(0) as f64;
    assert!(
        (baseline - service as f64).abs() <= 0.1 * service as f64,
        "baseline {baseline} ns against a service time of {service} ns"
    );
}

/// Answers a whole probe from `now` with requests of `latency`, one at a time; the time
/// after it.
fn probe(controller: &mut Controller, mut now: u64, latency: u64) -> u64 {
    for _ in 0..PROBE_SAMPLES {
        now += latency;
        controller.record(sample(now - latency, now, 1), now);
    }
    now
}

fn sample(started: u64, finished: u64, in_flight: u32) -> Sample {
    Sample {
        started,
        finished,
        in_flight,
        ok: true,
    }
}
