//! Fuzz target `settle`: see [`tollgate_fuzz::settle`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::settle(data));
