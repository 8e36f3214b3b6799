//! Tickets and passes: what verifies, and that anything else is refused with
//! the right reason.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use proptest::prelude::*;
use ring::signature::{Ed25519KeyPair, KeyPair};
use sluice_admission::tokens::{
    generate_ed25519_pkcs8_der, Claims, Expected, KeyMaterial, KeySpec, Keyring, TokenError,
    TokenType, IAT_LEEWAY_S,
};

const NOW: u64 = 1_800_000_000;
const HS_SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-hs";
const OLD_SECRET: &[u8] = b"old-old-old-old-old-old-old-old-old";

fn hs_ring() -> Keyring {
    Keyring::new(vec![
        KeySpec {
            kid: "k2".into(),
            material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
        },
        KeySpec {
            kid: "k1".into(),
            material: KeyMaterial::Hs256(OLD_SECRET.to_vec()),
        },
    ])
    .expect("valid keys")
}

fn claims(typ: TokenType) -> Claims {
    Claims::new(
        typ,
        "drop",
        "00112233445566778899aabbccddeeff",
        42,
        NOW - 10,
        NOW + 600,
    )
}

/// Long enough for every token these tests mint (`iat` NOW - 10, `exp`
/// NOW + 600).
const TTL_S: u64 = 3600;

fn expect(typ: TokenType, room: &str) -> Expected<'_> {
    Expected {
        typ,
        room,
        ttl_s: TTL_S,
        opens_at_s: None,
    }
}

fn ed_der() -> Vec<u8> {
    generate_ed25519_pkcs8_der().expect("keygen")
}

#[test]
fn ticket_round_trips_with_exact_claims() {
    let ring = hs_ring();
    let token = ring.sign(&claims(TokenType::Ticket)).unwrap();
    let got = ring
        .verify(&token, &expect(TokenType::Ticket, "drop"), NOW)
        .unwrap();
    assert_eq!(got, claims(TokenType::Ticket));
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(header.kid.as_deref(), Some("k2"));
    assert_eq!(header.alg, Algorithm::HS256);
    let payload: serde_json::Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(payload["iss"], "sluice");
    assert_eq!(payload["aud"], "drop");
    assert_eq!(payload["typ"], "ticket");
    assert_eq!(payload["seq"], 42);
}

#[test]
fn signing_is_deterministic_so_a_repoll_gets_the_same_pass() {
    let ring = hs_ring();
    let c = claims(TokenType::Pass);
    assert_eq!(ring.sign(&c).unwrap(), ring.sign(&c).unwrap());
    let ed = Keyring::new(vec![KeySpec {
        kid: "e".into(),
        material: KeyMaterial::Ed25519Pkcs8Der(ed_der()),
    }])
    .unwrap();
    assert_eq!(ed.sign(&c).unwrap(), ed.sign(&c).unwrap());
}

#[test]
fn a_rotated_out_signer_still_verifies() {
    let old = Keyring::new(vec![KeySpec {
        kid: "k1".into(),
        material: KeyMaterial::Hs256(OLD_SECRET.to_vec()),
    }])
    .unwrap();
    let token = old.sign(&claims(TokenType::Pass)).unwrap();
    assert!(hs_ring()
        .verify(&token, &expect(TokenType::Pass, "drop"), NOW)
        .is_ok());
}

#[test]
fn eddsa_round_trips_and_pem_parses() {
    let der = ed_der();
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(&der)
    );
    let material = KeyMaterial::ed25519_from_pem(&pem).expect("pem");
    let ring = Keyring::new(vec![KeySpec {
        kid: "ed".into(),
        material,
    }])
    .unwrap();
    let token = ring.sign(&claims(TokenType::Ticket)).unwrap();
    assert_eq!(
        jsonwebtoken::decode_header(&token).unwrap().alg,
        Algorithm::EdDSA
    );
    assert!(ring
        .verify(&token, &expect(TokenType::Ticket, "drop"), NOW)
        .is_ok());
}

