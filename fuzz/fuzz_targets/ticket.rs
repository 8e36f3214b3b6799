//! The ticket decoder (`Keyring::verify`) on arbitrary bytes, and on a
//! valid pass with arbitrary bytes flipped: never panics, and the only
//! token it accepts is the one the keyring signed.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_admission::tokens::{
    generate_ed25519_pkcs8_der, Claims, Expected, KeyMaterial, KeySpec, Keyring, TokenType,
};

const NOW: u64 = 1_800_000_000;
const TTL_S: u64 = 600;
const HS_SECRET: &[u8] = b"fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz";

struct Fixture {
    ring: Keyring,
    /// A pass signed by each key: HS256, then EdDSA.
    passes: [String; 2],
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let hs = KeySpec {
            kid: "hs".into(),
            material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
        };
        let ed = KeySpec {
            kid: "ed".into(),
            material: KeyMaterial::Ed25519Pkcs8Der(generate_ed25519_pkcs8_der().unwrap()),
        };
        let claims = Claims::new(
            TokenType::Pass,
            "drop",
            "00112233445566778899aabbccddeeff",
            7,
            NOW - 10,
            NOW - 10 + TTL_S,
        );
        let hs_ring = Keyring::new(vec![hs.clone()]).unwrap();
        let ed_ring = Keyring::new(vec![ed.clone()]).unwrap();
        Fixture {
            ring: Keyring::new(vec![hs, ed]).unwrap(),
            passes: [hs_ring.sign(&claims).unwrap(), ed_ring.sign(&claims).unwrap()],
        }
    })
}

fuzz_target!(|input: (u8, &[u8])| {
    let (mode, data) = input;
    let f = fixture();
    let token = match mode % 3 {
        0 => String::from_utf8_lossy(data).into_owned(),
        // Flip bytes of a valid pass: pairs of (index, xor).
        m => {
            let mut bytes = f.passes[usize::from(m - 1)].clone().into_bytes();
            for pair in data.chunks_exact(2).take(16) {
                // Spread over the whole token, which is longer than 256.
                let i = usize::from(pair[0]) * bytes.len() / 256;
                bytes[i] ^= pair[1];
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    // One verification per input (an Ed25519 check is the costly part);
    // which rules it is held to comes from the input too.
    let expected = [
        Expected::pass("drop", TTL_S),
        Expected::ticket("drop", TTL_S),
        Expected::pass("other", TTL_S),
    ][usize::from(mode / 3) % 3];
    if let Ok(claims) = f.ring.verify(&token, &expected, NOW) {
        assert!(f.passes.contains(&token), "accepted a token it did not sign: {token}");
        assert_eq!(expected, Expected::pass("drop", TTL_S), "accepted under other rules");
        assert_eq!((claims.aud.as_str(), claims.typ), ("drop", TokenType::Pass));
    }
});
