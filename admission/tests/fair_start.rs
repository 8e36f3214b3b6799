//! Fair start: the pre-queue is drawn from a committed seed at the opening,
//! anyone can re-do the draw, and later arrivals queue behind in order.

mod common;

use common::{policy, room, T0_MS};
use sha2::{Digest, Sha256};
use sluice_admission::fair_start::draw_order;
use sluice_admission::{Joined, Status, Stop};

const OPENS_MS: u64 = T0_MS + 60_000;
const ENTRANTS: u64 = 500;

#[test]
fn pre_queue_is_drawn_from_the_committed_seed_then_fifo() {
    let mut p = policy();
    p.opens_at_ms = Some(OPENS_MS);
    let mut r = room(p);

    let early: Vec<Joined> = (0..ENTRANTS)
        .map(|i| r.join(T0_MS + i * 10).unwrap())
        .collect();
    for (i, j) in early.iter().enumerate() {
        assert_eq!(j.seq, i as u64);
        assert_eq!(
            j.expires_at_s,
            OPENS_MS / 1000 + 3600,
            "the ticket's clock starts at the opening"
        );
        let Status::PreQueue(pq) = j.status else {
            panic!("{:?}", j.status)
        };
        assert_eq!(pq.entrants, i as u64 + 1);
    }
    let before = r.fair_start().unwrap();
    assert_eq!(
        before.seed_hex, None,
        "the seed stays secret until the draw"
    );
    assert_eq!(before.entrants, ENTRANTS);
    assert_eq!(r.release_once(T0_MS + 30_000, 100).stop, Stop::NotOpen);
    assert_eq!(r.stats(T0_MS + 30_000).waiting, ENTRANTS);
    // Everyone keeps checking in until the opening.
    for t in [25_000, 50_000] {
        for j in &early {
            let s = r.status(j.seq, &j.ticket_id, T0_MS + t).unwrap();
            assert!(matches!(s, Status::PreQueue(_)), "{s:?}");
        }
    }

    // The opening: a later arrival queues behind the whole pre-queue.
    let late = r.join(OPENS_MS).unwrap();
    assert_eq!(late.seq, ENTRANTS);
    let Status::Waiting(w) = late.status else {
        panic!("{:?}", late.status)
    };
    assert_eq!(w.position, ENTRANTS + 1);

    let after = r.fair_start().unwrap();
    assert_eq!(after.commitment_hex, before.commitment_hex);
    let seed_hex = after.seed_hex.expect("revealed after the opening");
    let seed: [u8; 32] = hex::decode(&seed_hex).unwrap().try_into().unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(seed)),
        before.commitment_hex,
        "the seed matches the commitment"
    );

    // Anyone can re-do the draw; every position agrees with it.
    let order = draw_order(&seed, ENTRANTS as u32);
    assert_ne!(
        order,
        (0..ENTRANTS as u32).collect::<Vec<_>>(),
        "the draw reordered arrivals"
    );
    for (place, &arrival) in order.iter().enumerate() {
        let j = &early[arrival as usize];
        match r.status(j.seq, &j.ticket_id, OPENS_MS + 1_000).unwrap() {
            Status::Waiting(w) => assert_eq!(w.position, place as u64 + 1, "arrival {arrival}"),
            other => panic!("{other:?}"),
        }
    }

    // Release follows the draw, then FIFO.
    let out = r.release_once(OPENS_MS + 1_000, 1_000);
    assert_eq!(out.released, 10, "burst");
    for &arrival in &order[..10] {
        let j = &early[arrival as usize];
        assert!(matches!(
            r.status(j.seq, &j.ticket_id, OPENS_MS + 4_000).unwrap(),
            Status::Admitted(_)
        ));
    }
    let next = &early[order[10] as usize];
    assert!(matches!(
        r.status(next.seq, &next.ticket_id, OPENS_MS + 4_000)
            .unwrap(),
        Status::Waiting(_)
    ));
}

#[test]
fn pre_queue_entrant_who_leaves_before_the_opening_is_passed_over() {
    let mut p = policy();
    p.opens_at_ms = Some(OPENS_MS);
    let mut r = room(p);
    let gone = r.join(T0_MS).unwrap();
    let stays = r.join(T0_MS).unwrap();
    for t in [20_000, 40_000, 55_000] {
        r.status(stays.seq, &stays.ticket_id, T0_MS + t).unwrap();
    }
    let out = r.release_once(OPENS_MS, 10);
    assert_eq!((out.released, out.skipped), (1, 1));
    assert!(matches!(
        r.status(stays.seq, &stays.ticket_id, OPENS_MS + 2_000)
            .unwrap(),
        Status::Admitted(_)
    ));
    assert_eq!(
        r.status(gone.seq, &gone.ticket_id, OPENS_MS + 2_000)
            .unwrap(),
        Status::Expired
    );
}

/// A ticket the room mints before its opening lives until `ticket_ttl` after
/// it, which the keyring accepts only when told the opening: the gateway
/// passes the room's `opens_at` with the TTL.
#[test]
fn a_pre_queue_ticket_verifies_with_the_lifetime_counted_from_the_opening() {
    use sluice_admission::tokens::{Expected, KeyMaterial, KeySpec, Keyring, TokenError};
    let mut p = policy();
    p.opens_at_ms = Some(OPENS_MS);
    let ttl_s = p.ticket_ttl.as_secs();
    let mut r = room(p);
    let keys = Keyring::new(vec![KeySpec {
        kid: "k".into(),
        material: KeyMaterial::Hs256(vec![7; 32]),
    }])
    .unwrap();
    let early = r.join(T0_MS).unwrap();
    let token = keys.sign(&early.claims("drop")).unwrap();
    let now_s = T0_MS / 1000;
    let rules = Expected::ticket("drop", ttl_s);
    assert!(keys
        .verify(&token, &rules.opening_at(Some(OPENS_MS / 1000)), now_s)
        .is_ok());
    assert_eq!(
        keys.verify(&token, &rules, now_s),
        Err(TokenError::BadLifetime),
        "without the opening the ticket looks too long-lived"
    );
    // After the opening, a ticket's lifetime is plain `ticket_ttl`.
    let late = r.join(OPENS_MS + 5_000).unwrap();
    let token = keys.sign(&late.claims("drop")).unwrap();
    assert!(keys
        .verify(
            &token,
            &rules.opening_at(Some(OPENS_MS / 1000)),
            OPENS_MS / 1000 + 5
        )
        .is_ok());
}
