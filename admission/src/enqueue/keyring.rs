//! A room's enqueue keys, and the checks a token must pass.

use std::fmt;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use sluice_policies::model::{EnqueueKey, EnqueueKeyMaterial, Lane, DEFAULT_LANE};

use super::{EnqueueClaims, EnqueueError};
use crate::tokens::jws::{self, HeaderRefusal};
use crate::tokens::IAT_LEEWAY_S;

/// Longest enqueue token looked at (a store's tokens are a few hundred
/// bytes); bounds the work an outsider can make a join cost.
pub const ENQUEUE_TOKEN_BYTES_MAX: usize = 4096;
/// The longest `exp − iat` accepted: a day.
pub const ENQUEUE_LIFETIME_MAX_S: u64 = 86_400;
/// Longest account id (`sub`), in bytes.
pub const SUB_BYTES_MAX: usize = 256;
/// The only `typ` claim an enqueue token may carry (or none).
const TYP_ENQUEUE: &str = "enqueue";

struct Key {
    kid: String,
    alg: Algorithm,
    decoding: DecodingKey,
}

/// The keys of one room's `[rooms.enqueue]`, by `kid`. Rebuilt with the
/// config on reload.
pub struct EnqueueKeyring {
    keys: Vec<Key>,
}

impl fmt::Debug for EnqueueKeyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|k| k.kid.as_str()).collect();
        f.debug_struct("EnqueueKeyring")
            .field("kids", &kids)
            .finish()
    }
}

/// `aud` may be one string or a list of them (RFC 7519 §4.1.3).
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// The claims read from a token. Others (`iss`, `jti`, a store's own) are
/// ignored: the store is the issuer and may say more than Sluice needs.
#[derive(Deserialize)]
struct RawClaims {
    sub: String,
    aud: Audience,
    iat: u64,
    exp: u64,
    nbf: Option<u64>,
    lane: Option<String>,
    typ: Option<String>,
}

impl EnqueueKeyring {
    /// The keyring of a room's validated enqueue keys (possibly none: then
    /// every token is refused as naming an unknown key).
    pub fn new(keys: &[EnqueueKey]) -> Self {
        let keys = keys
            .iter()
            .map(|k| match &k.material {
                EnqueueKeyMaterial::Hs256(secret) => Key {
                    kid: k.kid.clone(),
                    alg: Algorithm::HS256,
                    decoding: DecodingKey::from_secret(secret.expose()),
                },
                // ring verifies against the raw 32-byte public key.
                EnqueueKeyMaterial::Ed25519Public(raw) => Key {
                    kid: k.kid.clone(),
                    alg: Algorithm::EdDSA,
                    decoding: DecodingKey::from_ed_der(raw),
                },
            })
            .collect();
        Self { keys }
    }

    /// What a join's enqueue token means: none and not `required` is no
    /// account (`Ok(None)`); none and `required` is
    /// [`EnqueueError::Missing`]; a token is verified ([`Self::verify`])
    /// whether or not the room requires one.
    pub fn read(
        &self,
        token: Option<&str>,
        required: bool,
        room: &str,
        lanes: &[Lane],
        now_unix_s: u64,
    ) -> Result<Option<EnqueueClaims>, EnqueueError> {
        match token {
            None if required => Err(EnqueueError::Missing),
            None => Ok(None),
            Some(token) => self.verify(token, room, lanes, now_unix_s).map(Some),
        }
    }

    /// Verifies an enqueue token for `room` at `now_unix_s`. Checks, in
    /// order: size and shape, algorithm (HS256 or EdDSA only: `alg: none`
    /// is refused before any key is chosen), `kid`, the key's algorithm,
    /// signature, `typ` (none or `"enqueue"`), `aud` (the room), `exp`,
    /// `nbf`, `iat` (no more than 5 s ahead), lifetime (`exp − iat` above 0
    /// and at most a day), `sub` (1 to 256 bytes), `lane` (one of
    /// `lanes`, or `"default"`, or none).
    pub fn verify(
        &self,
        token: &str,
        room: &str,
        lanes: &[Lane],
        now_unix_s: u64,
    ) -> Result<EnqueueClaims, EnqueueError> {
        if token.len() > ENQUEUE_TOKEN_BYTES_MAX {
            return Err(EnqueueError::Malformed);
        }
        let (alg, kid) = jws::read_header(token).map_err(|r| match r {
            HeaderRefusal::Malformed => EnqueueError::Malformed,
            HeaderRefusal::Algorithm => EnqueueError::AlgMismatch,
            HeaderRefusal::NoKid => EnqueueError::UnknownKid,
        })?;
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == kid)
            .ok_or(EnqueueError::UnknownKid)?;
        // The key decides the algorithm, never the token.
        if alg != key.alg {
            return Err(EnqueueError::AlgMismatch);
        }
        let validation = jws::signature_only(key.alg);
        let claims = jsonwebtoken::decode::<RawClaims>(token, &key.decoding, &validation)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature | ErrorKind::InvalidKeyFormat => {
                    EnqueueError::BadSignature
                }
                ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                    EnqueueError::AlgMismatch
                }
                _ => EnqueueError::Malformed,
            })?
            .claims;
        if claims.typ.as_deref().is_some_and(|t| t != TYP_ENQUEUE) {
            return Err(EnqueueError::WrongType);
        }
        let for_room = match &claims.aud {
            Audience::One(aud) => aud == room,
            Audience::Many(auds) => auds.iter().any(|a| a == room),
        };
        if !for_room {
            return Err(EnqueueError::WrongAudience);
        }
        if now_unix_s >= claims.exp {
            return Err(EnqueueError::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now_unix_s.saturating_add(IAT_LEEWAY_S))
        {
            return Err(EnqueueError::NotYetValid);
        }
        if claims.iat > now_unix_s.saturating_add(IAT_LEEWAY_S) {
            return Err(EnqueueError::IssuedInFuture);
        }
        if claims.exp <= claims.iat || claims.exp - claims.iat > ENQUEUE_LIFETIME_MAX_S {
            return Err(EnqueueError::BadLifetime);
        }
        if claims.sub.is_empty() || claims.sub.len() > SUB_BYTES_MAX {
            return Err(EnqueueError::BadSubject);
        }
        let lane = match claims.lane {
            None => None,
            Some(l) if l == DEFAULT_LANE => None,
            Some(l) if lanes.iter().any(|c| c.name == l) => Some(l),
            Some(_) => return Err(EnqueueError::UnknownLane),
        };
        Ok(EnqueueClaims {
            sub: claims.sub,
            lane,
            iat: claims.iat,
            exp: claims.exp,
        })
    }
}
