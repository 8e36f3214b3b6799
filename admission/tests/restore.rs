//! A room rebuilt from its events holds what the room before it held:
//! every place in the same order, every pass, every ending; a sink that
//! refuses events stops joins and releases without losing anyone.

mod common;

use std::sync::{Arc, Mutex};

use common::{nz, policy, T0_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_admission::journal::{EventSink, RoomEvent, SinkError};
use sluice_admission::{
    InMemoryStock, JoinError, PassOrders, Policy, Status, Stop, TicketId, WaitingRoom,
};

const KEY: [u8; 32] = [9; 32];

/// Keeps events in memory; can be told to refuse them.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<RoomEvent>>>,
    refuse: Arc<Mutex<bool>>,
}

impl EventSink for Recorder {
    fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError> {
        if *self.refuse.lock().unwrap() {
            return Err(SinkError("refused".into()));
        }
        self.events.lock().unwrap().extend_from_slice(events);
        Ok(())
    }
}

impl Recorder {
    fn taken(&self) -> Vec<RoomEvent> {
        self.events.lock().unwrap().clone()
    }
}

fn restore(policy: &Policy, events: Vec<RoomEvent>, now: u64, sink: &Recorder) -> WaitingRoom {
    WaitingRoom::restore(
        "drop",
        policy.clone(),
        Arc::new(InMemoryStock::new()),
        KEY,
        StdRng::seed_from_u64(3),
        now,
        events,
        Box::new(sink.clone()),
    )
    .expect("the events make a room")
}

/// What a ticket's poll says, reduced to what must survive a restart.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Waiting { ahead: u64, expires_at_s: u64 },
    Admitted { number: u64, issued: u64, exp: u64 },
    Expired,
}

fn seen(room: &mut WaitingRoom, seq: u64, id: &TicketId, now: u64) -> Seen {
    try_seen(room, seq, id, now).expect("restored tickets may poll at once")
}

/// `None` when the ticket asked sooner than it was told.
fn try_seen(room: &mut WaitingRoom, seq: u64, id: &TicketId, now: u64) -> Option<Seen> {
    let status = match room.status(seq, id, now) {
        Err(sluice_admission::PollError::TooEarly { .. }) => return None,
        other => other.expect("a known ticket"),
    };
    Some(match status {
        Status::Waiting(w) | Status::Paused(w) => Seen::Waiting {
            ahead: w.ahead,
            expires_at_s: w.expires_at_s,
        },
        Status::Admitted(a) => Seen::Admitted {
            number: a.number,
            issued: a.issued_at_s,
            exp: a.expires_at_s,
        },
        Status::Expired => Seen::Expired,
        other => panic!("unexpected {other:?}"),
    })
}

/// A seeded stretch of joins, polls, leavers, releases and spent passes.
fn busy_room(policy: &Policy, sink: &Recorder, seed: u64) -> (WaitingRoom, Vec<(u64, TicketId)>) {
    let mut room = restore(policy, Vec::new(), T0_MS, sink);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tickets = Vec::new();
    let mut leavers = Vec::new();
    for step in 0..600u64 {
        let now = T0_MS + step * 100;
        for _ in 0..rng.random_range(0..4) {
            let j = room.join(now).expect("join");
            if rng.random_bool(0.3) {
                leavers.push(j.seq);
            }
            tickets.push((j.seq, j.ticket_id));
        }
        // Everyone who stays polls about every 5 s.
        if step % 50 == 0 {
            for (seq, id) in &tickets {
                if !leavers.contains(seq) {
                    let _ = room.status(*seq, id, now);
                }
            }
        }
        room.release_once(now, 1000);
        if step % 7 == 0 {
            if let Some((seq, _)) = tickets.get(rng.random_range(0..tickets.len().max(1))) {
                room.give_back_if_spent(
                    *seq,
                    PassOrders {
                        started: 1,
                        open: 0,
                    },
                );
            }
        }
    }
    (room, tickets)
}

