//! Fuzz target `resp`: see `fuzz/src/resp.rs` for what is checked.
#![no_main]

#[path = "../src/resp.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::resp(data));
