//! Fuzz target `key_parts`: see [`tollgate_fuzz::key_parts`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::key_parts(data));