#[test]
fn refusals_carry_their_reason() {
    let ring = hs_ring();
    let ticket = ring.sign(&claims(TokenType::Ticket)).unwrap();
    let cases: Vec<(Result<Claims, TokenError>, &str)> = vec![
        (
            ring.verify(&ticket, &expect(TokenType::Pass, "drop"), NOW),
            "wrong_type",
        ),
        (
            ring.verify(&ticket, &expect(TokenType::Ticket, "other"), NOW),
            "wrong_audience",
        ),
        (
            ring.verify(&ticket, &expect(TokenType::Ticket, "drop"), NOW + 600),
            "expired",
        ),
        (
            ring.verify("not a token", &expect(TokenType::Ticket, "drop"), NOW),
            "malformed",
        ),
        (
            ring.verify(&"a".repeat(5000), &expect(TokenType::Ticket, "drop"), NOW),
            "malformed",
        ),
    ];
    for (got, reason) in cases {
        assert_eq!(got.unwrap_err().reason(), reason);
    }
    assert!(ring
        .verify(&ticket, &expect(TokenType::Ticket, "drop"), NOW + 599)
        .is_ok());

    let mut foreign = claims(TokenType::Ticket);
    foreign.iss = "someone".into();
    let t = ring.sign(&foreign).unwrap();
    assert_eq!(
        ring.verify(&t, &expect(TokenType::Ticket, "drop"), NOW)
            .unwrap_err(),
        TokenError::WrongIssuer
    );

    let stranger = Keyring::new(vec![KeySpec {
        kid: "k9".into(),
        material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
    }])
    .unwrap();
    let t = stranger.sign(&claims(TokenType::Ticket)).unwrap();
    assert_eq!(
        ring.verify(&t, &expect(TokenType::Ticket, "drop"), NOW)
            .unwrap_err(),
        TokenError::UnknownKid
    );

    // Right kid, wrong secret.
    let forger = Keyring::new(vec![KeySpec {
        kid: "k2".into(),
        material: KeyMaterial::Hs256(b"forged-forged-forged-forged-forged".to_vec()),
    }])
    .unwrap();
    let t = forger.sign(&claims(TokenType::Ticket)).unwrap();
    assert_eq!(
        ring.verify(&t, &expect(TokenType::Ticket, "drop"), NOW)
            .unwrap_err(),
        TokenError::BadSignature
    );
}

#[test]
fn alg_none_is_refused() {
    let ring = hs_ring();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"k2","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(TokenType::Pass)).unwrap());
    for token in [
        format!("{header}.{payload}."),
        format!("{header}.{payload}"),
    ] {
        let err = ring
            .verify(&token, &expect(TokenType::Pass, "drop"), NOW)
            .unwrap_err();
        assert!(
            matches!(err, TokenError::AlgMismatch | TokenError::Malformed),
            "{err:?}"
        );
    }
    let token = format!("{header}.{payload}.");
    assert_eq!(
        ring.verify(&token, &expect(TokenType::Pass, "drop"), NOW)
            .unwrap_err(),
        TokenError::AlgMismatch
    );
}

#[test]
fn hs256_token_naming_an_ed25519_key_is_refused() {
    let der = ed_der();
    let public = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
        .unwrap()
        .public_key()
        .as_ref()
        .to_vec();
    let ring = Keyring::new(vec![
        KeySpec {
            kid: "ed".into(),
            material: KeyMaterial::Ed25519Pkcs8Der(der),
        },
        KeySpec {
            kid: "hs".into(),
            material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
        },
    ])
    .unwrap();
    // The attacker knows the public key and uses it as an HMAC secret.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("ed".into());
    let forged = jsonwebtoken::encode(
        &header,
        &claims(TokenType::Pass),
        &EncodingKey::from_secret(&public),
    )
    .unwrap();
    assert_eq!(
        ring.verify(&forged, &expect(TokenType::Pass, "drop"), NOW)
            .unwrap_err(),
        TokenError::AlgMismatch
    );
    // And an EdDSA header on the HMAC key.
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("hs".into());
    let ed_signed = Keyring::new(vec![KeySpec {
        kid: "x".into(),
        material: KeyMaterial::Ed25519Pkcs8Der(ed_der()),
    }])
    .unwrap()
    .sign(&claims(TokenType::Pass))
    .unwrap();
    let body = ed_signed.split_once('.').unwrap().1;
    let retagged = format!(
        "{}.{body}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap())
    );
    assert_eq!(
        ring.verify(&retagged, &expect(TokenType::Pass, "drop"), NOW)
            .unwrap_err(),
        TokenError::AlgMismatch
    );
}

