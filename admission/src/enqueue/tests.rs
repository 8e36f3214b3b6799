use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};
use sluice_policies::model::{EnqueueKey, EnqueueKeyMaterial, Lane, SecretBytes};

use super::*;
use crate::tokens::{generate_ed25519_pkcs8_der, Claims, KeyMaterial, KeySpec, Keyring, TokenType};

const NOW: u64 = 1_800_000_000;
const STORE_SECRET: &[u8] = b"store-secret-store-secret-store-secret!";

struct Fixture {
    ring: EnqueueKeyring,
    ed_pkcs8: Vec<u8>,
    ed_public: [u8; 32],
    lanes: Vec<Lane>,
}

fn fixture() -> Fixture {
    let ed_pkcs8 = generate_ed25519_pkcs8_der().unwrap();
    let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&ed_pkcs8).unwrap();
    let ed_public: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
    let keys = [
        EnqueueKey {
            kid: "store-hs".into(),
            material: EnqueueKeyMaterial::Hs256(SecretBytes::new(STORE_SECRET.to_vec())),
        },
        EnqueueKey {
            kid: "store-ed".into(),
            material: EnqueueKeyMaterial::Ed25519Public(ed_public),
        },
    ];
    Fixture {
        ring: EnqueueKeyring::new(&keys),
        ed_pkcs8,
        ed_public,
        lanes: vec![
            Lane {
                name: "members".into(),
                share: 0.3,
                bypass: false,
            },
            Lane {
                name: "staff".into(),
                share: 0.0,
                bypass: true,
            },
        ],
    }
}

fn claims() -> Value {
    json!({"sub": "account-123", "aud": "drop", "iat": NOW - 10, "exp": NOW + 3600})
}

fn hs(kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(STORE_SECRET)).unwrap()
}

fn ed(f: &Fixture, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("store-ed".into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_der(&f.ed_pkcs8)).unwrap()
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

#[test]
fn hs256_and_eddsa_tokens_verify_with_their_lane() {
    let f = fixture();
    let c = f
        .ring
        .verify(&hs("store-hs", &claims()), "drop", &f.lanes, NOW)
        .unwrap();
    assert_eq!(
        c,
        EnqueueClaims {
            sub: "account-123".into(),
            lane: None,
            iat: NOW - 10,
            exp: NOW + 3600
        }
    );
    let members = with(claims(), "lane", json!("members"));
    let c = f
        .ring
        .verify(&ed(&f, &members), "drop", &f.lanes, NOW)
        .unwrap();
    assert_eq!(c.lane.as_deref(), Some("members"));
    // `typ = "enqueue"`, an audience list, `nbf`, other claims: all fine.
    let rich = json!({"sub": "a", "aud": ["other", "drop"], "iat": NOW, "exp": NOW + 60,
        "nbf": NOW, "typ": "enqueue", "iss": "store", "jti": "x1", "email_verified": true});
    assert!(f
        .ring
        .verify(&hs("store-hs", &rich), "drop", &f.lanes, NOW)
        .is_ok());
    // `lane = "default"` is the default lane.
    let default = with(claims(), "lane", json!("default"));
    let c = f
        .ring
        .verify(&hs("store-hs", &default), "drop", &f.lanes, NOW)
        .unwrap();
    assert_eq!(c.lane, None);
    assert_eq!(f.ed_public.len(), 32);
}

#[test]
fn every_refusal_has_its_reason_and_maps_to_invalid_enqueue_token() {
    let f = fixture();
    let v = |token: &str| f.ring.verify(token, "drop", &f.lanes, NOW).unwrap_err();
    let cases: Vec<(String, EnqueueError)> = vec![
        (hs("nope", &claims()), EnqueueError::UnknownKid),
        (
            hs("store-hs", &with(claims(), "typ", json!("ticket"))),
            EnqueueError::WrongType,
        ),
        (
            hs("store-hs", &with(claims(), "typ", json!("pass"))),
            EnqueueError::WrongType,
        ),
        (
            hs("store-hs", &with(claims(), "aud", json!("other"))),
            EnqueueError::WrongAudience,
        ),
        (
            hs("store-hs", &with(claims(), "aud", json!(["a", "b"]))),
            EnqueueError::WrongAudience,
        ),
        (
            hs("store-hs", &with(claims(), "exp", json!(NOW))),
            EnqueueError::Expired,
        ),
        (
            hs("store-hs", &with(claims(), "nbf", json!(NOW + 60))),
            EnqueueError::NotYetValid,
        ),
        (
            hs(
                "store-hs",
                &with(
                    with(claims(), "iat", json!(NOW + 60)),
                    "exp",
                    json!(NOW + 120),
                ),
            ),
            EnqueueError::IssuedInFuture,
        ),
        (
            hs(
                "store-hs",
                &with(
                    with(claims(), "iat", json!(NOW - 10)),
                    "exp",
                    json!(NOW - 10 + 86_401),
                ),
            ),
            EnqueueError::BadLifetime,
        ),
        (
            hs("store-hs", &with(claims(), "sub", json!(""))),
            EnqueueError::BadSubject,
        ),
        (
            hs("store-hs", &with(claims(), "sub", json!("x".repeat(257)))),
            EnqueueError::BadSubject,
        ),
        (
            hs("store-hs", &with(claims(), "lane", json!("vip"))),
            EnqueueError::UnknownLane,
        ),
        (
            hs("store-hs", &with(claims(), "sub", json!(42))),
            EnqueueError::Malformed,
        ),
        (
            hs(
                "store-hs",
                &json!({"sub": "a", "aud": "drop", "exp": NOW + 60}),
            ),
            EnqueueError::Malformed,
        ),
        ("a.b".into(), EnqueueError::Malformed),
        (
            "x".repeat(ENQUEUE_TOKEN_BYTES_MAX + 1),
            EnqueueError::Malformed,
        ),
    ];
    for (token, expected) in cases {
        let got = v(&token);
        assert_eq!(got, expected, "{token}");
        assert_eq!(got.code(), "invalid_enqueue_token");
        assert_eq!(got.status(), 401);
    }
    // A day exactly is accepted.
    let day = with(
        with(claims(), "iat", json!(NOW - 10)),
        "exp",
        json!(NOW - 10 + 86_400),
    );
    assert!(f
        .ring
        .verify(&hs("store-hs", &day), "drop", &f.lanes, NOW)
        .is_ok());
}

#[test]
fn tampering_alg_none_key_confusion_and_crit_are_refused() {
    let f = fixture();
    let v = |token: &str| f.ring.verify(token, "drop", &f.lanes, NOW).unwrap_err();
    let token = hs("store-hs", &claims());
    let (head, rest) = token.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    let other = URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&with(claims(), "sub", json!("account-999"))).unwrap());
    assert_eq!(
        v(&format!("{head}.{other}.{sig}")),
        EnqueueError::BadSignature
    );

    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
    let none = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"store-hs"}"#);
    assert_eq!(v(&format!("{none}.{payload}.")), EnqueueError::AlgMismatch);
    // HS256 naming the Ed25519 key, signed with its public key as the
    // HMAC secret: the classic key confusion.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("store-ed".into());
    let confused =
        jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(&f.ed_public)).unwrap();
    assert_eq!(v(&confused), EnqueueError::AlgMismatch);
    let no_kid = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(),
        &EncodingKey::from_secret(STORE_SECRET),
    )
    .unwrap();
    assert_eq!(v(&no_kid), EnqueueError::UnknownKid);
    let crit = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","kid":"store-hs","crit":["exp"]}"#);
    assert_eq!(
        v(&format!("{crit}.{payload}.{sig}")),
        EnqueueError::Malformed
    );
}

