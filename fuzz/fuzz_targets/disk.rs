//! Fuzz target `disk`: see [`tollgate_fuzz::disk`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::disk(data));
