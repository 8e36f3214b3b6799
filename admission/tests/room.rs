//! One room's behaviour, step by step through the public API.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{nz, policy, room, room_with, T0_MS};
use sluice_admission::tokens::{Expected, KeyMaterial, KeySpec, Keyring, TokenType};
use sluice_admission::{
    InMemoryStock, JoinError, Joined, PassOrders, PolicyError, PollError, Status, Stop, WaitingRoom,
};

fn wait_of(status: Status) -> sluice_admission::Wait {
    match status {
        Status::Waiting(w) | Status::Paused(w) => w,
        other => panic!("expected a wait, got {other:?}"),
    }
}

fn join(room: &mut WaitingRoom, now: u64) -> Joined {
    room.join(now).expect("join")
}

#[test]
fn joins_get_increasing_places_and_honest_positions() {
    let mut r = room(policy());
    let a = join(&mut r, T0_MS);
    let b = join(&mut r, T0_MS);
    let c = join(&mut r, T0_MS + 10);
    assert_eq!((a.seq, b.seq, c.seq), (0, 1, 2));
    assert_ne!(a.ticket_id, b.ticket_id);
    let wc = wait_of(c.status);
    assert_eq!((wc.position, wc.ahead), (3, 2));
    assert_eq!(c.expires_at_s, T0_MS / 1000 + 3600);
    assert_eq!(c.claims("drop").typ, TokenType::Ticket);
    assert_eq!(c.claims("drop").sub, c.ticket_id.to_string());
    // b leaves (never polls again); after idle_timeout c is second, not third.
    let t = T0_MS + 31_000;
    for ticket in [&a, &c] {
        assert!(r.status(ticket.seq, &ticket.ticket_id, t - 20_000).is_ok());
    }
    assert_eq!(r.stats(t).waiting, 3, "b is not known to be gone yet");
    r.release_once(t, 0); // the sweep writes b down
    assert_eq!(r.stats(t).waiting, 2);
    let w = wait_of(r.status(c.seq, &c.ticket_id, t).unwrap());
    assert_eq!((w.position, w.ahead), (2, 1));
    assert_eq!(r.status(b.seq, &b.ticket_id, t).unwrap(), Status::Expired);
    assert_eq!(r.stats(t).abandoned_total, 1);
}

#[test]
fn polling_sooner_than_told_is_refused_with_retry_after() {
    let mut r = room(policy());
    // 30 ahead at 10/s: 3 s from its turn, more than poll_min (at the
    // front a moving line tells the turn itself, see the next test).
    for _ in 0..30 {
        join(&mut r, T0_MS);
    }
    let j = join(&mut r, T0_MS);
    let told = u64::from(wait_of(j.status).poll_after_s);
    assert_eq!(told, 2, "near the front, poll_min");
    // Within the one-second slack is fine; earlier is not.
    match r.status(j.seq, &j.ticket_id, T0_MS) {
        Err(PollError::TooEarly { retry_after_s }) => assert_eq!(retry_after_s, told),
        other => panic!("{other:?}"),
    }
    assert!(r
        .status(j.seq, &j.ticket_id, T0_MS + (told - 1) * 1000)
        .is_ok());
    assert_eq!(r.stats(T0_MS).too_early_total, 1);
}

