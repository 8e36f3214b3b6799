//! `sluice keygen`: a fresh ticket-signing key, printed as a config entry.

use base64::Engine;
use rand::RngCore;

/// Which kind of key to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Alg {
    /// HMAC-SHA256: one shared secret signs and verifies.
    Hs256,
    /// Ed25519: a private key (PKCS#8 DER); public-key verification.
    Eddsa,
}

/// A new `[[keys]]` entry with a random `kid`.
pub fn entry(alg: Alg) -> Result<String, String> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (alg_name, secret) = match alg {
        Alg::Hs256 => (
            "HS256",
            sluice_admission::tokens::generate_hs256_secret(&mut rand::rng()).to_vec(),
        ),
        Alg::Eddsa => (
            "EdDSA",
            sluice_admission::tokens::generate_ed25519_pkcs8_der().map_err(|e| e.to_string())?,
        ),
    };
    let mut kid = [0u8; 6];
    rand::rng().fill_bytes(&mut kid);
    Ok(format!(
        "# Ticket-signing key made by `sluice keygen`. Keep it secret; list\n\
         # several [[keys]] to rotate without logging anyone out (the first signs).\n\
         [[keys]]\n\
         kid = \"{}\"\n\
         alg = \"{alg_name}\"\n\
         secret = \"{}\"\n",
        hex::encode(kid),
        b64.encode(secret)
    ))
}
