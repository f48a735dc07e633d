//! The cost of one decision, beside governor's keyed check measured in the same run.
//!
//! `cargo bench --bench decision`; results and their reading are in BENCHMARKS.md.
//!
//! - `decision/…`: the full per-request decision — key from a request (path normalisation,
//!   peer address), rule resolution, bucket update — with 10 or 10,000 rules and 1, 100k or
//!   1M live clients.
//! - `governor/…`: governor's `check_key` on its default DashMap store and clock, same
//!   quota, same clients, same order: the reference.
//! - `resolve/…`: rule resolution alone, 10 vs 10,000 rules.
//! - `layer/…`: a request through the whole tower service around a trivial inner service,
//!   admitted (headers built) and denied (429 built).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use governor::RateLimiter;
use http::{Request, Response};
use tollgate::key::PeerAddr;
use tollgate::{Limits, RateLimit};
use tollgate_testkit::now_or_never as settle;
use tower::Service;

/// A config with `rules` rules, three of them on the benchmarked path.
fn config(rules: usize, rate: &str) -> String {
    let mut text = format!(
        "[limits]\n\"/\" = \"{rate}\"\n\"api\" = \"{rate}\"\n\"api/search\" = \"{rate}\"\n"
    );
    for i in 3..rules {
        text.push_str(&format!("\"svc{i}/v{}\" = \"{rate}\"\n", i % 7));
    }
    text
}

fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Never denies during the run: every client stays well inside its budget.
const GENEROUS: &str = "1000000/s";

/// One request, kept hot as a server's just-parsed request would be; only its peer
/// address changes between iterations.
fn request_from(client: IpAddr) -> Request<()> {
    let mut request = Request::get("/api/search?q=rust").body(()).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::new(client, 40_000)));
    request
}

fn set_client(request: &mut Request<()>, client: IpAddr) {
    if let Some(peer) = request.extensions_mut().get_mut::<PeerAddr>() {
        peer.0.set_ip(client);
    }
}

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("decision");
    for (rules, clients) in [
        (10, 1),
        (10_000, 1),
        (10, 1_000),
        (10, 100_000),
        (10_000, 100_000),
        (10, 1_000_000),
    ] {
        let limits = Limits::from_toml(&config(rules, GENEROUS)).unwrap();
        let mut request = request_from(client(0));
        for i in 0..clients {
            set_client(&mut request, client(i));
            limits.check_request(&request).map(settle);
        }
        let id = BenchmarkId::from_parameter(format!("rules={rules}/clients={clients}"));
        group.bench_function(id, |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % clients;
                set_client(&mut request, client(i));
                let decision = settle(limits.check_request(&request).unwrap()).unwrap();
                black_box(decision.allowed())
            })
        });
    }
    group.finish();
}

fn governor_reference(c: &mut Criterion) {
    let mut group = c.benchmark_group("governor");
    let quota = governor::Quota::per_second(std::num::NonZeroU32::new(1_000_000).unwrap());
    for clients in [1u32, 1_000, 100_000, 1_000_000] {
        let limiter = RateLimiter::keyed(quota);
        for i in 0..clients {
            let _ = limiter.check_key(&client(i));
        }
        group.bench_function(
            BenchmarkId::from_parameter(format!("clients={clients}")),
            |b| {
                let mut i = 0;
                b.iter(|| {
                    i = (i + 1) % clients;
                    black_box(limiter.check_key(&client(i)).is_ok())
                })
            },
        );
    }
    group.finish();
}

/// The full decision for `api/search` under `rule` (the inside of a TOML inline table),
/// for one hot client and for 100,000 live clients, named `name/clients=N` in `group`.
fn bench_rule(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, rule: &str) {
    let config = format!("[limits]\n\"/\" = \"{GENEROUS}\"\n\"api/search\" = {{ {rule} }}\n");
    for clients in [1u32, 100_000] {
        let limits = Limits::from_toml(&config).unwrap();
        let mut request = request_from(client(0));
        for i in 0..clients {
            set_client(&mut request, client(i));
            limits.check_request(&request).map(settle);
        }
        let id = BenchmarkId::from_parameter(format!("{name}/clients={clients}"));
        group.bench_function(id, |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % clients;
                set_client(&mut request, client(i));
                black_box(
                    settle(limits.check_request(&request).unwrap())
                        .unwrap()
                        .allowed(),
                )
            })
        });
    }
}

/// Each algorithm's decision, one hot client and 100k live clients, same request path.
fn algorithms(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm");
    for algorithm in ["gcra", "sliding-window", "fixed-window"] {
        let rule = format!("rate = \"{GENEROUS}\", algorithm = \"{algorithm}\"");
        bench_rule(&mut group, algorithm, &rule);
    }
    group.finish();
}

/// Shaping beside plain GCRA (issue 21), all at `1000/s`: the delay, warm-up, and the
/// sliding log (at `1000/s`, and at `5/s`, the size it is meant for).
fn shaped(c: &mut Criterion) {
    let mut group = c.benchmark_group("shaped");
    let rules = [
        ("gcra", "rate = \"1000/s\""),
        (
            "gcra+delay",
            "rate = \"1000/s\", on_limit = \"delay\", max_delay = \"1s\"",
        ),
        ("gcra+warmup", "rate = \"1000/s\", warmup = \"10s\""),
        (
            "sliding-log",
            "rate = \"1000/s\", algorithm = \"sliding-log\"",
        ),
        (
            "sliding-log-5",
            "rate = \"5/s\", algorithm = \"sliding-log\"",
        ),
    ];
    for (name, rule) in rules {
        bench_rule(&mut group, name, rule);
    }
    group.finish();
}

fn resolve(c: &mut Criterion) {
    let mut group = c.benchmark_group("resolve");
    for rules in [10, 10_000] {
        let limits = Limits::from_toml(&config(rules, GENEROUS)).unwrap();
        let set = limits.rules();
        group.bench_function(BenchmarkId::from_parameter(format!("rules={rules}")), |b| {
            b.iter(|| {
                black_box(
                    set.resolve(black_box("api/search/deeper/path"), "10.0.0.1")
                        .is_some(),
                )
            })
        });
    }
    group.finish();
}

fn layer(c: &mut Criterion) {
    let mut group = c.benchmark_group("layer");
    let inner = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    });
    let request = || {
        let mut request = Request::get("/api/search?q=rust").body(()).unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(SocketAddr::new(client(1), 40_000)));
        request
    };
    // The same request through the inner service alone: the baseline to subtract.
    let mut bare = inner;
    group.bench_function("bare", |b| {
        b.iter(|| black_box(settle(bare.call(request())).unwrap().status()))
    });
    for (name, rate) in [("admitted", GENEROUS), ("denied", "1/h")] {
        let limits = Limits::from_toml(&config(10, rate)).unwrap();
        let mut service = RateLimit::new(inner, limits);
        group.bench_function(name, |b| {
            b.iter(|| black_box(settle(service.call(request())).unwrap().status()))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = decision, governor_reference, algorithms, shaped, resolve, layer
}
criterion_main!(benches);
