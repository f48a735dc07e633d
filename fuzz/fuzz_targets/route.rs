//! Fuzz target `route`: see [`tollgate_fuzz::route`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::route(data));
