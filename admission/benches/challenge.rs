//! What a join's proof of work costs the gateway: verifying a solved
//! challenge (parse, HMAC, room, expiry, one SHA-256), refusing a forged
//! one, and the embedded record of spent challenges.
//!
//! `cargo bench -p sluice-admission --bench challenge` prints nanoseconds
//! per operation, best of 5 rounds (docs/benchmarks.md).

use std::hint::black_box;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_admission::challenge::{solve, verify_join, ChallengeKeys, SpentBy, SpentChallenges};

const ROUNDS: usize = 5;
const OPS: u64 = 200_000;
const NOW: u64 = 1_800_000_000;

fn best_ns_per_op(mut op: impl FnMut(u64)) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for i in 0..OPS {
                op(i);
            }
            start.elapsed().as_nanos() as f64 / OPS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let keys = ChallengeKeys::derived_from(&[&[7u8; 32], &[8u8; 32]]).expect("keys");
    let mut rng = StdRng::seed_from_u64(1);
    let bits = 18;
    let issued = keys.issue("drop", bits, NOW, 60, &mut rng);
    let start = Instant::now();
    let solution = solve(&issued.text, bits, 0, u64::MAX).expect("a solution exists");
    let solve_ms = start.elapsed().as_secs_f64() * 1e3;
    println!(
        "challenge: {} bytes; solved {bits} bits in {solve_ms:.1} ms ({} tries, one core)",
        issued.text.len(),
        solution.parse::<u64>().unwrap_or(0) + 1
    );

    let verify = best_ns_per_op(|_| {
        black_box(verify_join(&keys, black_box(&issued.text), &solution, "drop", NOW).is_ok());
    });
    println!("verify_join, valid solution:      {verify:8.0} ns/op");

    let forged = format!("{}A", &issued.text[..issued.text.len() - 1]);
    let refuse = best_ns_per_op(|_| {
        black_box(verify_join(&keys, black_box(&forged), &solution, "drop", NOW).is_err());
    });
    println!("verify_join, forged (two keys):   {refuse:8.0} ns/op");

    let issue = best_ns_per_op(|_| {
        black_box(keys.issue("drop", bits, NOW, 60, &mut rng));
    });
    println!("issue:                            {issue:8.0} ns/op");

    let mut spent = SpentChallenges::new(OPS as usize * ROUNDS);
    let by = SpentBy {
        seq: 1,
        solution_tag: 2,
        ..SpentBy::default()
    };
    let mut n = 0u64;
    let record = best_ns_per_op(|i| {
        n += 1;
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&n.to_be_bytes());
        black_box(spent.lookup(&nonce, NOW + i / 1000));
        let _ = spent.record(nonce, by, NOW + 60 + i / 1000, NOW + i / 1000);
    });
    println!(
        "spent record, lookup + record:    {record:8.0} ns/op ({} held)",
        spent.len()
    );

    // What the gateway's join does now: reserve (taken, or what it held)
    // then confirm with the place; and a replay, refused by one lookup.
    let mut held = SpentChallenges::new(OPS as usize * ROUNDS);
    let mut m = 0u64;
    let spend = best_ns_per_op(|i| {
        m += 1;
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&m.to_be_bytes());
        let now = NOW + i / 1000;
        if let Ok(None) = held.reserve(nonce, 2, now + 60, now) {
            held.confirm(&nonce, by);
        }
    });
    println!(
        "spent record, reserve + confirm:  {spend:8.0} ns/op ({} held)",
        held.len()
    );
    let replay = best_ns_per_op(|i| {
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&(1 + i).to_be_bytes());
        black_box(held.reserve(nonce, 3, NOW + 60, NOW + 1).is_ok());
    });
    println!("spent record, a replay refused:   {replay:8.0} ns/op");
}
