use std::num::NonZeroU32;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_policies::model::Difficulty;

use super::*;

const NOW: u64 = 1_800_000_000;
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
const OTHER_KEY: &[u8] = b"fedcba9876543210fedcba9876543210";

fn keys() -> ChallengeKeys {
    ChallengeKeys::new(&[KEY]).unwrap()
}

fn issue(bits: u8) -> IssuedChallenge {
    keys().issue("drop", bits, NOW, 60, &mut StdRng::seed_from_u64(7))
}

#[test]
fn an_issued_challenge_is_short_visible_ascii_and_says_what_it_was_given() {
    let issued = issue(12);
    assert!(issued.text.len() <= CHALLENGE_BYTES_MAX && issued.text.len() < 200);
    assert!(issued.text.bytes().all(|b| b.is_ascii_graphic()));
    assert!(
        issued.text.starts_with("v1.drop.12.1800000060."),
        "{}",
        issued.text
    );
    let parsed = token::parse(&issued.text).unwrap();
    assert_eq!(parsed.challenge, issued.challenge);
    assert_eq!(issued.challenge.expires_at_s, NOW + 60);
    // Two challenges never share a nonce.
    let mut rng = StdRng::seed_from_u64(1);
    let a = keys().issue("drop", 12, NOW, 60, &mut rng);
    let b = keys().issue("drop", 12, NOW, 60, &mut rng);
    assert_ne!(a.challenge.nonce, b.challenge.nonce);
}

#[test]
fn a_solved_challenge_verifies_on_any_gateway_with_the_key() {
    let issued = issue(10);
    let solution = solve(&issued.text, 10, 0, 1 << 20).expect("10 bits within a million tries");
    // Another gateway: another `ChallengeKeys` built from the same secret.
    let elsewhere = ChallengeKeys::new(&[OTHER_KEY, KEY]).unwrap();
    let v = verify_join(&elsewhere, &issued.text, &solution, "drop", NOW + 59).unwrap();
    assert_eq!(v.challenge, issued.challenge);
    let hash = solution_hash(&issued.text, &solution);
    assert!(leading_zero_bits(&hash) >= 10);
    assert_eq!(v.solution_tag.to_be_bytes(), hash[..8]);
}

#[test]
fn wrong_expired_foreign_and_malformed_are_told_apart() {
    let issued = issue(10);
    let good = solve(&issued.text, 10, 0, 1 << 20).unwrap();
    let bad = (0u64..)
        .map(|n| n.to_string())
        .find(|s| leading_zero_bits(&solution_hash(&issued.text, s)) < 10)
        .unwrap();
    let k = keys();
    let check = |c: &str, s: &str, room: &str, now: u64| verify_join(&k, c, s, room, now);
    assert_eq!(
        check(&issued.text, &bad, "drop", NOW),
        Err(ChallengeError::WrongSolution)
    );
    assert_eq!(
        check(&issued.text, &good, "drop", NOW + 60),
        Err(ChallengeError::Expired)
    );
    assert_eq!(
        check(&issued.text, &good, "other", NOW),
        Err(ChallengeError::WrongRoom)
    );
    let foreign = ChallengeKeys::new(&[OTHER_KEY]).unwrap();
    assert_eq!(
        verify_join(&foreign, &issued.text, &good, "drop", NOW),
        Err(ChallengeError::BadSignature)
    );
    // A lowered difficulty is a changed challenge: the MAC no longer holds.
    let easier = issued.text.replacen(".10.", ".1.", 1);
    assert_eq!(
        check(&easier, &good, "drop", NOW),
        Err(ChallengeError::BadSignature)
    );
    for solution in ["", "12a", "123456789012345678901", " 1", "-1", "１"] {
        assert_eq!(
            check(&issued.text, solution, "drop", NOW),
            Err(ChallengeError::Malformed),
            "{solution:?}"
        );
    }
    assert_eq!(ChallengeError::Malformed.code(), "bad_request");
    assert_eq!(ChallengeError::Expired.status(), 403);
}

#[test]
fn a_challenge_living_longer_than_any_room_allows_is_refused() {
    let long = keys().issue("drop", 4, NOW, 3_600, &mut StdRng::seed_from_u64(3));
    let s = solve(&long.text, 4, 0, 1 << 16).unwrap();
    assert_eq!(
        verify_join(&keys(), &long.text, &s, "drop", NOW),
        Err(ChallengeError::BadLifetime)
    );
}

