//! The webhook signature header: never panics on any header, body or
//! clock, and a header signed with the secret always verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_checkout::webhook::{sign, verify_signature};

const SECRET: &[u8] = b"whsec_fuzz_fuzz_fuzz";
const TOLERANCE_S: i64 = 300;

fuzz_target!(|input: (&str, &[u8], i64)| {
    let (header, body, now) = input;
    let _ = verify_signature(header, body, &[SECRET, b"other"], now, TOLERANCE_S);
    if body.len() <= 64 * 1024 {
        let signed = sign(SECRET, now, body);
        assert_eq!(
            verify_signature(&signed, body, &[b"other", SECRET], now, TOLERANCE_S),
            Ok(()),
            "{signed}"
        );
    }
});
