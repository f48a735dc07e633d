//! Fuzz target `forwarded`: see [`tollgate_fuzz::forwarded`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::forwarded(data));
