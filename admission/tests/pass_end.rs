//! Passes that end before their time: one ended by the origin or idle for
//! the room's `pass_idle` gives its slot to the next shopper at once, is
//! refused until its expiry, and stays ended across a restart; use (a
//! request, a status poll, a running checkout) keeps a pass from idling.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{nz, policy, room, T0_MS};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_admission::journal::{EventSink, RoomEvent, SinkError};
use sluice_admission::{InMemoryStock, PassEnd, Policy, Status, TicketId, WaitingRoom};

/// One slot, released at once, passes for ten minutes, idle after 30 s
/// (a waiting shopper may go five minutes without polling).
fn one_slot() -> Policy {
    Policy {
        idle_timeout: Duration::from_secs(300),
        max_active: nz(1),
        release_per_second: nz(100),
        burst: nz(100),
        pass_ttl: Duration::from_secs(600),
        pass_idle: Duration::from_secs(30),
        ..policy()
    }
}

/// Joins, releases and collects a pass; returns (seq, ticket id).
fn admitted(room: &mut WaitingRoom, now: u64) -> (u64, TicketId) {
    let joined = room.join(now).unwrap();
    room.release_once(now, 100);
    let status = room.status(joined.seq, &joined.ticket_id, now).unwrap();
    assert!(matches!(status, Status::Admitted(_)), "{status:?}");
    (joined.seq, joined.ticket_id)
}

/// A second shopper, waiting behind the one slot.
fn waiting(room: &mut WaitingRoom, now: u64) -> (u64, TicketId) {
    let joined = room.join(now).unwrap();
    room.release_once(now, 100);
    assert!(
        matches!(joined.status, Status::Waiting(_)),
        "{:?}",
        joined.status
    );
    (joined.seq, joined.ticket_id)
}

fn is_admitted(room: &mut WaitingRoom, seq: u64, id: &TicketId, now: u64) -> bool {
    matches!(room.status(seq, id, now), Ok(Status::Admitted(_)))
}

#[test]
fn a_pass_the_origin_ends_gives_its_slot_to_the_next_shopper_and_is_refused() {
    let mut room = room(one_slot());
    let (a, a_id) = admitted(&mut room, T0_MS);
    let (b, b_id) = waiting(&mut room, T0_MS);
    let later = T0_MS + 5_000;
    assert!(room.may_start(a, &a_id, later));
    assert!(room.end_pass(a, &a_id, T0_MS / 1000 + 600, PassEnd::Origin, later));
    assert!(
        !room.end_pass(a, &a_id, T0_MS / 1000 + 600, PassEnd::Origin, later),
        "once"
    );
    assert!(room.pass_ended(a, later));
    assert!(!room.may_start(a, &a_id, later));
    // The ended pass's ticket no longer shows a pass.
    assert_eq!(room.status(a, &a_id, later), Ok(Status::Expired));
    room.release_once(later + 100, 100);
    assert!(is_admitted(&mut room, b, &b_id, later + 10_000));
    let stats = room.stats(later + 10_000);
    assert_eq!((stats.passes_ended_origin, stats.passes_ended_idle), (1, 0));
    // Refused until the pass would have expired, then forgotten.
    let expiry = T0_MS + 600_000;
    assert!(room.pass_ended(a, expiry - 1_000));
    room.release_once(expiry, 100);
    assert!(!room.pass_ended(a, expiry));
}

#[test]
fn a_forged_ticket_id_ends_nothing() {
    let mut room = room(one_slot());
    let (a, _) = admitted(&mut room, T0_MS);
    let forged = TicketId::parse(&"ab".repeat(16)).unwrap();
    assert!(!room.end_pass(a, &forged, T0_MS / 1000 + 600, PassEnd::Origin, T0_MS));
    assert!(!room.pass_ended(a, T0_MS));
}

#[test]
fn an_idle_pass_gives_its_slot_back_and_use_keeps_it() {
    let mut room = room(one_slot());
    let (a, a_id) = admitted(&mut room, T0_MS);
    let (b, b_id) = waiting(&mut room, T0_MS);
    // Used at 20 s: idle only from 50 s on.
    room.touch_pass(a, &a_id, T0_MS + 20_000);
    room.release_once(T0_MS + 49_000, 100);
    assert!(room.may_start(a, &a_id, T0_MS + 49_000));
    // A checkout running from 45 s holds it well past 75 s.
    room.checkout_running(a, &a_id, true, T0_MS + 45_000);
    room.release_once(T0_MS + 100_000, 100);
    assert!(room.may_start(a, &a_id, T0_MS + 100_000), "running");
    // The checkout ends at 110 s (that is use too): idle at 140 s.
    room.checkout_running(a, &a_id, false, T0_MS + 110_000);
    room.release_once(T0_MS + 139_000, 100);
    assert!(room.may_start(a, &a_id, T0_MS + 139_000));
    room.release_once(T0_MS + 140_000, 100);
    assert!(!room.may_start(a, &a_id, T0_MS + 140_000));
    assert!(room.pass_ended(a, T0_MS + 140_000));
    room.release_once(T0_MS + 140_100, 100);
    assert!(is_admitted(&mut room, b, &b_id, T0_MS + 141_000));
    assert_eq!(room.stats(T0_MS + 141_000).passes_ended_idle, 1);
}

