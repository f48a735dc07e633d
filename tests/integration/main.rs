//! Integration tests: real servers on 127.0.0.1, a real HTTP client, real files.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod also;
mod architecture;
mod calendar;
mod candidates;
mod concurrency;
mod config_files;
mod custom_store;
mod disk;
mod fuzz_corpus;
mod hyper_server;
mod identity;
mod in_flight;
mod jwt;
mod key_parts;
mod layer_http;
mod llm;
mod modes;
mod plans;
mod redis_backend;
mod redis_cluster;
mod redis_headers;
mod redis_hybrid;
mod redis_sentinel;
mod redis_shares;
mod redis_tls;
mod reload;
mod remote_config;
mod resolution;
mod settle;
mod shaping;
mod skew;
mod snapshots;
mod support;
