//! The join challenge: a proof of work a join must carry (`kind = "pow"`).
//!
//! Pure functions over injected time; nothing here does I/O.
//!
//! - [`token`]: the challenge itself: issued (room, difficulty, expiry, a
//!   random nonce, HMAC-signed so any gateway of a fleet verifies it),
//!   parsed (bounded, never panics) and checked.
//! - [`solution`]: a solution's shape, the work it proves, and a solver
//!   (for tests and the load harness).
//! - [`spent`]: single use: [`spent::decide_spend`], the one decision the
//!   embedded record ([`spent::SpentChallenges`]) and the fleet's record in
//!   Redis both make.
//! - [`difficulty`]: the adaptive difficulty law, and [`rate`]: the join
//!   rate it reads.
//! - [`error`]: why a challenge or solution was refused, and the contract
//!   code each reason answers.
//!
//! A join is checked with [`verify_join`]: parse, signature, room, expiry,
//! then the work; the caller then asks its record of spent challenges.

pub mod difficulty;
mod error;
pub mod rate;
pub mod solution;
pub mod spent;
pub mod token;

pub use difficulty::{adaptive_bits, bits_now};
pub use error::ChallengeError;
pub use rate::JoinRate;
pub use solution::{leading_zero_bits, solution_hash, solve, SOLUTION_DIGITS_MAX};
pub use spent::{decide_spend, SpendDecision, SpentBy, SpentChallenges, SpentFull, SpentState};
pub use token::{Challenge, ChallengeKeys, IssuedChallenge, CHALLENGE_BYTES_MAX};

/// The `algorithm` the challenge route names.
pub const ALGORITHM: &str = "sha256-leading-zero-bits";

/// A join's challenge and solution, checked: what the record of spent
/// challenges needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedJoin {
    pub challenge: Challenge,
    /// Identifies this solution of this challenge in the spent record: a
    /// retry with the same solution answers the same place.
    pub solution_tag: u64,
}

/// Checks the `challenge` and `solution` a join to `room` carries at
/// `now_s`: a well-formed challenge (else [`ChallengeError::Malformed`],
/// `400`), signed by one of `keys`, for this room, not expired, and a
/// solution whose hash has the challenge's difficulty (else
/// `403 challenge_failed`). It does not look at whether the challenge was
/// spent: see [`spent::decide_spend`].
pub fn verify_join(
    keys: &ChallengeKeys,
    challenge: &str,
    solution: &str,
    room: &str,
    now_s: u64,
) -> Result<VerifiedJoin, ChallengeError> {
    let parsed = token::parse(challenge)?;
    solution::check_shape(solution)?;
    let checked = keys.check(&parsed, room, now_s)?;
    let hash = solution_hash(challenge, solution);
    if leading_zero_bits(&hash) < u32::from(checked.difficulty_bits) {
        return Err(ChallengeError::WrongSolution);
    }
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&hash[..8]);
    Ok(VerifiedJoin {
        challenge: checked,
        solution_tag: u64::from_be_bytes(tag),
    })
}

#[cfg(test)]
mod tests;
