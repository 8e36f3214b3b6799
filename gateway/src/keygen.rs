//! `sluice keygen`: a fresh ticket-signing key, printed as a config entry.

use base64::Engine;
use rand::RngCore;

/// 256 bits: the HS256 key size that matches its output (RFC 7518 §3.2).
const SECRET_BYTES: usize = 32;

/// A new `[[keys]]` entry with a random `kid` and secret.
pub fn hs256_entry() -> String {
    let mut secret = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut secret);
    let mut kid = [0u8; 6];
    rand::rng().fill_bytes(&mut kid);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "# Ticket-signing key made by `sluice keygen`. Keep it secret; list\n\
         # several [[keys]] to rotate without logging anyone out.\n\
         [[keys]]\n\
         kid = \"{}\"\n\
         alg = \"HS256\"\n\
         secret = \"{}\"\n",
        hex::encode(kid),
        b64.encode(secret)
    )
}
