//! The challenge string: `v1.<room>.<bits>.<expires_at>.<nonce>.<mac>`.
//!
//! - `room`: the room's name (`[a-z0-9_-]`, 1–64);
//! - `bits`: the difficulty, decimal, 1–32;
//! - `expires_at`: unix seconds, decimal;
//! - `nonce`: 16 random bytes as 32 lowercase hex digits (what the record
//!   of spent challenges is keyed by);
//! - `mac`: HMAC-SHA256 under the fleet's challenge key of everything
//!   before the last `.`, base64url without padding (43 characters).
//!
//! At most about 170 characters, all visible ASCII; the contract allows
//! clients to treat it as opaque up to 512. [`parse`] reads only the
//! shape (bounded, never panics); [`ChallengeKeys::check`] the signature,
//! room and time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use super::ChallengeError;

/// Longest challenge string read at all (the contract's bound).
pub const CHALLENGE_BYTES_MAX: usize = 512;
/// The most a challenge may live (the config's `challenge_ttl_s` bound),
/// plus the clock difference allowed between two gateways.
pub const CHALLENGE_LIFETIME_MAX_S: u64 = 600 + 5;
const VERSION: &str = "v1";
const MAC_B64_LEN: usize = 43;
const NONCE_HEX_LEN: usize = 32;
/// Most difficulty a challenge can name (the config allows 28).
const BITS_MAX: u8 = 32;

/// What a challenge says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub room: String,
    pub difficulty_bits: u8,
    /// Unix seconds; the challenge may be used while `now < expires_at_s`.
    pub expires_at_s: u64,
    pub nonce: [u8; 16],
}

/// A fresh challenge: its string, for the client, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedChallenge {
    pub text: String,
    pub challenge: Challenge,
}

/// A parsed challenge string whose signature is not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub challenge: Challenge,
    /// The signed part: everything before the last `.`.
    signed: &'a str,
    mac: [u8; 32],
}

/// The fleet's challenge keys: the first signs, every one verifies (so a
/// key rotates without failing the challenges already out).
#[derive(Clone)]
pub struct ChallengeKeys {
    keys: Vec<Hmac<Sha256>>,
}

impl std::fmt::Debug for ChallengeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChallengeKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl ChallengeKeys {
    /// Keys from raw secrets (each at least 32 bytes); `None` when the
    /// list is empty or a secret is short.
    pub fn new(secrets: &[&[u8]]) -> Option<Self> {
        if secrets.is_empty() || secrets.iter().any(|s| s.len() < 32) {
            return None;
        }
        let keys = secrets
            .iter()
            .map(|s| <Hmac<Sha256> as Mac>::new_from_slice(s).expect("HMAC takes any key length"))
            .collect();
        Some(Self { keys })
    }

    /// Keys derived from the ticket-signing secrets (`[[keys]]`, the same
    /// on every gateway of a fleet, in the same order):
    /// `HMAC-SHA256(secret, "sluice challenge key v1")` each, so a
    /// challenge key never equals a token key.
    pub fn derived_from(signing_secrets: &[&[u8]]) -> Option<Self> {
        let derived: Vec<[u8; 32]> = signing_secrets
            .iter()
            .map(|s| {
                let mut mac =
                    <Hmac<Sha256> as Mac>::new_from_slice(s).expect("HMAC takes any key length");
                mac.update(b"sluice challenge key v1");
                mac.finalize().into_bytes().into()
            })
            .collect();
        let refs: Vec<&[u8]> = derived.iter().map(|d| d.as_slice()).collect();
        Self::new(&refs)
    }

    /// Issues a challenge for `room` at `now_s`, valid for `ttl_s`, with a
    /// nonce from `rng` (an OS-seeded RNG in production).
    pub fn issue(
        &self,
        room: &str,
        difficulty_bits: u8,
        now_s: u64,
        ttl_s: u64,
        rng: &mut impl RngCore,
    ) -> IssuedChallenge {
        let mut nonce = [0u8; 16];
        rng.fill_bytes(&mut nonce);
        let challenge = Challenge {
            room: room.to_owned(),
            difficulty_bits,
            expires_at_s: now_s.saturating_add(ttl_s),
            nonce,
        };
        let signed = format!(
            "{VERSION}.{room}.{difficulty_bits}.{}.{}",
            challenge.expires_at_s,
            hex::encode(nonce)
        );
        let mut mac = self.keys[0].clone();
        mac.update(signed.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        IssuedChallenge {
            text: format!("{signed}.{tag}"),
            challenge,
        }
    }

    /// Checks a parsed challenge: signed by one of the keys, for `room`,
    /// not expired at `now_s`, not living longer than any room allows.
    pub fn check(
        &self,
        parsed: &Parsed<'_>,
        room: &str,
        now_s: u64,
    ) -> Result<Challenge, ChallengeError> {
        let signed_by_us = self.keys.iter().any(|key| {
            let mut mac = key.clone();
            mac.update(parsed.signed.as_bytes());
            mac.verify_slice(&parsed.mac).is_ok()
        });
        if !signed_by_us {
            return Err(ChallengeError::BadSignature);
        }
        let c = &parsed.challenge;
        if c.room != room {
            return Err(ChallengeError::WrongRoom);
        }
        if now_s >= c.expires_at_s {
            return Err(ChallengeError::Expired);
        }
        if c.expires_at_s - now_s > CHALLENGE_LIFETIME_MAX_S {
            return Err(ChallengeError::BadLifetime);
        }
        Ok(c.clone())
    }
}

/// Reads a challenge string's shape. Bounded (at most
/// [`CHALLENGE_BYTES_MAX`] bytes are looked at), allocation-light, and
/// never panics; the signature is not checked here.
pub fn parse(text: &str) -> Result<Parsed<'_>, ChallengeError> {
    use ChallengeError::Malformed;
    if text.len() > CHALLENGE_BYTES_MAX || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Malformed);
    }
    let (signed, mac_b64) = text.rsplit_once('.').ok_or(Malformed)?;
    let mut parts = signed.split('.');
    let (Some(version), Some(room), Some(bits), Some(expires), Some(nonce), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(Malformed);
    };
    if version != VERSION || !is_room(room) {
        return Err(Malformed);
    }
    let difficulty_bits = decimal(bits, 2)
        .and_then(|b| u8::try_from(b).ok())
        .filter(|b| (1..=BITS_MAX).contains(b))
        .ok_or(Malformed)?;
    let expires_at_s = decimal(expires, 20).ok_or(Malformed)?;
    if nonce.len() != NONCE_HEX_LEN
        || !nonce
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(Malformed);
    }
    let mut nonce_bytes = [0u8; 16];
    hex::decode_to_slice(nonce, &mut nonce_bytes).map_err(|_| Malformed)?;
    if mac_b64.len() != MAC_B64_LEN {
        return Err(Malformed);
    }
    let mut mac = [0u8; 32];
    match URL_SAFE_NO_PAD.decode_slice(mac_b64, &mut mac) {
        Ok(32) => {}
        _ => return Err(Malformed),
    }
    Ok(Parsed {
        challenge: Challenge {
            room: room.to_owned(),
            difficulty_bits,
            expires_at_s,
            nonce: nonce_bytes,
        },
        signed,
        mac,
    })
}

/// A decimal number of 1 to `max_digits` digits without a leading zero,
/// that fits a u64.
fn decimal(text: &str, max_digits: usize) -> Option<u64> {
    let ok = (1..=max_digits).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'));
    ok.then(|| text.parse().ok()).flatten()
}

fn is_room(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
