//! The challenge parser and `verify_join` on arbitrary challenge and
//! solution strings, and on a valid solved challenge with arbitrary bytes
//! flipped: never panics, and the only join it accepts is the issued
//! challenge with a solution that really has its difficulty.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_admission::challenge::{
    leading_zero_bits, solution_hash, solve, token, verify_join, ChallengeKeys, CHALLENGE_BYTES_MAX,
};

const NOW: u64 = 1_800_000_000;
const BITS: u8 = 6;

struct Fixture {
    keys: ChallengeKeys,
    text: String,
    solution: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let keys = ChallengeKeys::new(&[b"fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz"]).unwrap();
        let issued = keys.issue("drop", BITS, NOW - 5, 60, &mut StdRng::seed_from_u64(9));
        let solution = solve(&issued.text, BITS, 0, 1 << 20).unwrap();
        Fixture {
            keys,
            text: issued.text,
            solution,
        }
    })
}

fuzz_target!(|input: (u8, &[u8], &[u8])| {
    let (mode, a, b) = input;
    let f = fixture();
    let (challenge, solution) = match mode % 3 {
        0 => (
            String::from_utf8_lossy(a).into_owned(),
            String::from_utf8_lossy(b).into_owned(),
        ),
        // The valid challenge with bytes flipped (pairs of index, xor),
        // and an arbitrary solution or the valid one.
        m => {
            let mut bytes = f.text.clone().into_bytes();
            for pair in a.chunks_exact(2).take(16) {
                let i = usize::from(pair[0]) * bytes.len() / 256;
                bytes[i] ^= pair[1];
            }
            let solution = if m == 1 {
                f.solution.clone()
            } else {
                String::from_utf8_lossy(b).into_owned()
            };
            (String::from_utf8_lossy(&bytes).into_owned(), solution)
        }
    };
    if let Ok(parsed) = token::parse(&challenge) {
        assert!(challenge.len() <= CHALLENGE_BYTES_MAX);
        assert!(challenge.bytes().all(|c| c.is_ascii_graphic()));
        assert!((1..=32).contains(&parsed.challenge.difficulty_bits));
    }
    let room = if mode / 3 % 2 == 0 { "drop" } else { "other" };
    if let Ok(v) = verify_join(&f.keys, &challenge, &solution, room, NOW) {
        assert_eq!(challenge, f.text, "accepted a challenge it did not issue");
        assert_eq!(room, "drop");
        assert!(leading_zero_bits(&solution_hash(&challenge, &solution)) >= u32::from(BITS));
        assert!(solution.len() <= 20 && solution.bytes().all(|c| c.is_ascii_digit()));
        assert_eq!(v.challenge.difficulty_bits, BITS);
    }
});