/// Poll pacing at the front (`sluice_admission::poll`): in the last
/// `poll_min` before its turn a ticket is told its turn, so it comes back
/// about when it is released; paused, or with the slots bound, the front
/// is told `poll_min` as before.
#[test]
fn the_front_of_a_moving_line_is_told_its_turn_and_a_stopped_one_poll_min() {
    let mut p = policy();
    p.poll_min = Duration::from_secs(10);
    p.poll_max = Duration::from_secs(20);
    p.idle_timeout = Duration::from_secs(60);
    p.max_active = nz(100);
    let mut r = room(p.clone());
    // 10/s: the k-th joiner (k ahead) is ceil(k / 10) s from its turn.
    let told: Vec<(u64, u32)> = (0..120)
        .map(|_| {
            let w = wait_of(join(&mut r, T0_MS).status);
            (w.estimated_wait_s, w.poll_after_s)
        })
        .collect();
    for &(wait, poll) in &told {
        if wait < 10 {
            assert_eq!(u64::from(poll), wait.max(1), "{told:?}");
        } else {
            assert!(poll >= 10, "{told:?}");
        }
    }
    assert!(told.iter().any(|&(_, p)| p < 10) && told.iter().any(|&(_, p)| p >= 10));
    // Paused: the front is told poll_min.
    let mut paused = room(p.clone());
    let front = join(&mut paused, T0_MS);
    assert_eq!(wait_of(front.status).poll_after_s, 1);
    paused.set_paused(true);
    let w = wait_of(
        paused
            .status(front.seq, &front.ticket_id, T0_MS + 1_000)
            .unwrap(),
    );
    assert_eq!(w.poll_after_s, 10, "paused: poll_min");
    // Slots bound (max_active 1, held by a 5 s pass): the front is 5 s
    // from its turn by the estimate, but told poll_min.
    p.max_active = nz(1);
    p.pass_ttl = Duration::from_secs(5);
    let mut full = room(p);
    let first = join(&mut full, T0_MS);
    full.release_once(T0_MS + 1, 10);
    assert!(matches!(
        full.status(first.seq, &first.ticket_id, T0_MS + 1_000),
        Ok(Status::Admitted(_))
    ));
    let second = wait_of(join(&mut full, T0_MS + 1_000).status);
    assert!(second.estimated_wait_s < 10, "{second:?}");
    assert_eq!(second.poll_after_s, 10, "no slot free: poll_min");
}

#[test]
fn status_names_are_the_contract_states() {
    let mut r = room(policy());
    let j = join(&mut r, T0_MS);
    assert_eq!(j.status.state(), "waiting");
    r.set_paused(true);
    assert_eq!(
        r.status(j.seq, &j.ticket_id, T0_MS + 2_000)
            .unwrap()
            .state(),
        "paused"
    );
    r.set_paused(false);
    r.release_once(T0_MS + 2_000, 10);
    assert_eq!(
        r.status(j.seq, &j.ticket_id, T0_MS + 4_000)
            .unwrap()
            .state(),
        "admitted"
    );
    assert_eq!(Status::Expired.state(), "expired");
    assert_eq!(Status::SoldOut.state(), "sold_out");
}

#[test]
fn admitted_repoll_gets_the_very_same_pass_token() {
    let keys = Keyring::new(vec![KeySpec {
        kid: "k".into(),
        material: KeyMaterial::Hs256(vec![9; 32]),
    }])
    .unwrap();
    let mut r = room(policy());
    let j = join(&mut r, T0_MS);
    let out = r.release_once(T0_MS + 100, 100);
    assert_eq!(out.released, 1);
    let first = r.status(j.seq, &j.ticket_id, T0_MS + 2_000).unwrap();
    let again = r.status(j.seq, &j.ticket_id, T0_MS + 9_000).unwrap();
    let (Status::Admitted(a1), Status::Admitted(a2)) = (first, again) else {
        panic!("{first:?} {again:?}")
    };
    assert_eq!(a1, a2);
    let t1 = keys.sign(&a1.claims("drop")).unwrap();
    let t2 = keys.sign(&a2.claims("drop")).unwrap();
    assert_eq!(t1, t2);
    let claims = keys
        .verify(&t1, &Expected::pass("drop", 60), (T0_MS + 9_000) / 1000)
        .unwrap();
    assert_eq!(claims.sub, j.ticket_id.to_string());
    assert_eq!(claims.exp - claims.iat, 60);
    assert_eq!(
        r.stats(T0_MS + 9_000).admitted_total,
        1,
        "one pass per ticket"
    );
}

