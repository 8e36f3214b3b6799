//! Tokens verified once: a [`Keyring`] with a bounded cache of the tickets
//! and passes it accepted.
//!
//! Checking a JWT is most of what a status poll or a protected request
//! costs (an Ed25519 signature check is tens of microseconds; HS256 is two
//! JSON parses, base64 and a MAC), and a shopper presents the same token
//! again and again: every poll, every page behind `protect`. So
//! [`VerifyingKeyring::verify`] remembers what it accepted, keyed by the
//! token's signature, under these rules:
//!
//! - an entry answers only for the very same token (the whole token is
//!   compared, so a token carrying a borrowed signature over another
//!   payload misses and is verified, and refused, in full) and the very
//!   same expectation (type, room, the room's TTL and opening);
//! - the clock checks (`exp`, `iat` leeway) run again on every hit: an entry
//!   is never trusted at or past its `exp`, and one that fails them is
//!   dropped and the token verified in full, for the refusal's reason;
//! - only accepted tokens are stored; a refusal is always recomputed;
//! - the cache belongs to one keyring. A config reload builds a new keyring
//!   (a rotation, a key taken out) with an empty cache, so a token signed
//!   by a key no longer configured is never served from it;
//! - it is bounded: at most [`VERIFIED_TOKENS_MAX`] tokens (about 600 bytes
//!   each), the least recently used evicted first, in [`SHARDS`] shards of
//!   their own lock each, so no global lock sits on the request path.
//!
//! The `lru` crate (already in the tree through pingora) keeps the order.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;
use sluice_admission::tokens::{Claims, Expected, Keyring, TokenError, TokenType, IAT_LEEWAY_S};

/// Most tokens remembered, over all shards.
pub const VERIFIED_TOKENS_MAX: usize = 16_384;
/// Shards of the cache, each behind its own mutex.
pub const SHARDS: usize = 8;

/// One shard: accepted tokens by signature, least recently used first out.
type Shard = Mutex<LruCache<Box<str>, Entry>>;

/// A keyring that remembers the tokens it accepted.
pub struct VerifyingKeyring {
    keys: Keyring,
    shards: Box<[Shard]>,
    /// Picks a token's shard from its signature.
    shard_of: RandomState,
}

/// One accepted token, and what it was accepted as.
struct Entry {
    token: Box<str>,
    typ: TokenType,
    room: Box<str>,
    ttl_s: u64,
    opens_at_s: Option<u64>,
    claims: Claims,
}

impl Entry {
    fn answers(&self, token: &str, expected: &Expected<'_>) -> bool {
        *self.token == *token
            && self.typ == expected.typ
            && *self.room == *expected.room
            && self.ttl_s == expected.ttl_s
            && self.opens_at_s == expected.opens_at_s
    }
}

impl VerifyingKeyring {
    pub fn new(keys: Keyring) -> Self {
        Self::with_capacity(keys, VERIFIED_TOKENS_MAX)
    }

