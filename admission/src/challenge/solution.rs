//! A solution: 1 to 20 decimal digits such that SHA-256 of the UTF-8
//! bytes of `challenge + ":" + solution` starts with at least the
//! challenge's difficulty in zero bits (bits counted from the most
//! significant bit of the first byte).

use sha2::{Digest, Sha256};

use super::ChallengeError;

/// Longest solution: 20 digits (every u64 fits).
pub const SOLUTION_DIGITS_MAX: usize = 20;

/// A solution's shape: 1 to 20 ASCII digits.
pub fn check_shape(solution: &str) -> Result<(), ChallengeError> {
    if (1..=SOLUTION_DIGITS_MAX).contains(&solution.len())
        && solution.bytes().all(|b| b.is_ascii_digit())
    {
        Ok(())
    } else {
        Err(ChallengeError::Malformed)
    }
}

/// SHA-256 of `challenge + ":" + solution`.
pub fn solution_hash(challenge: &str, solution: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b":");
    h.update(solution.as_bytes());
    h.finalize().into()
}

/// Zero bits at the start of `hash`.
pub fn leading_zero_bits(hash: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for &byte in hash {
        if byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// Finds a solution of `challenge` with `difficulty_bits`, trying the
/// numbers from `start` on, at most `max_tries` of them: the honest
/// client's search (the queue page does the same in a Web Worker). The
/// expected number of tries is `2^difficulty_bits`.
pub fn solve(challenge: &str, difficulty_bits: u8, start: u64, max_tries: u64) -> Option<String> {
    let mut prefix = Sha256::new();
    prefix.update(challenge.as_bytes());
    prefix.update(b":");
    let mut buf = itoa_buf();
    for n in start..start.saturating_add(max_tries) {
        let digits = write_decimal(n, &mut buf);
        let hash: [u8; 32] = prefix.clone().chain_update(digits).finalize().into();
        if leading_zero_bits(&hash) >= u32::from(difficulty_bits) {
            return Some(String::from_utf8_lossy(digits).into_owned());
        }
    }
    None
}

fn itoa_buf() -> [u8; SOLUTION_DIGITS_MAX] {
    [0; SOLUTION_DIGITS_MAX]
}

/// `n` in decimal, in the tail of `buf`.
fn write_decimal(mut n: u64, buf: &mut [u8; SOLUTION_DIGITS_MAX]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}
