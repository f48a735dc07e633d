//! Fuzz target `request_body`: see [`tollgate_fuzz::request_body`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::request_body(data));
