//! Fuzz target `plan_members`: see [`tollgate_fuzz::plan_members`] for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::plan_members(data));
