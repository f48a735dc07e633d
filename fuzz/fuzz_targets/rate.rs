//! Fuzz target `rate`: see [`tollgate_fuzz::rate`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::rate(data));