#[test]
fn keyring_refuses_bad_keys() {
    assert!(Keyring::new(vec![]).is_err());
    assert!(Keyring::new(vec![KeySpec {
        kid: "a".into(),
        material: KeyMaterial::Hs256(vec![1; 8])
    }])
    .is_err());
    assert!(Keyring::new(vec![KeySpec {
        kid: "a".into(),
        material: KeyMaterial::Ed25519Pkcs8Der(vec![1; 48])
    }])
    .is_err());
    let dup = vec![
        KeySpec {
            kid: "a".into(),
            material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
        },
        KeySpec {
            kid: "a".into(),
            material: KeyMaterial::Hs256(OLD_SECRET.to_vec()),
        },
    ];
    assert!(Keyring::new(dup).is_err());
    let many = (0..17)
        .map(|i| KeySpec {
            kid: format!("k{i}"),
            material: KeyMaterial::Hs256(HS_SECRET.to_vec()),
        })
        .collect();
    assert!(matches!(
        Keyring::new(many),
        Err(sluice_admission::tokens::KeyError::TooMany { .. })
    ));
}

fn assert_every_flip_refused(ring: &Keyring, token: &str, typ: TokenType, index: usize, xor: u8) {
    let mut bytes = token.as_bytes().to_vec();
    let i = index % bytes.len();
    bytes[i] ^= xor;
    // A flip that leaves invalid UTF-8 cannot even reach `verify`.
    if let Ok(text) = String::from_utf8(bytes) {
        let got = ring.verify(&text, &expect(typ, "drop"), NOW);
        assert!(got.is_err(), "flip at {i} with {xor:#x} accepted: {text}");
    }
}

proptest! {
    #[test]
    fn any_changed_byte_of_a_hs256_token_is_refused(index in 0usize..1000, xor in 1u8..=255, pass in any::<bool>()) {
        let ring = hs_ring();
        let typ = if pass { TokenType::Pass } else { TokenType::Ticket };
        let token = ring.sign(&claims(typ)).unwrap();
        assert_every_flip_refused(&ring, &token, typ, index, xor);
    }

    #[test]
    fn any_changed_byte_of_an_eddsa_token_is_refused(index in 0usize..1000, xor in 1u8..=255) {
        let ring = Keyring::new(vec![KeySpec { kid: "ed".into(), material: KeyMaterial::Ed25519Pkcs8Der(ed_der()) }]).unwrap();
        let token = ring.sign(&claims(TokenType::Pass)).unwrap();
        assert_every_flip_refused(&ring, &token, TokenType::Pass, index, xor);
    }

    #[test]
    fn wrong_kid_aud_or_typ_is_refused(kid in "[a-z0-9]{1,8}", aud in "[a-z]{1,8}") {
        let ring = hs_ring();
        let token = ring.sign(&claims(TokenType::Ticket)).unwrap();
        if aud != "drop" {
            prop_assert_eq!(ring.verify(&token, &expect(TokenType::Ticket, &aud), NOW).unwrap_err(), TokenError::WrongAudience);
        }
        prop_assert_eq!(ring.verify(&token, &expect(TokenType::Pass, "drop"), NOW).unwrap_err(), TokenError::WrongType);
        if kid != "k1" && kid != "k2" {
            let other = Keyring::new(vec![KeySpec { kid: kid.clone(), material: KeyMaterial::Hs256(HS_SECRET.to_vec()) }]).unwrap();
            let t = other.sign(&claims(TokenType::Ticket)).unwrap();
            prop_assert_eq!(ring.verify(&t, &expect(TokenType::Ticket, "drop"), NOW).unwrap_err(), TokenError::UnknownKid);
        }
    }
}