#[test]
fn a_pass_holds_its_slot_until_its_checkouts_are_spent_or_it_expires() {
    let mut p = policy();
    p.max_active = nz(1);
    p.max_orders_per_pass = nz(2);
    let mut r = room(p);
    let a = join(&mut r, T0_MS);
    let b = join(&mut r, T0_MS);
    let c = join(&mut r, T0_MS);
    assert_eq!(r.release_once(T0_MS, 10).released, 1);
    assert!(
        !r.may_start(a.seq, &a.ticket_id, T0_MS + 1_000),
        "not collected yet"
    );
    assert!(matches!(
        r.status(a.seq, &a.ticket_id, T0_MS + 1_000),
        Ok(Status::Admitted(_))
    ));
    assert!(r.may_start(a.seq, &a.ticket_id, T0_MS + 1_000));
    assert!(
        !r.may_start(a.seq, &b.ticket_id, T0_MS + 1_000),
        "a pass names its own ticket"
    );
    assert!(!r.may_start(b.seq, &b.ticket_id, T0_MS + 1_000), "b waits");
    let orders = |started, open| PassOrders { started, open };
    // One checkout started and ended: a may start a second, so it keeps
    // its slot and nobody else gets in.
    assert!(!r.give_back_if_spent(a.seq, orders(1, 0)));
    assert!(!r.give_back_if_spent(a.seq, orders(2, 1)), "one still runs");
    let out = r.release_once(T0_MS + 5_000, 10);
    assert_eq!((out.released, out.stop), (0, Stop::Full));
    assert!(r.may_start(a.seq, &a.ticket_id, T0_MS + 5_000));
    // Both started and ended: the slot goes back, for good.
    assert!(r.give_back_if_spent(a.seq, orders(2, 0)));
    assert!(
        !r.give_back_if_spent(a.seq, orders(2, 0)),
        "giving back twice frees nothing more"
    );
    assert!(
        !r.may_start(a.seq, &a.ticket_id, T0_MS + 5_000),
        "a pass whose slot was given back cannot start another checkout"
    );
    assert_eq!(r.release_once(T0_MS + 5_000, 10).released, 1);
    assert!(matches!(
        r.status(b.seq, &b.ticket_id, T0_MS + 5_000),
        Ok(Status::Admitted(_))
    ));
    assert!(r.may_start(b.seq, &b.ticket_id, T0_MS + 5_000));
    // b never finishes: its pass expires after pass_ttl (60 s) and frees the slot.
    for t in [10_000, 20_000, 30_000, 40_000, 50_000] {
        r.status(c.seq, &c.ticket_id, T0_MS + t).unwrap();
    }
    assert_eq!(r.release_once(T0_MS + 64_000, 10).stop, Stop::Full);
    r.status(c.seq, &c.ticket_id, T0_MS + 60_000).unwrap();
    let out = r.release_once(T0_MS + 65_000, 10);
    assert_eq!((out.released, out.expired_passes), (1, 1));
    assert!(!r.may_start(b.seq, &b.ticket_id, T0_MS + 65_000));
    assert_eq!(
        r.status(b.seq, &b.ticket_id, T0_MS + 65_000).unwrap(),
        Status::Expired
    );
    assert!(matches!(
        r.status(c.seq, &c.ticket_id, T0_MS + 66_000).unwrap(),
        Status::Admitted(_)
    ));
}

#[test]
fn foreign_or_forged_tickets_are_unknown() {
    let mut r = room(policy());
    let j = join(&mut r, T0_MS);
    let other = room_with(policy(), Arc::new(InMemoryStock::new()), 8)
        .join(T0_MS)
        .unwrap();
    assert_eq!(other.seq, j.seq);
    assert_eq!(
        r.status(j.seq, &other.ticket_id, T0_MS + 3_000),
        Err(PollError::UnknownTicket)
    );
    let forged_seq = 1_000_000;
    let id = j.ticket_id;
    assert_eq!(
        r.status(forged_seq, &id, T0_MS + 3_000),
        Err(PollError::UnknownTicket)
    );
}

#[test]
fn full_queue_answers_with_retry_after_and_frees_as_the_line_moves() {
    let mut p = policy();
    p.queue_capacity = nz(3);
    let mut r = room(p);
    for _ in 0..3 {
        join(&mut r, T0_MS);
    }
    match r.join(T0_MS) {
        Err(JoinError::QueueFull { retry_after_s }) => assert!((2..=10).contains(&retry_after_s)),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.release_once(T0_MS, 10).released, 3);
    assert!(r.join(T0_MS).is_ok());
    assert_eq!(r.stats(T0_MS).joins.queue_full, 1);
}

