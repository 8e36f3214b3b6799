//! Why a join's enqueue token (or its absence) was refused.

use thiserror::Error;

/// Every variant is a `401`: [`EnqueueError::Missing`] is
/// `enqueue_token_required`, every other one `invalid_enqueue_token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EnqueueError {
    #[error("this room needs an enqueue token from the store")]
    Missing,
    #[error("the enqueue token is not a well-formed JWT")]
    Malformed,
    #[error("the enqueue token names a key this room does not have")]
    UnknownKid,
    #[error("the enqueue token's algorithm does not match its key")]
    AlgMismatch,
    #[error("the enqueue token's signature does not verify")]
    BadSignature,
    /// A ticket or pass (or anything with a `typ` other than `enqueue`).
    #[error("the token is not an enqueue token")]
    WrongType,
    #[error("the enqueue token is for another room")]
    WrongAudience,
    #[error("the enqueue token has expired")]
    Expired,
    #[error("the enqueue token is not valid yet")]
    NotYetValid,
    #[error("the enqueue token is issued in the future")]
    IssuedInFuture,
    #[error("the enqueue token's lifetime is empty or longer than a day")]
    BadLifetime,
    #[error("the enqueue token's subject is empty or too long")]
    BadSubject,
    #[error("the enqueue token names a lane this room does not have")]
    UnknownLane,
}

impl EnqueueError {
    /// The contract's error code.
    pub fn code(self) -> &'static str {
        match self {
            EnqueueError::Missing => "enqueue_token_required",
            _ => "invalid_enqueue_token",
        }
    }

    /// Always 401.
    pub fn status(self) -> u16 {
        401
    }

    /// A stable, low-cardinality metric label.
    pub fn reason(self) -> &'static str {
        match self {
            EnqueueError::Missing => "missing",
            EnqueueError::Malformed => "malformed",
            EnqueueError::UnknownKid => "unknown_kid",
            EnqueueError::AlgMismatch => "alg_mismatch",
            EnqueueError::BadSignature => "bad_signature",
            EnqueueError::WrongType => "wrong_type",
            EnqueueError::WrongAudience => "wrong_audience",
            EnqueueError::Expired => "expired",
            EnqueueError::NotYetValid => "not_yet_valid",
            EnqueueError::IssuedInFuture => "issued_in_future",
            EnqueueError::BadLifetime => "bad_lifetime",
            EnqueueError::BadSubject => "bad_subject",
            EnqueueError::UnknownLane => "unknown_lane",
        }
    }
}