#[test]
fn every_single_byte_change_is_refused_exhaustively() {
    let ring = hs_ring();
    let token = ring.sign(&claims(TokenType::Pass)).unwrap();
    for index in 0..token.len() {
        for xor in 1u8..=255 {
            assert_every_flip_refused(&ring, &token, TokenType::Pass, index, xor);
        }
    }
}

#[test]
fn keyring_from_config_reads_base64url_secrets() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use sluice_policies::model::{KeyAlg, Secret, SigningKey};
    let keys = vec![SigningKey {
        kid: "k2".into(),
        alg: KeyAlg::Hs256,
        secret: Secret::new(URL_SAFE_NO_PAD.encode(HS_SECRET)),
    }];
    let from_config = Keyring::from_config(&keys).unwrap();
    assert_eq!(from_config.signing_kid(), "k2");
    let token = from_config.sign(&claims(TokenType::Ticket)).unwrap();
    assert!(hs_ring()
        .verify(&token, &expect(TokenType::Ticket, "drop"), NOW)
        .is_ok());
    let bad = vec![SigningKey {
        kid: "x".into(),
        alg: KeyAlg::Hs256,
        secret: Secret::new("not base64!".into()),
    }];
    assert!(Keyring::from_config(&bad).is_err());
}

/// A token of `typ` issued at `iat` that expires at `exp`.
fn minted(ring: &Keyring, typ: TokenType, iat: u64, exp: u64) -> String {
    let mut c = claims(typ);
    c.iat = iat;
    c.exp = exp;
    ring.sign(&c).unwrap()
}

#[test]
fn a_token_issued_in_the_future_is_refused_beyond_the_leeway() {
    let ring = hs_ring();
    for typ in [TokenType::Ticket, TokenType::Pass] {
        let at_leeway = minted(&ring, typ, NOW + IAT_LEEWAY_S, NOW + 60);
        assert!(ring.verify(&at_leeway, &expect(typ, "drop"), NOW).is_ok());
        let ahead = minted(&ring, typ, NOW + IAT_LEEWAY_S + 1, NOW + 60);
        let refused = ring.verify(&ahead, &expect(typ, "drop"), NOW).unwrap_err();
        assert_eq!(refused, TokenError::IssuedInFuture);
        assert_eq!(refused.reason(), "issued_in_future");
    }
}

#[test]
fn a_lifetime_longer_than_the_rooms_ttl_is_refused() {
    let ring = hs_ring();
    let pass_ttl_s = 600;
    let exact = minted(&ring, TokenType::Pass, NOW - 10, NOW - 10 + pass_ttl_s);
    assert!(ring
        .verify(&exact, &Expected::pass("drop", pass_ttl_s), NOW)
        .is_ok());
    let longer = minted(&ring, TokenType::Pass, NOW - 10, NOW - 9 + pass_ttl_s);
    let refused = ring
        .verify(&longer, &Expected::pass("drop", pass_ttl_s), NOW)
        .unwrap_err();
    assert_eq!(refused, TokenError::BadLifetime);
    assert_eq!(refused.reason(), "bad_lifetime");
    // "Forever": the token a leaked key would mint.
    let forever = minted(&ring, TokenType::Ticket, NOW - 10, u64::MAX);
    assert_eq!(
        ring.verify(&forever, &Expected::ticket("drop", 3600), NOW),
        Err(TokenError::BadLifetime)
    );
    // The TTL is the one of the expected type.
    let ticket = minted(&ring, TokenType::Ticket, NOW - 10, NOW + 3000);
    assert!(ring
        .verify(&ticket, &Expected::ticket("drop", 3600), NOW)
        .is_ok());
    assert_eq!(
        ring.verify(&ticket, &Expected::ticket("drop", 600), NOW),
        Err(TokenError::BadLifetime)
    );
}

#[test]
fn an_empty_or_negative_lifetime_is_refused() {
    let ring = hs_ring();
    let empty = minted(&ring, TokenType::Pass, NOW + 2, NOW + 2);
    let backwards = minted(&ring, TokenType::Pass, NOW + 3, NOW + 1);
    for t in [empty, backwards] {
        assert_eq!(
            ring.verify(&t, &Expected::pass("drop", 600), NOW),
            Err(TokenError::BadLifetime)
        );
    }
}