#[test]
fn paused_room_refuses_joins_tells_waiters_and_resumes_in_order() {
    let mut r = room(policy());
    let a = join(&mut r, T0_MS);
    let b = join(&mut r, T0_MS);
    r.set_paused(true);
    assert!(matches!(r.join(T0_MS), Err(JoinError::Paused { .. })));
    let out = r.release_once(T0_MS + 1_000, 10);
    assert_eq!((out.released, out.stop), (0, Stop::Paused));
    assert!(matches!(
        r.status(b.seq, &b.ticket_id, T0_MS + 2_000).unwrap(),
        Status::Paused(_)
    ));
    r.set_paused(false);
    let mut p = policy();
    p.burst = nz(1);
    r.update_policy(p).unwrap();
    assert_eq!(r.release_once(T0_MS + 3_000, 10).released, 1);
    assert!(matches!(
        r.status(a.seq, &a.ticket_id, T0_MS + 4_000).unwrap(),
        Status::Admitted(_)
    ));
    assert!(matches!(
        r.status(b.seq, &b.ticket_id, T0_MS + 4_000).unwrap(),
        Status::Waiting(_)
    ));
}

#[test]
fn sold_out_refuses_joins_and_answers_waiters() {
    let stock = Arc::new(InMemoryStock::new());
    let mut r = room_with(policy(), stock.clone(), 1);
    let a = join(&mut r, T0_MS);
    stock.set_sold_out("drop", true);
    assert_eq!(r.join(T0_MS), Err(JoinError::SoldOut));
    // Sold out is told even to an early poll.
    assert_eq!(
        r.status(a.seq, &a.ticket_id, T0_MS).unwrap(),
        Status::SoldOut
    );
    assert_eq!(r.release_once(T0_MS + 1_000, 10).stop, Stop::SoldOut);
    assert!(r.stats(T0_MS).sold_out);
    stock.set_sold_out("drop", false);
    assert_eq!(r.release_once(T0_MS + 2_000, 10).released, 1);
}

#[test]
fn tickets_past_their_ttl_are_expired() {
    let mut p = policy();
    p.ticket_ttl = Duration::from_secs(20);
    p.burst = nz(1);
    let mut r = room(p);
    r.set_paused(true);
    let a = join_before_pause(&mut r);
    for t in (5_000..20_000).step_by(5_000) {
        assert!(matches!(
            r.status(a.seq, &a.ticket_id, T0_MS + t).unwrap(),
            Status::Paused(_)
        ));
    }
    assert_eq!(
        r.status(a.seq, &a.ticket_id, T0_MS + 20_000).unwrap(),
        Status::Expired
    );
    r.set_paused(false);
    let out = r.release_once(T0_MS + 21_000, 10);
    assert_eq!(
        (out.released, out.skipped),
        (0, 1),
        "passed over without spending capacity"
    );
    assert_eq!(r.stats(T0_MS + 21_000).expired_total, 1);
}

fn join_before_pause(r: &mut WaitingRoom) -> Joined {
    r.set_paused(false);
    let j = join(r, T0_MS);
    r.set_paused(true);
    j
}

#[test]
fn stats_count_waiting_oldest_and_rate() {
    let mut r = room(policy());
    let joined: Vec<Joined> = (0..30).map(|i| join(&mut r, T0_MS + i * 100)).collect();
    let s = r.stats(T0_MS + 5_000);
    assert_eq!(s.waiting, 30);
    assert_eq!(s.oldest_wait_s, 5);
    for t in (0..=3_000).step_by(100) {
        r.release_once(T0_MS + 5_000 + t, 100);
    }
    let s = r.stats(T0_MS + 8_500);
    assert_eq!(s.admitted_total, 30, "burst 10, then 10/s");
    assert_eq!(s.active_passes, 0, "released, none collected yet");
    for j in &joined {
        r.status(j.seq, &j.ticket_id, T0_MS + 8_500).unwrap();
    }
    let s = r.stats(T0_MS + 8_500);
    assert_eq!(s.active_passes, 30);
    assert_eq!(s.waiting, 0);
    assert!(s.release_rate > 2.0, "{s:?}");
    assert_eq!(s.wait.count(), 30);
}