/// The page's status calls are the pass's use: the gateway's status route
/// notes each one (`touch_pass`) after the room's answer. The room's answer
/// by itself is not use: it is also how a join of the account holding the
/// place is answered, and that join carries neither pass nor ticket.
#[test]
fn status_polls_of_an_admitted_ticket_are_use_the_answer_alone_is_not() {
    let mut room = room(one_slot());
    let (a, a_id) = admitted(&mut room, T0_MS);
    for s in (10..=60).step_by(10) {
        let now = T0_MS + s * 1000;
        assert!(is_admitted(&mut room, a, &a_id, now));
        room.touch_pass(a, &a_id, now);
        room.release_once(now, 100);
    }
    assert!(room.may_start(a, &a_id, T0_MS + 60_000));
    // Answered without the touch from then on: idle 30 s after 60 s.
    for s in (70..=90).step_by(10) {
        let now = T0_MS + s * 1000;
        assert!(is_admitted(&mut room, a, &a_id, now));
        room.release_once(now, 100);
    }
    assert!(room.pass_ended(a, T0_MS + 90_000));
    assert!(!room.may_start(a, &a_id, T0_MS + 90_000));
}

#[test]
fn without_pass_idle_a_pass_is_never_idle() {
    let mut room = room(Policy {
        pass_idle: Duration::ZERO,
        ..one_slot()
    });
    let (a, a_id) = admitted(&mut room, T0_MS);
    room.release_once(T0_MS + 590_000, 100);
    assert!(room.may_start(a, &a_id, T0_MS + 590_000));
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<RoomEvent>>>);

impl EventSink for Recorder {
    fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError> {
        self.0.lock().unwrap().extend_from_slice(events);
        Ok(())
    }
}

fn restored(events: Vec<RoomEvent>, now: u64, sink: &Recorder) -> WaitingRoom {
    WaitingRoom::restore(
        "drop",
        one_slot(),
        Arc::new(InMemoryStock::new()),
        [4; 32],
        StdRng::seed_from_u64(5),
        now,
        events,
        Box::new(sink.clone()),
    )
    .expect("the events make a room")
}

#[test]
fn an_ended_pass_stays_ended_after_a_restart_and_in_a_snapshot() {
    let sink = Recorder::default();
    let mut room = restored(Vec::new(), T0_MS, &sink);
    let (a, a_id) = admitted(&mut room, T0_MS);
    assert!(room.end_pass(a, &a_id, T0_MS / 1000 + 600, PassEnd::Origin, T0_MS + 1_000));
    let events = sink.0.lock().unwrap().clone();
    assert!(events.contains(&RoomEvent::PassEnded {
        place: 0,
        expires_at_s: T0_MS / 1000 + 600
    }));
    for record in &events {
        assert_eq!(&RoomEvent::decode(&record.encode()).unwrap(), record);
    }
    let again = restored(events, T0_MS + 2_000, &Recorder::default());
    assert!(again.pass_ended(a, T0_MS + 2_000));
    assert!(!again.may_start(a, &a_id, T0_MS + 2_000));
    let mut snapshot = Vec::new();
    again.snapshot(&mut |e| snapshot.push(e));
    let from_snapshot = restored(snapshot, T0_MS + 3_000, &Recorder::default());
    assert!(from_snapshot.pass_ended(a, T0_MS + 3_000));
}

#[test]
fn a_pass_whose_checkouts_are_spent_is_refused_once_the_origin_ends_it() {
    let mut room = room(one_slot());
    let (a, a_id) = admitted(&mut room, T0_MS);
    let spent = sluice_admission::PassOrders {
        started: 1,
        open: 0,
    };
    assert!(room.give_back_if_spent(a, spent));
    let exp = T0_MS / 1000 + 600;
    assert!(
        !room.end_pass(a, &a_id, exp, PassEnd::Origin, T0_MS + 1_000),
        "no slot freed: it went back with the order"
    );
    assert!(room.pass_ended(a, T0_MS + 1_000));
    assert_eq!(room.stats(T0_MS + 1_000).passes_ended_origin, 1);
}
