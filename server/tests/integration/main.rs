//! The service's integration tests: real listeners on 127.0.0.1, real clients (an HTTP
//! client, redis-cli, a tonic client, Chromium), real files and real Redis servers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod admin_page;
mod also;
mod architecture;
mod bypass;
mod config_files;
mod container;
mod disk;
mod environment;
mod faults;
mod fuzz_corpus;
mod gateway;
mod grpc;
mod grpc_protos;
mod grpc_upstream;
mod http2;
mod identity;
mod in_flight;
mod llm;
mod logging;
mod metrics;
mod observability;
mod plans;
mod probes;
mod redis_acl;
mod remote_config;
mod resp;
mod rlqs;
mod shaping;
mod sigterm;
mod support;
mod telemetry;
mod tls;
mod trailers;
mod tuning;
mod websocket;
