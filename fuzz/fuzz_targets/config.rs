//! Fuzz target `config`: see [`tollgate_fuzz::config`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::config(data));