#[test]
fn a_pre_queue_ticket_lives_from_the_opening() {
    let ring = hs_ring();
    let opens_at_s = NOW + 1800;
    let ttl_s = 3600;
    // Joined before the opening: it expires ttl_s after it.
    let early = minted(&ring, TokenType::Ticket, NOW - 10, opens_at_s + ttl_s);
    let rules = Expected::ticket("drop", ttl_s).opening_at(Some(opens_at_s));
    assert!(ring.verify(&early, &rules, NOW).is_ok());
    assert_eq!(
        ring.verify(&early, &Expected::ticket("drop", ttl_s), NOW),
        Err(TokenError::BadLifetime)
    );
    let later = minted(&ring, TokenType::Ticket, NOW - 10, opens_at_s + ttl_s + 1);
    assert_eq!(
        ring.verify(&later, &rules, NOW),
        Err(TokenError::BadLifetime)
    );
    // An opening past `exp` cannot underflow into a huge allowance.
    let past = Expected::ticket("drop", ttl_s).opening_at(Some(u64::MAX));
    assert!(ring.verify(&early, &past, NOW).is_ok());
}

#[test]
fn a_token_without_iat_is_malformed() {
    let ring = hs_ring();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k2".into());
    let claims = serde_json::json!({
        "iss": "sluice", "aud": "drop", "sub": "00112233445566778899aabbccddeeff",
        "seq": 1, "typ": "pass", "exp": NOW + 60,
    });
    let token =
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(HS_SECRET)).unwrap();
    assert_eq!(
        ring.verify(&token, &Expected::pass("drop", 600), NOW),
        Err(TokenError::Malformed)
    );
}

#[test]
fn a_token_with_critical_extensions_is_refused_even_when_signed() {
    let ring = hs_ring();
    let good = ring.sign(&claims(TokenType::Pass)).unwrap();
    let payload = good.split('.').nth(1).unwrap();
    let expected = expect(TokenType::Pass, "drop");
    assert!(ring.verify(&good, &expected, NOW).is_ok());
    for header in [
        r#"{"alg":"HS256","kid":"k2","typ":"JWT","crit":["exp"]}"#,
        r#"{"alg":"HS256","kid":"k2","typ":"JWT","crit":[]}"#,
    ] {
        let head = URL_SAFE_NO_PAD.encode(header);
        let signing_input = format!("{head}.{payload}");
        let signature = jsonwebtoken::crypto::sign(
            signing_input.as_bytes(),
            &EncodingKey::from_secret(HS_SECRET),
            Algorithm::HS256,
        )
        .unwrap();
        let token = format!("{signing_input}.{signature}");
        assert_eq!(
            ring.verify(&token, &expected, NOW),
            Err(TokenError::Malformed),
            "{header}"
        );
    }
}

/// A store's enqueue token is never a ticket or pass: not under another
/// kid (the config keeps the kids apart), and not even when it names a
/// ticket key's kid and is signed with its secret (no `seq`, no `iss =
/// sluice`, `typ` absent or `"enqueue"`).
#[test]
fn an_enqueue_token_is_refused_as_a_ticket_or_pass() {
    let ring = hs_ring();
    let enqueue_claims = [
        serde_json::json!({"sub": "account-1", "aud": "drop", "iat": NOW - 10, "exp": NOW + 600}),
        serde_json::json!({"sub": "account-1", "aud": "drop", "iat": NOW - 10, "exp": NOW + 600, "typ": "enqueue", "lane": "members"}),
    ];
    for claims in enqueue_claims {
        for kid in ["store1", "k2"] {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some(kid.into());
            let token =
                jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(HS_SECRET))
                    .unwrap();
            for typ in [TokenType::Ticket, TokenType::Pass] {
                let err = ring.verify(&token, &expect(typ, "drop"), NOW).unwrap_err();
                let expected = if kid == "k2" {
                    TokenError::Malformed
                } else {
                    TokenError::UnknownKid
                };
                assert_eq!(err, expected, "{kid} {claims}");
            }
        }
    }
}
