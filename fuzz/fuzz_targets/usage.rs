//! Fuzz target `usage`: see [`tollgate_fuzz::usage`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::usage(data));
