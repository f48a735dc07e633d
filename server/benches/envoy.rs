//! The cost of one Envoy descriptor decision, beside Limitador's library (crates.io
//! `limitador`, in-memory) measured in the same run.
//!
//! `cargo bench --bench envoy`; results and their reading are in BENCHMARKS.md.
//!
//! Both sides do what their gRPC service does per descriptor, minus the protocol: turn the
//! descriptor `(remote_address, <ip>)` of domain `edge` into what they decide on, and decide,
//! taking one token.
//!
//! - `tollgate/…`: the key `edge/remote_address/<ip>` (each part one encoded segment, as
//!   the gRPC front end builds it), then `Limits::check_all` against the rule
//!   `"edge/remote_address"` (fixed windows, as ratelimit's YAML imports): rule resolution
//!   and the atomic multi-descriptor path.
//! - `limitador/…`: the descriptor as Limitador's server binds it (`descriptors`, a CEL list
//!   of maps), then `check_rate_limited_and_update` against one limit in namespace `edge`
//!   whose counter is per `descriptors[0].remote_address`.
//!
//! - `tollgate_single_key/…`: the same key through `Limits::check`, for what the atomic
//!   multi-descriptor path costs on top.
//!
//! Each with 1,000 and 100,000 clients, in the same order, never refused.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use limitador::limit::{Context as CelContext, Expression, Limit, Namespace};
use tollgate::Limits;
use tollgate::key::encode_segment;
use tollgate_testkit::now_or_never as settle;

/// Large enough that nobody is refused during a run.
const PER_MINUTE: u64 = 1_000_000_000;

fn addresses(clients: u32) -> Vec<String> {
    (0..clients)
        .map(|i| Ipv4Addr::from(0x0a00_0000 + i).to_string())
        .collect()
}

fn envoy(c: &mut Criterion) {
    let mut group = c.benchmark_group("envoy_descriptor");
    for clients in [1_000u32, 100_000] {
        let ips = addresses(clients);

        let limits = Limits::from_toml(&format!(
            "[limits]\n\"edge/remote_address\" = {{ rate = \"{PER_MINUTE}/min\", algorithm = \"fixed-window\" }}\n"
        ))
        .unwrap();
        let mut next = 0;
        group.bench_with_input(BenchmarkId::new("tollgate", clients), &clients, |b, _| {
            b.iter(|| {
                let ip = &ips[next % ips.len()];
                next += 1;
                let key = format!(
                    "{}/{}/{}",
                    encode_segment("edge"),
                    encode_segment("remote_address"),
                    encode_segment(ip)
                );
                let decisions = settle(limits.check_all(&[(key.as_str(), Some(1))])).unwrap();
                black_box(decisions[0].allowed())
            })
        });

        // The same key through the single-key API: what the atomic multi-key path costs
        // on top.
        let mut next = 0;
        group.bench_with_input(
            BenchmarkId::new("tollgate_single_key", clients),
            &clients,
            |b, _| {
                b.iter(|| {
                    let ip = &ips[next % ips.len()];
                    next += 1;
                    let key = format!(
                        "{}/{}/{}",
                        encode_segment("edge"),
                        encode_segment("remote_address"),
                        encode_segment(ip)
                    );
                    black_box(settle(limits.check(&key, 1)).unwrap().allowed())
                })
            },
        );

        let limiter = limitador::RateLimiter::new(1_000_000);
        let namespace: Namespace = "edge".into();
        limiter.add_limit(Limit::new(
            "edge",
            PER_MINUTE,
            60,
            vec![],
            vec![Expression::parse("descriptors[0].remote_address").unwrap()],
        ));
        let mut next = 0;
        group.bench_with_input(BenchmarkId::new("limitador", clients), &clients, |b, _| {
            b.iter(|| {
                let ip = &ips[next % ips.len()];
                next += 1;
                let mut ctx = CelContext::default();
                ctx.list_binding(
                    "descriptors".to_owned(),
                    vec![HashMap::from([("remote_address".to_owned(), ip.clone())])],
                );
                let result = limiter
                    .check_rate_limited_and_update(&namespace, &ctx, 1)
                    .unwrap();
                black_box(result.limited)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, envoy);
criterion_main!(benches);
