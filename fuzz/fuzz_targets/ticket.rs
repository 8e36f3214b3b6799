#![no_main]
use libfuzzer_sys::fuzz_target;
fuzz_target!(|_d: &[u8]| {});