#[test]
fn policy_validation_refuses_numbers_that_cannot_work() {
    let mut p = policy();
    p.idle_timeout = Duration::from_secs(15);
    assert_eq!(p.validate(), Err(PolicyError::IdleTimeout));
    let mut p = policy();
    p.poll_max = Duration::from_secs(300);
    p.idle_timeout = Duration::from_secs(900);
    assert_eq!(p.validate(), Err(PolicyError::PollMax));
    let mut p = policy();
    p.poll_min = Duration::ZERO;
    assert_eq!(p.validate(), Err(PolicyError::PollMin));
    assert!(WaitingRoom::new(
        "x",
        p,
        Arc::new(InMemoryStock::new()),
        rand::SeedableRng::seed_from_u64(1),
        T0_MS
    )
    .is_err());
}

#[test]
fn a_room_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<WaitingRoom>();
    assert_send::<sluice_admission::tokens::Keyring>();
}

#[test]
fn pre_queue_entrant_silent_too_long_is_gone_before_the_opening() {
    let mut p = policy();
    p.opens_at_ms = Some(T0_MS + 120_000);
    let mut r = room(p);
    let j = join(&mut r, T0_MS);
    assert!(matches!(
        r.status(j.seq, &j.ticket_id, T0_MS + 10_000).unwrap(),
        Status::PreQueue(_)
    ));
    assert_eq!(
        r.status(j.seq, &j.ticket_id, T0_MS + 41_000).unwrap(),
        Status::Expired
    );
    assert_eq!(r.stats(T0_MS + 41_000).abandoned_total, 1);
    let out = r.release_once(T0_MS + 120_000, 10);
    assert_eq!((out.released, out.skipped), (0, 1));
    assert_eq!(r.stats(T0_MS + 120_000).abandoned_total, 1, "counted once");
}

#[test]
fn policy_from_the_shipped_demo_config_is_valid_and_faithful() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/demo.toml");
    let config = sluice_policies::load_file(&path).expect("demo config loads");
    let configured = config.room("drop").expect("demo has a drop room");
    let p = sluice_admission::Policy::from_room(configured);
    assert_eq!(p.release_per_second, configured.release_per_second);
    assert_eq!(p.burst, configured.burst);
    assert_eq!(p.max_active, configured.max_active);
    assert_eq!(p.queue_capacity, configured.queue_capacity);
    assert_eq!(
        (p.pass_ttl, p.ticket_ttl),
        (configured.pass_ttl, configured.ticket_ttl)
    );
    assert_eq!(
        (p.poll_min, p.poll_max, p.idle_timeout),
        (
            configured.poll_min,
            configured.poll_max,
            configured.idle_timeout
        )
    );
    assert_eq!(p.opens_at_ms, configured.opens_at_unix.map(|s| s * 1000));
    assert_eq!(p.validate(), Ok(()));
    assert!(WaitingRoom::new(
        "drop",
        p,
        Arc::new(InMemoryStock::new()),
        rand::SeedableRng::seed_from_u64(1),
        T0_MS
    )
    .is_ok());
}

#[test]
fn the_watermark_says_how_far_the_release_went_and_whether_the_room_is_open() {
    let stock = Arc::new(InMemoryStock::new());
    let mut r = room_with(
        sluice_admission::Policy {
            max_active: nz(1),
            ..policy()
        },
        stock.clone(),
        7,
    );
    let a = join(&mut r, T0_MS);
    for _ in 0..2 {
        join(&mut r, T0_MS);
    }
    let mark = r.watermark();
    assert_eq!((mark.serving, mark.waiting), (0, 3));
    assert_eq!(mark.state.as_str(), "open");
    assert_eq!(mark.poll_after_s, 2, "poll_min");
    r.release_once(T0_MS, 10);
    let mark = r.watermark();
    assert_eq!((mark.serving, mark.waiting), (1, 2));
    assert!(
        a.seq < mark.serving,
        "the first ticket may collect its pass"
    );
    r.set_paused(true);
    assert_eq!(r.watermark().state.as_str(), "paused");
    r.set_paused(false);
    stock.set_sold_out("drop", true);
    assert_eq!(r.watermark().state.as_str(), "sold_out");
}