#[test]
fn a_room_restored_from_its_events_or_its_snapshot_answers_every_ticket_alike() {
    let policy = Policy {
        release_per_second: nz(3),
        max_active: nz(20),
        idle_timeout: std::time::Duration::from_secs(20),
        pass_ttl: std::time::Duration::from_secs(30),
        ..policy()
    };
    let sink = Recorder::default();
    let (mut room, tickets) = busy_room(&policy, &sink, 11);
    // In the second of the last release pass, so both rooms agree on
    // which passes have run out.
    let later = T0_MS + 59_950;
    let events = sink.taken();
    let mut snapshot = Vec::new();
    room.snapshot(&mut |e| snapshot.push(e));
    assert!(snapshot.len() as u64 <= room.snapshot_records());
    let before_stats = room.stats(later);
    let mut from_events = restore(&policy, events, later, &Recorder::default());
    let mut from_snapshot = restore(&policy, snapshot, later, &Recorder::default());
    for other in [&from_events, &from_snapshot] {
        let s = other.stats(later);
        assert_eq!(s.serving, before_stats.serving);
        assert_eq!(s.active_passes, before_stats.active_passes);
        assert_eq!(s.admitted_total, before_stats.admitted_total);
    }
    let mut kinds = [0usize; 3];
    let mut restored_waiting = Vec::new();
    for (seq, id) in &tickets {
        // A restart gives everyone a fresh idle window, so compare on the
        // original room only for tickets it still counts as waiting.
        let a = seen(&mut from_events, *seq, id, later);
        let b = seen(&mut from_snapshot, *seq, id, later);
        assert_eq!(a, b, "ticket {seq}: events and snapshot agree");
        if let Seen::Waiting { ahead, .. } = b {
            restored_waiting.push((*seq, ahead));
        }
        let Some(original) = try_seen(&mut room, *seq, id, later) else {
            continue;
        };
        match (&original, &a) {
            (Seen::Expired, Seen::Waiting { .. }) => kinds[2] += 1,
            _ => {
                if let (Seen::Waiting { ahead: x, .. }, Seen::Waiting { ahead: y, .. }) =
                    (&original, &a)
                {
                    // The restored room still counts leavers the original
                    // had not written down yet: never fewer ahead.
                    assert!(y >= x, "ticket {seq}: {y} ahead after, {x} before");
                } else {
                    assert_eq!(original, a, "ticket {seq}");
                }
                kinds[matches!(a, Seen::Admitted { .. }) as usize] += 1;
            }
        }
    }
    assert!(kinds[0] > 100 && kinds[1] >= 10, "a busy room: {kinds:?}");
    // Order holds: the waiting have strictly more ahead the later they came.
    for pair in restored_waiting.windows(2) {
        assert!(pair[1].1 > pair[0].1, "tickets {pair:?}");
    }
}

#[test]
fn released_passes_and_places_survive_and_the_line_moves_on() {
    let sink = Recorder::default();
    let mut room = restore(&policy(), Vec::new(), T0_MS, &sink);
    let a = room.join(T0_MS).unwrap();
    let b = room.join(T0_MS).unwrap();
    room.release_once(T0_MS, 1);
    assert!(
        !room.may_start(a.seq, &a.ticket_id, T0_MS),
        "released, but the pass is not collected yet"
    );
    assert!(matches!(
        room.status(a.seq, &a.ticket_id, T0_MS),
        Ok(Status::Admitted(_))
    ));
    assert!(room.may_start(a.seq, &a.ticket_id, T0_MS));
    let mut again = restore(&policy(), sink.taken(), T0_MS + 1000, &sink);
    assert!(
        again.may_start(a.seq, &a.ticket_id, T0_MS + 1000),
        "the collection was kept"
    );
    assert!(!again.may_start(b.seq, &b.ticket_id, T0_MS + 1000));
    let c = again.join(T0_MS + 1000).unwrap();
    assert_eq!(c.seq, 2, "places continue after the last one given");
    again.release_once(T0_MS + 2000, 10);
    for t in [&b, &c] {
        assert!(matches!(
            again.status(t.seq, &t.ticket_id, T0_MS + 2000),
            Ok(Status::Admitted(_))
        ));
    }
    assert!(again.may_start(b.seq, &b.ticket_id, T0_MS + 2000));
    // A third life sees the second one's releases too.
    let third = restore(&policy(), sink.taken(), T0_MS + 3000, &Recorder::default());
    assert!(third.may_start(c.seq, &c.ticket_id, T0_MS + 3000));
    // A room that draws its key at random does not know these tickets.
    let mut stranger = common::room(policy());
    assert!(stranger.status(a.seq, &a.ticket_id, T0_MS).is_err());
}