    /// A keyring remembering at most `tokens_max` tokens (at least one per
    /// shard).
    pub fn with_capacity(keys: Keyring, tokens_max: usize) -> Self {
        let per_shard = NonZeroUsize::new(tokens_max.div_ceil(SHARDS)).unwrap_or(NonZeroUsize::MIN);
        Self {
            keys,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(per_shard)))
                .collect(),
            shard_of: RandomState::new(),
        }
    }

    /// [`Keyring::sign`].
    pub fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        self.keys.sign(claims)
    }

    /// [`Keyring::verify`], with the same answer for every token, from the
    /// cache when this very token was accepted as `expected` before and the
    /// clock checks still hold.
    pub fn verify(
        &self,
        token: &str,
        expected: &Expected<'_>,
        now_unix_s: u64,
    ) -> Result<Claims, TokenError> {
        self.verify_then(token, expected, now_unix_s, Claims::clone)
    }

    /// [`Self::verify`], handing the accepted claims to `then` rather than
    /// a copy of them: a caller that needs only a few of them (an early
    /// poll: `seq` and `sub`) copies no strings. On a hit `then` runs under
    /// the lock of the token's shard, so it must be short and must not
    /// verify another token.
    pub fn verify_then<R>(
        &self,
        token: &str,
        expected: &Expected<'_>,
        now_unix_s: u64,
        then: impl FnOnce(&Claims) -> R,
    ) -> Result<R, TokenError> {
        let Some((_, signature)) = token.rsplit_once('.') else {
            return self
                .keys
                .verify(token, expected, now_unix_s)
                .map(|c| then(&c));
        };
        let shard = &self.shards[self.shard_of.hash_one(signature) as usize % SHARDS];
        {
            let mut cache = shard.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = cache.get(signature) {
                if entry.answers(token, expected) {
                    let claims = &entry.claims;
                    if now_unix_s < claims.exp
                        && claims.iat <= now_unix_s.saturating_add(IAT_LEEWAY_S)
                    {
                        return Ok(then(claims));
                    }
                    cache.pop(signature);
                }
            }
        }
        let claims = self.keys.verify(token, expected, now_unix_s)?;
        let answer = then(&claims);
        let entry = Entry {
            token: token.into(),
            typ: expected.typ,
            room: expected.room.into(),
            ttl_s: expected.ttl_s,
            opens_at_s: expected.opens_at_s,
            claims,
        };
        shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(signature.into(), entry);
        Ok(answer)
    }

    /// Tokens remembered now.
    #[cfg(test)]
    pub fn cached(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_admission::tokens::{KeyMaterial, KeySpec};

    fn keyring(kid: &str, secret: u8) -> Keyring {
        Keyring::new(vec![KeySpec {
            kid: kid.into(),
            material: KeyMaterial::Hs256(vec![secret; 32]),
        }])
        .unwrap()
    }

    const NOW: u64 = 1_800_000_000;

    fn pass(room: &str, iat: u64, exp: u64) -> Claims {
        Claims::new(TokenType::Pass, room, &"0".repeat(32), 7, iat, exp)
    }

    #[test]
    fn an_accepted_token_is_answered_from_the_cache_with_the_same_claims() {
        let keys = VerifyingKeyring::new(keyring("k1", 1));
        let claims = pass("drop", NOW, NOW + 60);
        let token = keys.sign(&claims).unwrap();
        let expected = Expected::pass("drop", 600);
        assert_eq!(keys.verify(&token, &expected, NOW), Ok(claims.clone()));
        assert_eq!(keys.cached(), 1);
        assert_eq!(keys.verify(&token, &expected, NOW + 1), Ok(claims));
        assert_eq!(keys.cached(), 1);
    }

    #[test]
    fn a_cached_token_is_never_trusted_at_or_past_its_exp() {
        let keys = VerifyingKeyring::new(keyring("k1", 1));
        let token = keys.sign(&pass("drop", NOW, NOW + 60)).unwrap();
        let expected = Expected::pass("drop", 600);
        assert!(keys.verify(&token, &expected, NOW + 59).is_ok());
        assert_eq!(
            keys.verify(&token, &expected, NOW + 60),
            Err(TokenError::Expired)
        );
        assert_eq!(keys.cached(), 0, "the expired entry is dropped");
        assert_eq!(
            keys.verify(&token, &expected, NOW + 61),
            Err(TokenError::Expired)
        );
        // Nor before the `iat` leeway.
        let early = keys.sign(&pass("drop", NOW + 100, NOW + 160)).unwrap();
        assert!(keys.verify(&early, &expected, NOW + 100).is_ok());
        assert_eq!(
            keys.verify(&early, &expected, NOW),
            Err(TokenError::IssuedInFuture)
        );
    }

    #[test]
    fn a_tampered_token_with_a_cached_signature_is_refused() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        let keys = VerifyingKeyring::new(keyring("k1", 1));
        let token = keys.sign(&pass("drop", NOW, NOW + 60)).unwrap();
        let expected = Expected::pass("drop", 600);
        assert!(keys.verify(&token, &expected, NOW).is_ok());
        // Another payload (seq 8, a later exp) under the cached signature.
        let (head, rest) = token.split_once('.').unwrap();
        let (_, signature) = rest.split_once('.').unwrap();
        let mut forged_claims = pass("drop", NOW, NOW + 600);
        forged_claims.seq = 8;
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged_claims).unwrap());
        let forged = format!("{head}.{payload}.{signature}");
        assert_eq!(
            keys.verify(&forged, &expected, NOW),
            Err(TokenError::BadSignature)
        );
        // A byte flipped anywhere, the signature kept.
        for i in 0..head.len() + 1 + payload.len() {
            let mut bytes = token.clone().into_bytes();
            if bytes[i] == b'.' {
                continue;
            }
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(bytes).unwrap();
            assert!(keys.verify(&tampered, &expected, NOW).is_err(), "{i}");
        }
        // The genuine token still passes, from the cache.
        assert!(keys.verify(&token, &expected, NOW).is_ok());
        assert_eq!(keys.cached(), 1);
    }

    #[test]
    fn a_cached_token_answers_only_for_what_it_was_accepted_as() {
        let keys = VerifyingKeyring::new(keyring("k1", 1));
        let token = keys.sign(&pass("drop", NOW, NOW + 60)).unwrap();
        assert!(keys
            .verify(&token, &Expected::pass("drop", 600), NOW)
            .is_ok());
        assert_eq!(
            keys.verify(&token, &Expected::pass("other", 600), NOW),
            Err(TokenError::WrongAudience)
        );
        assert_eq!(
            keys.verify(&token, &Expected::ticket("drop", 600), NOW),
            Err(TokenError::WrongType)
        );
        // The room's TTL shortened by a reload: the token now lives too long.
        assert_eq!(
            keys.verify(&token, &Expected::pass("drop", 30), NOW),
            Err(TokenError::BadLifetime)
        );
        assert!(keys
            .verify(&token, &Expected::pass("drop", 600), NOW)
            .is_ok());
    }

    #[test]
    fn a_key_rotated_out_is_not_served_from_the_old_cache() {
        // What a reload does: a new keyring, with its own (empty) cache.
        let old = VerifyingKeyring::new(keyring("k1", 1));
        let token = old.sign(&pass("drop", NOW, NOW + 60)).unwrap();
        let expected = Expected::pass("drop", 600);
        assert!(old.verify(&token, &expected, NOW).is_ok());
        let rotated = VerifyingKeyring::new(keyring("k2", 2));
        assert_eq!(
            rotated.verify(&token, &expected, NOW),
            Err(TokenError::UnknownKid)
        );
        // The same kid with another secret (a leaked key replaced).
        let replaced = VerifyingKeyring::new(keyring("k1", 3));
        assert_eq!(
            replaced.verify(&token, &expected, NOW),
            Err(TokenError::BadSignature)
        );
        assert_eq!((rotated.cached(), replaced.cached()), (0, 0));
    }

    #[test]
    fn verify_then_answers_as_verify_does_and_sees_only_accepted_claims() {
        let keys = VerifyingKeyring::new(keyring("k1", 1));
        let claims = pass("drop", NOW, NOW + 60);
        let token = keys.sign(&claims).unwrap();
        let expected = Expected::pass("drop", 600);
        let seq_of = |t: &str, now: u64| keys.verify_then(t, &expected, now, |c| c.seq);
        // A miss (verified in full, then cached), then a hit.
        assert_eq!(seq_of(&token, NOW), Ok(7));
        assert_eq!(keys.cached(), 1);
        assert_eq!(seq_of(&token, NOW + 1), Ok(7));
        let mut tampered = token.clone().into_bytes();
        let i = token.find('.').unwrap() + 3;
        tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        let mut ran = false;
        let refused = keys.verify_then(&tampered, &expected, NOW, |_| ran = true);
        assert!(
            refused.is_err() && !ran,
            "`then` never sees a refused token"
        );
        assert_eq!(seq_of(&token, NOW + 60), Err(TokenError::Expired));
        assert_eq!(seq_of("nodots", NOW), Err(TokenError::Malformed));
    }

    #[test]
    fn refusals_are_not_cached_and_the_cache_is_bounded() {
        let keys = VerifyingKeyring::with_capacity(keyring("k1", 1), 16);
        let expected = Expected::pass("drop", 600);
        assert_eq!(
            keys.verify("a.b.c", &expected, NOW),
            Err(TokenError::Malformed)
        );
        assert_eq!(
            keys.verify("nodots", &expected, NOW),
            Err(TokenError::Malformed)
        );
        assert_eq!(keys.cached(), 0);
        for seq in 0..1000 {
            let mut claims = pass("drop", NOW, NOW + 60);
            claims.seq = seq;
            let token = keys.sign(&claims).unwrap();
            assert_eq!(keys.verify(&token, &expected, NOW), Ok(claims));
        }
        assert!(keys.cached() <= 16, "{}", keys.cached());
    }
}
