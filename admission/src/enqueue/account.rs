//! The account hash: `HMAC-SHA256(key, "sluice-account-v1\0" ‖ sub)`,
//! the first 16 bytes, as 32 lowercase hex digits. The same on every
//! gateway given the same key (`[cluster] account_hash_key_env`, or the key
//! a lone gateway keeps in `data_dir`); without the key it cannot be
//! turned back into an account id, nor linked to one by trying ids.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest key taken (the config asks for 32 characters).
pub const ACCOUNT_KEY_BYTES_MIN: usize = 32;

/// Hashes accounts under one key; cheap to clone (the key's HMAC state is
/// prepared once).
#[derive(Clone)]
pub struct AccountHasher(Hmac<Sha256>);

impl fmt::Debug for AccountHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountHasher(..)")
    }
}

/// An account, as Sluice keeps it: 128 bits of a keyed hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountHash(pub [u8; 16]);

impl AccountHash {
    /// 32 lowercase hex digits (the `Sluice-Pass-Account` header, Redis).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for AccountHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for AccountHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccountHash({})", self.to_hex())
    }
}

impl AccountHasher {
    /// `None` for a key shorter than [`ACCOUNT_KEY_BYTES_MIN`].
    pub fn new(key: &[u8]) -> Option<Self> {
        if key.len() < ACCOUNT_KEY_BYTES_MIN {
            return None;
        }
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(b"sluice-account-v1\0");
        Some(Self(mac))
    }

    /// The hash of the account `sub`.
    pub fn hash(&self, sub: &str) -> AccountHash {
        let mut mac = self.0.clone();
        mac.update(sub.as_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        AccountHash(out)
    }
}
