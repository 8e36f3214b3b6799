//! The `Idempotency-Key` as a validated newtype, and the hash that tells
//! "same request" from "same key, another body" (both back ends store it
//! with the key's claim, `super::claim`).

use sha2::{Digest, Sha256};

use crate::limits::{IDEMPOTENCY_KEY_LEN_MAX, IDEMPOTENCY_KEY_LEN_MIN};

/// 8–255 visible ASCII characters (`!` to `~`); nothing else gets stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    #[error("Idempotency-Key must be {IDEMPOTENCY_KEY_LEN_MIN} to {IDEMPOTENCY_KEY_LEN_MAX} characters, got {0}")]
    Length(usize),
    #[error("Idempotency-Key must be visible ASCII characters only")]
    Characters,
}

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, InvalidKey> {
        let len = raw.len();
        if !(IDEMPOTENCY_KEY_LEN_MIN..=IDEMPOTENCY_KEY_LEN_MAX).contains(&len) {
            return Err(InvalidKey::Length(len));
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidKey::Characters);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = InvalidKey;
    fn try_from(raw: &str) -> Result<Self, Self::Error> {
        Self::parse(raw)
    }
}

/// SHA-256 over the request's fields, length-prefixed so that no two
/// different field lists hash the same bytes.
pub(crate) fn request_hash(fields: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for field in fields {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bounds_and_characters() {
        assert!(IdempotencyKey::parse("1234567").is_err());
        assert!(IdempotencyKey::parse("12345678").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(InvalidKey::Length(256))
        );
        assert_eq!(
            IdempotencyKey::parse("has space"),
            Err(InvalidKey::Characters)
        );
        assert_eq!(
            IdempotencyKey::parse("tab\there!"),
            Err(InvalidKey::Characters)
        );
        assert_eq!(
            IdempotencyKey::parse("ключ-ключ"),
            Err(InvalidKey::Characters)
        );
    }

    #[test]
    fn hash_separates_fields() {
        assert_ne!(request_hash(&["ab", "c"]), request_hash(&["a", "bc"]));
        assert_eq!(request_hash(&["a", "b"]), request_hash(&["a", "b"]));
    }
}
