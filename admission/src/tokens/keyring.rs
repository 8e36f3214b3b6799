//! The configured signing keys: the first signs, every one verifies.

use std::fmt;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use ring::signature::{Ed25519KeyPair, KeyPair};
use sluice_policies::model::{KeyAlg, SigningKey};

use super::jws::{self, HeaderRefusal};
use super::{Claims, KeyError, TokenError, TokenType, ISSUER};

/// Longest token we even look at; ours are about 300 bytes. Bounds the work
/// an outsider can make us do per request.
const TOKEN_BYTES_MAX: usize = 4096;
/// More keys than this is a misconfiguration, not rotation.
const KEYS_MAX: usize = 16;
const KID_BYTES_MAX: usize = 64;
/// HS256 secrets shorter than the hash output weaken the MAC.
const HS256_SECRET_BYTES_MIN: usize = 32;
/// How far in the future a token's `iat` may be, in seconds: room for the
/// clocks of two gateways to differ a little, not for a token minted ahead.
pub const IAT_LEEWAY_S: u64 = 5;

/// What a presented token must be: its type, its room, and the room's TTL
/// for that type, which bounds its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected<'a> {
    pub typ: TokenType,
    pub room: &'a str,
    /// The room's `pass_ttl_s` or `ticket_ttl_s`: the longest `exp - iat`.
    pub ttl_s: u64,
    /// The room's fair start (unix seconds), if it has one: a ticket taken
    /// before the opening lives until `ttl_s` after it, so its lifetime is
    /// counted from the opening.
    pub opens_at_s: Option<u64>,
}

impl<'a> Expected<'a> {
    /// A pass of `room`, whose `pass_ttl_s` is `ttl_s`.
    pub fn pass(room: &'a str, ttl_s: u64) -> Self {
        Self {
            typ: TokenType::Pass,
            room,
            ttl_s,
            opens_at_s: None,
        }
    }

    /// A ticket of `room`, whose `ticket_ttl_s` is `ttl_s`.
    pub fn ticket(room: &'a str, ttl_s: u64) -> Self {
        Self {
            typ: TokenType::Ticket,
            room,
            ttl_s,
            opens_at_s: None,
        }
    }

    /// The same, for a room with a fair start at `opens_at_s`.
    pub fn opening_at(self, opens_at_s: Option<u64>) -> Self {
        Self { opens_at_s, ..self }
    }
}

/// The secret part of one key.
#[derive(Clone)]
pub enum KeyMaterial {
    /// HS256 shared secret.
    Hs256(Vec<u8>),
    /// EdDSA: an Ed25519 private key as PKCS#8 DER.
    Ed25519Pkcs8Der(Vec<u8>),
}

impl KeyMaterial {
    /// An Ed25519 private key from a PKCS#8 PEM block
    /// (`-----BEGIN PRIVATE KEY-----`).
    pub fn ed25519_from_pem(pem: &str) -> Option<Self> {
        let body: String = pem
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("-----"))
            .collect();
        STANDARD.decode(body).ok().map(KeyMaterial::Ed25519Pkcs8Der)
    }
}

/// One configured key.
#[derive(Clone)]
pub struct KeySpec {
    pub kid: String,
    pub material: KeyMaterial,
}

struct Key {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// An EdDSA key's raw 32-byte Ed25519 public key; `None` for HS256,
    /// whose secret has no public half.
    ed25519_public: Option<[u8; ED25519_PUBLIC_KEY_BYTES]>,
}

/// The length of a raw Ed25519 public key (RFC 8032 §5.1.5).
pub const ED25519_PUBLIC_KEY_BYTES: usize = 32;

/// Signs with the first key, verifies with any. Cheap to share behind an
/// `Arc`; rebuilt whole on config reload.
pub struct Keyring {
    keys: Vec<Key>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|k| k.kid.as_str()).collect();
        f.debug_struct("Keyring").field("kids", &kids).finish()
    }
}

