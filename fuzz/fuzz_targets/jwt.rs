//! Fuzz target `jwt`: see [`tollgate_fuzz::jwt`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::jwt(data));
