//! The room's proof of work as a client does it, written here from the
//! contract's words (not with the gateway's code, so a gateway that drifted
//! from the contract fails the rehearsal): a solution is 1–20 decimal
//! digits such that SHA-256 of `challenge + ":" + solution` starts with at
//! least `difficulty_bits` zero bits.
//!
//! The solver counts its tries, so the farm's hash rate is measured, and
//! [`thread_cpu_s`] reads the CPU time of the thread that asks (the farm's
//! CPU-seconds come from its own threads, not the whole harness).

use sha2::{Digest, Sha256};

/// A solution, and how many hashes finding it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solved {
    pub solution: String,
    pub tries: u64,
}

/// Leading zero bits of `hash`.
pub fn zero_bits(hash: &[u8]) -> u32 {
    let mut bits = 0;
    for &b in hash {
        if b != 0 {
            return bits + b.leading_zeros();
        }
        bits += 8;
    }
    bits
}

/// Tries `start`, `start + 1`, … (at most `max_tries`) until one solves
/// `challenge` at `bits`; `stop` is looked at every 4,096 tries. `None`
/// when stopped or out of tries.
pub fn solve(
    challenge: &str,
    bits: u8,
    start: u64,
    max_tries: u64,
    stop: &dyn Fn() -> bool,
) -> Option<Solved> {
    let mut prefix = Sha256::new();
    prefix.update(challenge.as_bytes());
    prefix.update(b":");
    for tries in 1..=max_tries {
        let n = start.wrapping_add(tries - 1);
        let hash = prefix.clone().chain_update(n.to_string()).finalize();
        if zero_bits(&hash) >= u32::from(bits) {
            return Some(Solved {
                solution: n.to_string(),
                tries,
            });
        }
        if tries % 4096 == 0 && stop() {
            return None;
        }
    }
    None
}

/// CPU seconds (user + system) the calling thread has used so far.
pub fn thread_cpu_s() -> f64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solution_has_the_bits_the_contract_asks() {
        let s = solve("c.h.a", 8, 0, 1 << 20, &|| false).unwrap();
        let hash = Sha256::digest(format!("c.h.a:{}", s.solution));
        assert!(zero_bits(&hash) >= 8);
        assert_eq!(s.tries, s.solution.parse::<u64>().unwrap() + 1);
        assert_eq!(zero_bits(&[0, 0x40, 0xff]), 9);
        assert!(solve("x", 28, 0, 10, &|| false).is_none());
    }

    #[test]
    fn thread_time_grows_with_work_on_this_thread() {
        let before = thread_cpu_s();
        let _ = solve("busy", 28, 0, 200_000, &|| false);
        assert!(thread_cpu_s() > before);
    }
}
