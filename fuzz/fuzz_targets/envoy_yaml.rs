//! Fuzz target `envoy_yaml`: see [`tollgate_fuzz::envoy_yaml`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::envoy_yaml(data));