#[test]
fn the_parser_refuses_every_other_shape() {
    let issued = issue(10);
    let t = issued.text.as_str();
    let (signed, mac) = t.rsplit_once('.').unwrap();
    let cases = [
        String::new(),
        "v1".into(),
        t.replacen("v1.", "v2.", 1),
        t.replacen("v1.drop.", "v1.Drop.", 1),
        t.replacen(".10.", ".010.", 1),
        t.replacen(".10.", ".0.", 1),
        t.replacen(".10.", ".33.", 1),
        t.replacen(".1800000060.", ".01800000060.", 1),
        t.replacen(".1800000060.", ".99999999999999999999.", 1),
        format!("{signed}.{}", &mac[1..]),
        format!("{signed}.{mac}A"),
        format!("{signed}.{}", mac.replace(|c: char| c.is_alphanumeric(), "+")),
        format!("{signed}x.{mac}"),
        format!("{t} "),
        format!("{t}.extra"),
        format!("x.{t}"),
        "v1.drop.10.1800000060.00112233445566778899AABBCCDDEEFF.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(),
        "a".repeat(CHALLENGE_BYTES_MAX + 1),
        "é".into(),
    ];
    for case in cases {
        assert_eq!(
            token::parse(&case).map(|_| ()),
            Err(ChallengeError::Malformed),
            "{case:?}"
        );
    }
}

#[test]
fn leading_zero_bits_counts_from_the_top_bit() {
    let mut h = [0xffu8; 32];
    assert_eq!(leading_zero_bits(&h), 0);
    h[0] = 0x00;
    h[1] = 0x1f;
    assert_eq!(leading_zero_bits(&h), 11);
    assert_eq!(leading_zero_bits(&[0u8; 32]), 256);
}

fn by(seq: u64, solution_tag: u64) -> SpentBy {
    SpentBy {
        seq,
        solution_tag,
        ticket_id: [seq as u8; 16],
        issued_at_s: NOW,
        expires_at_s: NOW + 600,
    }
}