impl Keyring {
    /// Builds a keyring; the first key signs.
    pub fn new(specs: Vec<KeySpec>) -> Result<Self, KeyError> {
        if specs.is_empty() {
            return Err(KeyError::Empty);
        }
        if specs.len() > KEYS_MAX {
            return Err(KeyError::TooMany { max: KEYS_MAX });
        }
        let mut keys: Vec<Key> = Vec::with_capacity(specs.len());
        for spec in specs {
            if spec.kid.is_empty() || spec.kid.len() > KID_BYTES_MAX {
                return Err(KeyError::BadKid(spec.kid));
            }
            if keys.iter().any(|k| k.kid == spec.kid) {
                return Err(KeyError::DuplicateKid(spec.kid));
            }
            keys.push(Key::new(spec)?);
        }
        Ok(Self { keys })
    }

    /// Builds a keyring from the validated config's keys (base64url secrets).
    pub fn from_config(keys: &[SigningKey]) -> Result<Self, KeyError> {
        let specs = keys
            .iter()
            .map(|k| {
                let text = k.secret.expose().trim_end_matches('=');
                let bytes = URL_SAFE_NO_PAD
                    .decode(text)
                    .map_err(|_| KeyError::SecretEncoding(k.kid.clone()))?;
                let material = match k.alg {
                    KeyAlg::Hs256 => KeyMaterial::Hs256(bytes),
                    KeyAlg::EdDsa => KeyMaterial::Ed25519Pkcs8Der(bytes),
                };
                Ok(KeySpec {
                    kid: k.kid.clone(),
                    material,
                })
            })
            .collect::<Result<Vec<_>, KeyError>>()?;
        Self::new(specs)
    }

    /// The kid of the signing key.
    pub fn signing_kid(&self) -> &str {
        // `new` refuses an empty list, so there is always a first key.
        self.keys.first().map_or("", |k| k.kid.as_str())
    }

    /// The public keys of the EdDSA keys, in the configured order (the
    /// signing key first when it is one), each with its `kid`: what an
    /// origin needs to verify passes itself. HS256 keys have no public
    /// half and are left out.
    pub fn ed25519_public_keys(
        &self,
    ) -> impl Iterator<Item = (&str, &[u8; ED25519_PUBLIC_KEY_BYTES])> {
        self.keys
            .iter()
            .filter_map(|k| Some((k.kid.as_str(), k.ed25519_public.as_ref()?)))
    }

    /// Signs `claims` with the first key. Deterministic for both HS256 and
    /// Ed25519: the same claims give the same token, which is how a re-poll
    /// gets the very same pass.
    pub fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let key = self.keys.first().ok_or(TokenError::Signing)?;
        let mut header = Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, claims, &key.encoding).map_err(|_| TokenError::Signing)
    }

    /// Verifies a token presented as `expected` at `now_unix_s`. Checks, in
    /// order: shape, algorithm, key, signature, issuer, audience, type,
    /// expiry, `iat` no more than [`IAT_LEEWAY_S`] ahead, and a lifetime
    /// (`exp` minus `iat`, or minus the opening for a ticket taken before
    /// it) above zero and at most the room's TTL, so a token minted with a
    /// leaked key cannot live longer than one the room mints.
    pub fn verify(
        &self,
        token: &str,
        expected: &Expected<'_>,
        now_unix_s: u64,
    ) -> Result<Claims, TokenError> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(TokenError::Malformed);
        }
        let (alg, kid) = jws::read_header(token).map_err(|r| match r {
            HeaderRefusal::Malformed => TokenError::Malformed,
            HeaderRefusal::Algorithm => TokenError::AlgMismatch,
            HeaderRefusal::NoKid => TokenError::UnknownKid,
        })?;
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == kid)
            .ok_or(TokenError::UnknownKid)?;
        // The key decides the algorithm, never the token: an HS256 token
        // naming an Ed25519 key (signed with the public key as the HMAC
        // secret) is the classic key-confusion attack.
        if alg != key.alg {
            return Err(TokenError::AlgMismatch);
        }
        // Time and audience are checked below against the injected clock
        // and with a reason for each refusal.
        let validation = jws::signature_only(key.alg);
        let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
            .map_err(|e| map_decode_error(e.kind()))?
            .claims;
        if claims.iss != ISSUER {
            return Err(TokenError::WrongIssuer);
        }
        if claims.aud != expected.room {
            return Err(TokenError::WrongAudience);
        }
        if claims.typ != expected.typ {
            return Err(TokenError::WrongType);
        }
        if now_unix_s >= claims.exp {
            return Err(TokenError::Expired);
        }
        if claims.iat > now_unix_s.saturating_add(IAT_LEEWAY_S) {
            return Err(TokenError::IssuedInFuture);
        }
        let lives_from_s = claims.iat.max(expected.opens_at_s.unwrap_or(0));
        if claims.exp <= claims.iat || claims.exp.saturating_sub(lives_from_s) > expected.ttl_s {
            return Err(TokenError::BadLifetime);
        }
        Ok(claims)
    }
}

