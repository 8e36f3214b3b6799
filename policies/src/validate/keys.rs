//! Keys: Sluice's own ticket-signing keys (`[[keys]]`) and the store's
//! enqueue keys (`[[rooms.enqueue.keys]]`), which have the same shape.
//!
//! A secret is given inline (`secret`), or by the environment variable
//! (`secret_env`) or file (`secret_file`) holding it, exactly one of the
//! three; it is base64url, as `sluice keygen` prints it. An EdDSA enqueue
//! key gives the store's `public_key` instead: the store keeps the private
//! one.

use base64::Engine;
use toml::Spanned;

use super::Validator;
use crate::file::{EnqueueFile, KeyFile};
use crate::model::{
    Enqueue, EnqueueKey, EnqueueKeyMaterial, KeyAlg, Secret, SecretBytes, SigningKey,
};

/// Most enqueue keys a room lists (rotation, not a key per store clerk).
pub const ENQUEUE_KEYS_MAX: usize = 16;
/// HS256 secrets shorter than the hash output weaken the MAC.
const SECRET_BYTES_MIN: usize = 32;
/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); the raw
/// 32-byte key follows it.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

fn kid_ok(kid: &str) -> bool {
    (1..=64).contains(&kid.len())
        && kid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Validator<'_> {
    pub(super) fn keys(&mut self, keys: Vec<Spanned<KeyFile>>) -> Vec<SigningKey> {
        let mut out: Vec<SigningKey> = Vec::with_capacity(keys.len());
        for key in keys {
            let k = key.into_inner();
            let kid = k.kid.get_ref().clone();
            if !kid_ok(&kid) {
                self.problem(
                    &k.kid,
                    format!("`kid` must be 1-64 of letters, digits, '-', '_', got {kid:?}"),
                );
            } else if out.iter().any(|o| o.kid == kid) {
                self.problem(&k.kid, format!("key {kid:?} is defined twice"));
            }
            let alg = self.key_alg(&k.alg);
            if let Some(p) = &k.public_key {
                self.problem(
                    p,
                    "`public_key` only applies to an EdDSA key in [[rooms.enqueue.keys]]; a ticket-signing key gives its private key as `secret`",
                );
                continue;
            }
            let Some(secret) = self.key_secret(&k.kid, k.secret, k.secret_env, k.secret_file)
            else {
                continue;
            };
            if self.secret_bytes(&secret).is_some() {
                out.push(SigningKey {
                    kid,
                    alg,
                    secret: Secret::new(secret.into_inner()),
                });
            }
        }
        out
    }

    fn key_alg(&mut self, alg: &Spanned<String>) -> KeyAlg {
        match alg.get_ref().as_str() {
            "HS256" => KeyAlg::Hs256,
            "EdDSA" => KeyAlg::EdDsa,
            other => {
                self.problem(
                    alg,
                    format!("`alg` must be \"HS256\" or \"EdDSA\", got {other:?}"),
                );
                KeyAlg::Hs256
            }
        }
    }

    /// The secret's text from whichever of `secret`, `secret_env`,
    /// `secret_file` is given (exactly one), spanned where it was named.
    fn key_secret(
        &mut self,
        kid: &Spanned<String>,
        inline: Option<Spanned<String>>,
        env: Option<Spanned<String>>,
        file: Option<Spanned<String>>,
    ) -> Option<Spanned<String>> {
        let given = [inline.is_some(), env.is_some(), file.is_some()]
            .iter()
            .filter(|g| **g)
            .count();
        if given != 1 {
            let message = if given == 0 {
                "a key needs one of `secret`, `secret_env` or `secret_file`"
            } else {
                "give one of `secret`, `secret_env` or `secret_file`, not several"
            };
            let at = env
                .as_ref()
                .or(file.as_ref())
                .map_or(kid.span(), |v| v.span());
            self.problems.push(self.loc.at(Some(at), message));
            return None;
        }
        if let Some(inline) = inline {
            return Some(inline);
        }
        if let Some(name) = env {
            let var = name.get_ref();
            if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                self.problem(
                    &name,
                    format!("`secret_env` must name an environment variable, got {var:?}"),
                );
                return None;
            }
            return match (self.env)(var) {
                Some(value) => Some(Spanned::new(name.span(), value.trim().to_string())),
                None => {
                    self.problem(
                        &name,
                        format!("environment variable {var} (a key's secret) is not set"),
                    );
                    None
                }
            };
        }
        let path = file?;
        match std::fs::read_to_string(path.get_ref()) {
            Ok(text) => Some(Spanned::new(path.span(), text.trim().to_string())),
            Err(e) => {
                self.problem(&path, format!("`secret_file` {:?}: {e}", path.get_ref()));
                None
            }
        }
    }

    /// A secret's bytes: base64url, at least 32 of them. Never echoes the
    /// value.
    fn secret_bytes(&mut self, secret: &Spanned<String>) -> Option<Vec<u8>> {
        let text = secret.get_ref().trim_end_matches('=');
        match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text) {
            Ok(bytes) if bytes.len() >= SECRET_BYTES_MIN => Some(bytes),
            Ok(bytes) => {
                self.problem(
                    secret,
                    format!(
                        "a key's secret must hold at least {SECRET_BYTES_MIN} bytes, got {}",
                        bytes.len()
                    ),
                );
                None
            }
            Err(_) => {
                self.problem(
                    secret,
                    "a key's secret must be base64url (use `sluice keygen`)",
                );
                None
            }
        }
    }

    /// `[rooms.enqueue]`: whether a join needs the store's token, and the
    /// keys that verify it. `signing_kids` are the `[[keys]]` kids, which
    /// an enqueue key may not repeat.
    pub(super) fn enqueue(
        &mut self,
        table: Option<Spanned<EnqueueFile>>,
        signing_kids: &[String],
    ) -> Enqueue {
        let Some(table) = table else {
            return Enqueue::default();
        };
        let e = table.into_inner();
        if e.keys.len() > ENQUEUE_KEYS_MAX {
            self.problem(
                &e.keys[ENQUEUE_KEYS_MAX],
                format!("[rooms.enqueue] holds at most {ENQUEUE_KEYS_MAX} keys"),
            );
        }
        let mut keys: Vec<EnqueueKey> = Vec::new();
        for key in e.keys.into_iter().take(ENQUEUE_KEYS_MAX) {
            let k = key.into_inner();
            let kid = k.kid.get_ref().clone();
            if !kid_ok(&kid) {
                self.problem(
                    &k.kid,
                    format!("`kid` must be 1-64 of letters, digits, '-', '_', got {kid:?}"),
                );
            } else if keys.iter().any(|o| o.kid == kid) {
                self.problem(&k.kid, format!("enqueue key {kid:?} is defined twice"));
            } else if signing_kids.contains(&kid) {
                self.problem(
                    &k.kid,
                    format!("enqueue key {kid:?} repeats a [[keys]] kid: a store's token and Sluice's own must never be taken for each other"),
                );
            }
            let material = match self.key_alg(&k.alg) {
                KeyAlg::Hs256 => {
                    if let Some(p) = &k.public_key {
                        self.problem(p, "`public_key` only applies to alg = \"EdDSA\"");
                        continue;
                    }
                    let Some(secret) =
                        self.key_secret(&k.kid, k.secret, k.secret_env, k.secret_file)
                    else {
                        continue;
                    };
                    let Some(bytes) = self.secret_bytes(&secret) else {
                        continue;
                    };
                    EnqueueKeyMaterial::Hs256(SecretBytes::new(bytes))
                }
                KeyAlg::EdDsa => {
                    if let Some(s) = k
                        .secret
                        .as_ref()
                        .or(k.secret_env.as_ref())
                        .or(k.secret_file.as_ref())
                    {
                        self.problem(
                            s,
                            "an EdDSA enqueue key gives the store's `public_key`, never a secret: the store keeps the private key",
                        );
                        continue;
                    }
                    let Some(public) = k.public_key else {
                        self.problem(&k.kid, "an EdDSA enqueue key needs `public_key`");
                        continue;
                    };
                    match ed25519_public_key(public.get_ref()) {
                        Some(raw) => EnqueueKeyMaterial::Ed25519Public(raw),
                        None => {
                            self.problem(
                                &public,
                                "`public_key` must be the Ed25519 public key: 32 bytes in base64url, or a PEM `PUBLIC KEY` block",
                            );
                            continue;
                        }
                    }
                }
            };
            keys.push(EnqueueKey { kid, material });
        }
        let required = match e.required {
            Some(r) if *r.get_ref() && keys.is_empty() => {
                self.problem(
                    &r,
                    "`required = true` needs at least one valid [[rooms.enqueue.keys]] entry to verify the store's tokens",
                );
                false
            }
            Some(r) => r.into_inner(),
            None => false,
        };
        Enqueue { required, keys }
    }
}

/// The raw 32 bytes of an Ed25519 public key given as base64url of those
/// bytes, or as a PEM `PUBLIC KEY` (SubjectPublicKeyInfo) block.
fn ed25519_public_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    let bytes = if text.starts_with("-----BEGIN PUBLIC KEY-----") {
        let body: String = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("-----"))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .ok()?;
        der.strip_prefix(&ED25519_SPKI_PREFIX[..])?.to_vec()
    } else {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .ok()?
    };
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_keys_in_base64url_or_pem() {
        let raw = [7u8; 32];
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        assert_eq!(ed25519_public_key(&b64), Some(raw));
        let mut der = ED25519_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&raw);
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        assert_eq!(ed25519_public_key(&pem), Some(raw));
        assert_eq!(ed25519_public_key("AAAA"), None);
        let mut wrong = der.clone();
        wrong[8] = 0x71; // Ed448's OID
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(&wrong)
        );
        assert_eq!(ed25519_public_key(&pem), None);
    }
}