#[test]
fn spending_is_once_and_a_retry_gets_its_place() {
    assert_eq!(decide_spend(None, 5), SpendDecision::Fresh);
    let by42 = by(42, 5);
    let spent = Some(SpentState::Spent(by42));
    assert_eq!(decide_spend(spent, 5), SpendDecision::SamePlace(by42));
    assert_eq!(decide_spend(spent, 6), SpendDecision::Replayed);
    let pending = Some(SpentState::Pending { solution_tag: 5 });
    assert_eq!(decide_spend(pending, 5), SpendDecision::InFlight);
    assert_eq!(decide_spend(pending, 6), SpendDecision::Replayed);

    let mut spent = SpentChallenges::new(2);
    let (a, b, c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
    assert_eq!(spent.lookup(&a, NOW), None);
    spent.record(a, by42, NOW + 60, NOW).unwrap();
    assert_eq!(spent.lookup(&a, NOW + 59), Some(SpentState::Spent(by42)));
    // A second record of the same nonce keeps the first.
    spent.record(a, by(1, 1), NOW + 60, NOW).unwrap();
    assert_eq!(spent.lookup(&a, NOW), Some(SpentState::Spent(by42)));
    spent.record(b, by42, NOW + 70, NOW + 10).unwrap();
    // Full of unexpired entries: refused until the oldest expires.
    assert_eq!(
        spent.record(c, by42, NOW + 80, NOW + 20),
        Err(SpentFull { retry_after_s: 40 })
    );
    // The record of a challenge is kept until it expires, no longer.
    assert_eq!(spent.lookup(&a, NOW + 60), None);
    assert_eq!(spent.len(), 1);
    spent.record(c, by42, NOW + 80, NOW + 60).unwrap();
    assert_eq!(spent.len(), 2);
}

#[test]
fn a_reserved_challenge_is_spent_by_a_place_or_given_back() {
    let mut spent = SpentChallenges::new(4);
    let n = [7u8; 16];
    assert_eq!(spent.reserve(n, 9, NOW + 60, NOW), Ok(None));
    // While the first join is answered: the same solution waits, another
    // one is a replay.
    let now = Some(SpentState::Pending { solution_tag: 9 });
    assert_eq!(spent.reserve(n, 9, NOW + 60, NOW), Ok(now));
    // No place: the challenge is not spent, and may be used again.
    spent.release(&n);
    assert_eq!(spent.lookup(&n, NOW), None);
    assert_eq!(spent.reserve(n, 8, NOW + 60, NOW), Ok(None));
    spent.confirm(&n, by(3, 8));
    assert_eq!(
        spent.reserve(n, 8, NOW + 60, NOW + 1),
        Ok(Some(SpentState::Spent(by(3, 8))))
    );
    // Releasing a spent one changes nothing.
    spent.release(&n);
    assert_eq!(spent.lookup(&n, NOW), Some(SpentState::Spent(by(3, 8))));
    // Reserve and release many times: the expiry queue stays bounded.
    for i in 0..100u8 {
        let m = [i.wrapping_add(100); 16];
        spent.reserve(m, 1, NOW + 60, NOW).unwrap();
        spent.release(&m);
    }
    assert!(spent.len() <= 4);
}

#[test]
fn the_shared_stores_text_reads_back_and_nothing_else_does() {
    for state in [
        SpentState::Pending { solution_tag: 0 },
        SpentState::Pending {
            solution_tag: u64::MAX,
        },
        SpentState::Spent(by(u64::MAX, 77)),
    ] {
        assert_eq!(SpentState::decode(&state.encode()), Some(state));
    }
    for bad in [
        "",
        "p",
        "p x",
        "p 1 2",
        "q 1",
        "s 1 2 00 3 4",
        "s 1 2 0101010101010101010101010101010 3 4",
        "s 1 2 01010101010101010101010101010101 3",
        "s 1 2 01010101010101010101010101010101 3 4 5",
    ] {
        assert_eq!(SpentState::decode(bad), None, "{bad:?}");
    }
}

#[test]
fn the_adaptive_law_adds_a_bit_per_doubling_above_the_target() {
    let law = |r: f64| adaptive_bits(r, 100.0, 12, 24);
    assert_eq!(law(0.0), 12);
    assert_eq!(law(100.0), 12);
    assert_eq!(law(100.1), 13);
    assert_eq!(law(200.0), 13);
    assert_eq!(law(201.0), 14);
    assert_eq!(law(400.0), 14);
    assert_eq!(law(100.0 * 1024.0), 22);
    assert_eq!(law(1e12), 24);
    assert_eq!(law(f64::INFINITY), 24);
    assert_eq!(law(f64::NAN), 12);
    assert_eq!(law(-5.0), 12);
    assert_eq!(adaptive_bits(1e9, 0.0, 12, 24), 12);
    assert_eq!(
        adaptive_bits(1e9, 100.0, 20, 16),
        16,
        "min above max reads as max"
    );
    // Monotone in the rate.
    let mut last = 0;
    for r in (0..100_000).map(|i| f64::from(i) * 0.37) {
        let b = law(r);
        assert!(b >= last);
        last = b;
    }
    let adaptive = Difficulty::Adaptive {
        min_bits: 12,
        max_bits: 24,
        target_joins_per_second: NonZeroU32::new(100).unwrap(),
    };
    assert_eq!(bits_now(&adaptive, 350.0), 14);
    assert_eq!(bits_now(&Difficulty::Fixed(18), 1e9), 18);
}

#[test]
fn keys_derived_from_the_signing_secrets_agree_across_gateways_and_differ_from_them() {
    let secret = [9u8; 32];
    let a = ChallengeKeys::derived_from(&[&secret]).unwrap();
    let b = ChallengeKeys::derived_from(&[&secret]).unwrap();
    let issued = a.issue("drop", 1, NOW, 60, &mut StdRng::seed_from_u64(2));
    let s = solve(&issued.text, 1, 0, 1 << 10).unwrap();
    assert!(verify_join(&b, &issued.text, &s, "drop", NOW).is_ok());
    let raw = ChallengeKeys::new(&[&secret]).unwrap();
    assert_eq!(
        verify_join(&raw, &issued.text, &s, "drop", NOW),
        Err(ChallengeError::BadSignature)
    );
    assert!(ChallengeKeys::new(&[]).is_none());
    assert!(ChallengeKeys::new(&[b"short"]).is_none());
}