#[test]
fn a_refusing_sink_stops_joins_and_releases_and_loses_no_one() {
    let sink = Recorder::default();
    let mut room = restore(&policy(), Vec::new(), T0_MS, &sink);
    let a = room.join(T0_MS).unwrap();
    *sink.refuse.lock().unwrap() = true;
    assert!(matches!(
        room.join(T0_MS),
        Err(JoinError::StoreUnavailable { retry_after_s }) if retry_after_s > 0
    ));
    assert_eq!(room.release_once(T0_MS, 10).stop, Stop::StoreUnavailable);
    assert!(matches!(
        room.status(a.seq, &a.ticket_id, T0_MS + 2000),
        Ok(Status::Waiting(_))
    ));
    *sink.refuse.lock().unwrap() = false;
    let out = room.release_once(T0_MS + 3000, 10);
    assert_eq!(out.released, 1);
    assert!(matches!(
        room.status(a.seq, &a.ticket_id, T0_MS + 3000),
        Ok(Status::Admitted(_))
    ));
    let b = room.join(T0_MS + 3000).unwrap();
    assert_eq!(b.seq, 2, "the refused join's place was written off");
    let mut again = restore(&policy(), sink.taken(), T0_MS + 4000, &sink);
    assert!(again.may_start(a.seq, &a.ticket_id, T0_MS + 4000));
    assert!(matches!(
        again.status(b.seq, &b.ticket_id, T0_MS + 4000),
        Ok(Status::Waiting(w)) if w.ahead == 0
    ));
}

#[test]
fn a_fair_start_draw_is_the_same_after_a_restart_before_or_after_the_opening() {
    let opens = T0_MS + 10_000;
    let policy = Policy {
        opens_at_ms: Some(opens),
        ..policy()
    };
    let sink = Recorder::default();
    let mut room = restore(&policy, Vec::new(), T0_MS, &sink);
    let tickets: Vec<_> = (0..50).map(|_| room.join(T0_MS + 100).unwrap()).collect();
    let commitment = room.fair_start().unwrap().commitment_hex;
    // Restarted before the opening: same commitment, same tickets.
    let mut before = restore(&policy, sink.taken(), T0_MS + 5000, &Recorder::default());
    assert_eq!(before.fair_start().unwrap().commitment_hex, commitment);
    let after_open = opens + 1000;
    let positions = |r: &mut WaitingRoom| -> Vec<u64> {
        tickets
            .iter()
            .map(
                |t| match r.status(t.seq, &t.ticket_id, after_open).unwrap() {
                    Status::Waiting(w) => w.ahead,
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    };
    let drawn = positions(&mut room);
    assert_eq!(positions(&mut before), drawn, "the same draw");
    // Restarted after the opening: the draw stands.
    let mut after = restore(&policy, sink.taken(), after_open, &Recorder::default());
    assert_eq!(positions(&mut after), drawn);
    let mut snapshot = Vec::new();
    room.snapshot(&mut |e| snapshot.push(e));
    let mut from_snapshot = restore(&policy, snapshot, after_open, &Recorder::default());
    assert_eq!(positions(&mut from_snapshot), drawn);
}

#[test]
fn events_that_do_not_follow_are_refused() {
    let bad = vec![
        RoomEvent::Created { epoch_s: 1 },
        RoomEvent::Joined {
            place: 5,
            joined_s: 0,
        },
    ];
    let err = WaitingRoom::restore(
        "drop",
        policy(),
        Arc::new(InMemoryStock::new()),
        KEY,
        StdRng::seed_from_u64(1),
        T0_MS,
        bad,
        Box::new(Recorder::default()),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("in order"), "{err}");
    let headless = vec![RoomEvent::Cursor { cursor: 1 }];
    assert!(WaitingRoom::restore(
        "drop",
        policy(),
        Arc::new(InMemoryStock::new()),
        KEY,
        StdRng::seed_from_u64(1),
        T0_MS,
        headless,
        Box::new(Recorder::default()),
    )
    .is_err());
}
