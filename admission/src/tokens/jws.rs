//! What a JWT's header is read for before any key is chosen, and the
//! signature-only validation, shared by Sluice's own tokens
//! ([`super::Keyring`]) and the store's enqueue tokens
//! (`crate::enqueue::EnqueueKeyring`): one reading of a header, so the two
//! readers cannot drift on `alg: none`, `crit` or a missing `kid`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

/// The part of a JWT header looked at before choosing a key.
#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
    /// Extensions the issuer says a reader must understand (RFC 7515
    /// §4.1.11). Sluice understands none, so a token that lists any is
    /// refused rather than read without them.
    crit: Option<serde::de::IgnoredAny>,
}

/// Why a header was refused; each reader maps it to its own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderRefusal {
    /// Not three dot-separated parts, a header that is not base64url JSON,
    /// or one listing `crit`.
    Malformed,
    /// An algorithm other than the two Sluice verifies (this is what
    /// refuses `alg: none` before any key is chosen).
    Algorithm,
    /// No `kid`.
    NoKid,
}

/// The algorithm and `kid` a token's header names, checked in this order:
/// shape, `crit`, algorithm, `kid`.
pub(crate) fn read_header(token: &str) -> Result<(Algorithm, String), HeaderRefusal> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeaderRefusal::Malformed);
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(head)
        .map_err(|_| HeaderRefusal::Malformed)?;
    let header: RawHeader = serde_json::from_slice(&bytes).map_err(|_| HeaderRefusal::Malformed)?;
    if header.crit.is_some() {
        return Err(HeaderRefusal::Malformed);
    }
    let alg = match header.alg.as_str() {
        "HS256" => Algorithm::HS256,
        "EdDSA" => Algorithm::EdDSA,
        _ => return Err(HeaderRefusal::Algorithm),
    };
    let kid = header.kid.ok_or(HeaderRefusal::NoKid)?;
    Ok((alg, kid))
}

/// A validation that checks the signature (with the key's algorithm) and
/// nothing else: time, audience and the other claims are checked by the
/// caller against the injected clock, with a reason for each refusal.
pub(crate) fn signature_only(alg: Algorithm) -> Validation {
    let mut validation = Validation::new(alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    validation.leeway = 0;
    validation
}