impl Key {
    fn new(spec: KeySpec) -> Result<Self, KeyError> {
        match spec.material {
            KeyMaterial::Hs256(secret) => {
                if secret.len() < HS256_SECRET_BYTES_MIN {
                    return Err(KeyError::ShortSecret {
                        kid: spec.kid,
                        min: HS256_SECRET_BYTES_MIN,
                    });
                }
                Ok(Key {
                    kid: spec.kid,
                    alg: Algorithm::HS256,
                    encoding: EncodingKey::from_secret(&secret),
                    decoding: DecodingKey::from_secret(&secret),
                    ed25519_public: None,
                })
            }
            KeyMaterial::Ed25519Pkcs8Der(der) => {
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
                    .map_err(|_| KeyError::BadEd25519(spec.kid.clone()))?;
                let public: [u8; ED25519_PUBLIC_KEY_BYTES] = pair
                    .public_key()
                    .as_ref()
                    .try_into()
                    .map_err(|_| KeyError::BadEd25519(spec.kid.clone()))?;
                Ok(Key {
                    kid: spec.kid,
                    alg: Algorithm::EdDSA,
                    encoding: EncodingKey::from_ed_der(&der),
                    // ring verifies against the raw 32-byte public key.
                    decoding: DecodingKey::from_ed_der(&public),
                    ed25519_public: Some(public),
                })
            }
        }
    }
}

fn map_decode_error(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::InvalidSignature | ErrorKind::InvalidKeyFormat => TokenError::BadSignature,
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => TokenError::AlgMismatch,
        _ => TokenError::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{generate_ed25519_pkcs8_der, generate_hs256_secret};
    use ring::signature::{UnparsedPublicKey, ED25519};

    #[test]
    fn only_eddsa_keys_have_a_public_key_and_it_verifies_their_tokens() {
        let der = generate_ed25519_pkcs8_der().unwrap();
        let ring = Keyring::new(vec![
            KeySpec {
                kid: "ed".into(),
                material: KeyMaterial::Ed25519Pkcs8Der(der.clone()),
            },
            KeySpec {
                kid: "hs".into(),
                material: KeyMaterial::Hs256(generate_hs256_secret(&mut rand::rng()).to_vec()),
            },
        ])
        .unwrap();
        let public: Vec<(&str, [u8; 32])> =
            ring.ed25519_public_keys().map(|(k, p)| (k, *p)).collect();
        let expected = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der).unwrap();
        assert_eq!(
            public,
            [(
                "ed",
                <[u8; 32]>::try_from(expected.public_key().as_ref()).unwrap()
            )]
        );
        // The signing input is `header.payload`; the signature is the
        // third part. Checked with ring alone, as an origin would.
        let claims = Claims::new(TokenType::Pass, "drop", &"0".repeat(32), 1, 10, 20);
        let token = ring.sign(&claims).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        let key = UnparsedPublicKey::new(&ED25519, public[0].1);
        assert!(key.verify(input.as_bytes(), &signature).is_ok());
        assert!(key.verify(b"other", &signature).is_err());

        let hs_only = Keyring::new(vec![KeySpec {
            kid: "hs".into(),
            material: KeyMaterial::Hs256(generate_hs256_secret(&mut rand::rng()).to_vec()),
        }])
        .unwrap();
        assert_eq!(hs_only.ed25519_public_keys().count(), 0);
    }
}
