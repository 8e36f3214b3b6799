//! Fresh keys for `sluice keygen`.

use rand::RngCore;
use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;

use super::KeyError;

/// A random 32-byte HS256 secret from `rng` (pass an OS-seeded RNG).
pub fn generate_hs256_secret(rng: &mut impl RngCore) -> [u8; 32] {
    let mut secret = [0u8; 32];
    rng.fill_bytes(&mut secret);
    secret
}

/// A fresh Ed25519 private key as PKCS#8 v2 DER, from the OS RNG.
pub fn generate_ed25519_pkcs8_der() -> Result<Vec<u8>, KeyError> {
    Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
        .map(|doc| doc.as_ref().to_vec())
        .map_err(|_| KeyError::BadEd25519("generated".to_owned()))
}
