//! The enqueue token reader (`EnqueueKeyring::verify`) on arbitrary bytes,
//! and on a valid store token (HS256 and EdDSA) with arbitrary bytes
//! flipped: never panics, and the only token it accepts is one the store
//! signed, for this room.
#![no_main]

use std::sync::OnceLock;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use libfuzzer_sys::fuzz_target;
use ring::signature::{Ed25519KeyPair, KeyPair};
use sluice_admission::enqueue::EnqueueKeyring;
use sluice_admission::tokens::generate_ed25519_pkcs8_der;
use sluice_policies::model::{EnqueueKey, EnqueueKeyMaterial, Lane, SecretBytes};

const NOW: u64 = 1_800_000_000;
const SECRET: &[u8] = b"store-fuzz-store-fuzz-store-fuzz-store";

struct Fixture {
    ring: EnqueueKeyring,
    lanes: Vec<Lane>,
    /// A token signed with each key: HS256, then EdDSA.
    tokens: [String; 2],
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let pkcs8 = generate_ed25519_pkcs8_der().unwrap();
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pkcs8).unwrap();
        let public: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
        let ring = EnqueueKeyring::new(&[
            EnqueueKey {
                kid: "hs".into(),
                material: EnqueueKeyMaterial::Hs256(SecretBytes::new(SECRET.to_vec())),
            },
            EnqueueKey {
                kid: "ed".into(),
                material: EnqueueKeyMaterial::Ed25519Public(public),
            },
        ]);
        let claims = serde_json::json!({
            "sub": "account-1", "aud": "drop", "iat": NOW - 10, "exp": NOW + 600, "lane": "members"
        });
        let mut hs = Header::new(Algorithm::HS256);
        hs.kid = Some("hs".into());
        let mut ed = Header::new(Algorithm::EdDSA);
        ed.kid = Some("ed".into());
        Fixture {
            ring,
            lanes: vec![Lane {
                name: "members".into(),
                share: 0.5,
                bypass: false,
            }],
            tokens: [
                jsonwebtoken::encode(&hs, &claims, &EncodingKey::from_secret(SECRET)).unwrap(),
                jsonwebtoken::encode(&ed, &claims, &EncodingKey::from_ed_der(&pkcs8)).unwrap(),
            ],
        }
    })
}

fuzz_target!(|input: (u8, &[u8])| {
    let (mode, data) = input;
    let f = fixture();
    let token = match mode % 3 {
        0 => String::from_utf8_lossy(data).into_owned(),
        m => {
            let mut bytes = f.tokens[usize::from(m - 1)].clone().into_bytes();
            for pair in data.chunks_exact(2).take(16) {
                let i = usize::from(pair[0]) * bytes.len() / 256;
                bytes[i] ^= pair[1];
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let room = if mode / 3 % 2 == 0 { "drop" } else { "other" };
    if let Ok(claims) = f.ring.verify(&token, room, &f.lanes, NOW) {
        assert!(
            f.tokens.contains(&token),
            "accepted a token the store did not sign: {token}"
        );
        assert_eq!(room, "drop");
        assert_eq!(claims.sub, "account-1");
        assert_eq!(claims.lane.as_deref(), Some("members"));
    }
});
