//! Fuzz target `jwks`: see [`tollgate_fuzz::jwks`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::jwks(data));
