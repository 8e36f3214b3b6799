//! Why a token or a key was refused.

use thiserror::Error;

/// Why a presented token was refused. Every variant maps to the contract's
/// `invalid_ticket` / `invalid_pass`; [`TokenError::reason`] is the metric
/// label (`sluice_ticket_rejections_total{reason}`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenError {
    #[error("token is not a well-formed JWT")]
    Malformed,
    #[error("token names a key that is not configured")]
    UnknownKid,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token algorithm does not match its key")]
    AlgMismatch,
    #[error("token is of the wrong type")]
    WrongType,
    #[error("token is for another room")]
    WrongAudience,
    #[error("token was not issued by sluice")]
    WrongIssuer,
    #[error("token has expired")]
    Expired,
    #[error("token is issued in the future")]
    IssuedInFuture,
    #[error("token lifetime is empty or longer than the room's TTL")]
    BadLifetime,
    #[error("token could not be signed")]
    Signing,
    #[error("pass was ended before its time (idle, or by the store)")]
    Ended,
}

impl TokenError {
    /// A stable, low-cardinality label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::UnknownKid => "unknown_kid",
            TokenError::BadSignature => "bad_signature",
            TokenError::AlgMismatch => "alg_mismatch",
            TokenError::WrongType => "wrong_type",
            TokenError::WrongAudience => "wrong_audience",
            TokenError::WrongIssuer => "wrong_issuer",
            TokenError::Expired => "expired",
            TokenError::IssuedInFuture => "issued_in_future",
            TokenError::BadLifetime => "bad_lifetime",
            TokenError::Signing => "signing",
            TokenError::Ended => "ended",
        }
    }
}

/// Why a keyring could not be built from configured keys.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("no signing key configured")]
    Empty,
    #[error("more than {max} keys configured")]
    TooMany { max: usize },
    #[error("key {0:?} is defined twice")]
    DuplicateKid(String),
    #[error("key {0:?} has an empty or over-long kid")]
    BadKid(String),
    #[error("key {kid:?}: HS256 secret must hold at least {min} bytes")]
    ShortSecret { kid: String, min: usize },
    #[error("key {0:?}: secret is not base64url")]
    SecretEncoding(String),
    #[error("key {0:?}: not an Ed25519 PKCS#8 private key")]
    BadEd25519(String),
}