#[test]
fn a_sluice_ticket_or_pass_is_never_an_enqueue_token() {
    let f = fixture();
    // Sluice's own keyring: another kid (the config refuses a repeat).
    let sluice = Keyring::new(vec![KeySpec {
        kid: "k1".into(),
        material: KeyMaterial::Hs256(STORE_SECRET.to_vec()),
    }])
    .unwrap();
    for typ in [TokenType::Ticket, TokenType::Pass] {
        let claims = Claims::new(
            typ,
            "drop",
            "00112233445566778899aabbccddeeff",
            3,
            NOW - 10,
            NOW + 60,
        );
        let token = sluice.sign(&claims).unwrap();
        assert_eq!(
            f.ring.verify(&token, "drop", &f.lanes, NOW),
            Err(EnqueueError::UnknownKid)
        );
        // Even under the same kid and secret, its `typ` gives it away.
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("store-hs".into());
        let same_key =
            jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(STORE_SECRET))
                .unwrap();
        assert_eq!(
            f.ring.verify(&same_key, "drop", &f.lanes, NOW),
            Err(EnqueueError::WrongType)
        );
    }
}

#[test]
fn read_tells_a_missing_token_from_a_bad_one() {
    let f = fixture();
    let read = |token: Option<&str>, required| f.ring.read(token, required, "drop", &f.lanes, NOW);
    assert_eq!(read(None, true), Err(EnqueueError::Missing));
    assert_eq!(EnqueueError::Missing.code(), "enqueue_token_required");
    assert_eq!(read(None, false), Ok(None));
    assert_eq!(read(Some("junk"), false), Err(EnqueueError::Malformed));
    let good = hs("store-hs", &claims());
    assert_eq!(
        read(Some(&good), false).unwrap().unwrap().sub,
        "account-123"
    );
    // A room without keys refuses every token.
    let empty = EnqueueKeyring::new(&[]);
    assert_eq!(
        empty.read(Some(&good), false, "drop", &[], NOW),
        Err(EnqueueError::UnknownKid)
    );
}

#[test]
fn the_account_hash_is_keyed_stable_and_says_nothing_of_the_account() {
    let key = [5u8; 32];
    let a = AccountHasher::new(&key).unwrap();
    let b = AccountHasher::new(&key).unwrap();
    let h = a.hash("account-123");
    assert_eq!(
        h,
        b.hash("account-123"),
        "the same on every gateway with the key"
    );
    assert_ne!(h, a.hash("account-124"));
    assert_ne!(
        h,
        AccountHasher::new(&[6u8; 32]).unwrap().hash("account-123")
    );
    let hex = h.to_hex();
    assert_eq!(hex.len(), 32);
    assert!(!hex.contains("account") && !format!("{h:?}").contains("account"));
    assert_eq!(format!("{h}"), hex);
    assert!(AccountHasher::new(&[1u8; 31]).is_none());
    // Pinned, so a change of the derivation (which would make every
    // account new in a running fleet) fails here first.
    // (the value from Python's hmac module: the documented derivation).
    assert_eq!(
        AccountHasher::new(&[0u8; 32]).unwrap().hash("a").to_hex(),
        "bf4a814531a6ae212296232cdc97f5a9"
    );
}
