//! Why a challenge or its solution was refused.

use thiserror::Error;

/// Every reason maps to a contract code ([`ChallengeError::code`]) and a
/// low-cardinality metric label ([`ChallengeError::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ChallengeError {
    /// Not a challenge this gateway could have issued, or a solution that
    /// is not 1 to 20 decimal digits: `400 bad_request`.
    #[error("the challenge or solution is malformed")]
    Malformed,
    #[error("the challenge was not signed by this fleet")]
    BadSignature,
    #[error("the challenge is for another room")]
    WrongRoom,
    #[error("the challenge has expired")]
    Expired,
    /// An expiry further ahead than any TTL a room may set.
    #[error("the challenge lives longer than any room allows")]
    BadLifetime,
    #[error("the solution does not have the challenge's difficulty")]
    WrongSolution,
    /// Used by another join (another solution, or the same one after the
    /// place it got is gone).
    #[error("the challenge was already used")]
    Replayed,
}

impl ChallengeError {
    /// The contract's error code: `bad_request` (400) for a malformed
    /// challenge or solution, `challenge_failed` (403) for the rest.
    pub fn code(self) -> &'static str {
        match self {
            ChallengeError::Malformed => "bad_request",
            _ => "challenge_failed",
        }
    }

    /// The HTTP status of [`ChallengeError::code`].
    pub fn status(self) -> u16 {
        match self {
            ChallengeError::Malformed => 400,
            _ => 403,
        }
    }

    /// A stable metric label.
    pub fn reason(self) -> &'static str {
        match self {
            ChallengeError::Malformed => "malformed",
            ChallengeError::BadSignature => "bad_signature",
            ChallengeError::WrongRoom => "wrong_room",
            ChallengeError::Expired => "expired",
            ChallengeError::BadLifetime => "bad_lifetime",
            ChallengeError::WrongSolution => "wrong_solution",
            ChallengeError::Replayed => "replayed",
        }
    }
}
