//! Fuzz target `api_keys`: see [`tollgate_fuzz::api_keys`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::api_keys(data));
