//! Early polls answered from the room's view, without its lock: the same
//! answer the room gives, or none.
//!
//! The main test runs two rooms in lockstep from the same seed, through the
//! same seeded joins, polls (most of them early, some with forged ids,
//! some with a clock running behind), releases, pauses, sold-out spells,
//! reloads of the time-outs, a refusing sink and a fair-start opening.
//! One asks its view first and the room only when the view has no answer;
//! the other always asks the room. Every answer, the numbers and the
//! watermark must be the same after every step.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{nz, policy, T0_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_admission::journal::{EventSink, RoomEvent, SinkError};
use sluice_admission::{
    InMemoryStock, PassOrders, Policy, PollError, Status, TicketId, WaitingRoom,
};

/// Takes events, or refuses them while told to.
#[derive(Clone, Default)]
struct Sink {
    refuse: Arc<Mutex<bool>>,
}

impl EventSink for Sink {
    fn append(&mut self, _: &[RoomEvent]) -> Result<(), SinkError> {
        if *self.refuse.lock().unwrap() {
            return Err(SinkError("refused".into()));
        }
        Ok(())
    }
}

fn durable_room(policy: &Policy, stock: Arc<InMemoryStock>, sink: &Sink) -> WaitingRoom {
    WaitingRoom::restore(
        "drop",
        policy.clone(),
        stock,
        [5; 32],
        StdRng::seed_from_u64(11),
        T0_MS,
        Vec::new(),
        Box::new(sink.clone()),
    )
    .expect("an empty journal makes a room")
}

/// Runs the lockstep simulation; how many polls the view answered.
fn lockstep(seed: u64, mut policy: Policy) -> u64 {
    // A line that moves slower than it fills: most tickets wait.
    policy.release_per_second = nz(2);
    policy.burst = nz(2);
    policy.max_active = nz(20);
    let stock = Arc::new(InMemoryStock::new());
    let sink = Sink::default();
    let mut fast = durable_room(&policy, stock.clone(), &sink);
    let mut slow = durable_room(&policy, stock.clone(), &sink);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tickets: Vec<(u64, TicketId)> = Vec::new();
    let mut answered_by_view = 0u64;
    let mut latest = T0_MS;
    // Sold out, or the sink refusing, for a spell that ends at this step.
    let (mut sold_out_until, mut refusing_until) = (0u64, 0u64);
    for step in 0..4000u64 {
        if step == sold_out_until {
            stock.set_sold_out("drop", false);
        }
        if step == refusing_until {
            *sink.refuse.lock().unwrap() = false;
        }
        let now = T0_MS + step * 50;
        latest = latest.max(now);
        if rng.random_bool(0.15) {
            let a = fast.join(now);
            let b = slow.join(now);
            assert_eq!(
                a.as_ref().map(|j| j.status),
                b.as_ref().map(|j| j.status),
                "step {step}"
            );
            if let (Ok(a), Ok(b)) = (a, b) {
                assert_eq!((a.seq, a.ticket_id), (b.seq, b.ticket_id));
                tickets.push((a.seq, a.ticket_id));
            }
        }
        for _ in 0..rng.random_range(0..6) {
            let Some(&(seq, id)) = tickets.get(rng.random_range(0..tickets.len().max(1))) else {
                break;
            };
            // A forged id now and then; a clock up to 2 s behind.
            let id = if rng.random_bool(0.05) {
                tickets[rng.random_range(0..tickets.len())].1
            } else {
                id
            };
            let at = now - rng.random_range(0..=2_000u64).min(now - T0_MS);
            if fast.view().early_poll(seq, &id, at).is_some() {
                answered_by_view += 1;
                // Undo nothing: the room must now agree it was early, and
                // the lockstep room answers the same through the room.
                let b = slow.status(seq, &id, at);
                assert!(
                    matches!(b, Err(PollError::TooEarly { .. })),
                    "step {step}: the view said early, the room {b:?}"
                );
                continue;
            }
            let a = fast.status(seq, &id, at);
            let b = slow.status(seq, &id, at);
            assert_eq!(a, b, "step {step}, seq {seq}");
        }
        if step % 2 == 0 {
            assert_eq!(fast.release_once(now, 64), slow.release_once(now, 64));
        }
        match rng.random_range(0..400) {
            0 => {
                let paused = !fast.is_paused();
                fast.set_paused(paused);
                slow.set_paused(paused);
            }
            1 => {
                stock.set_sold_out("drop", true);
                sold_out_until = step + rng.random_range(1..100);
            }
            2 => {
                // A reload with other time-outs (kept valid).
                let mut p = fast.policy().clone();
                p.idle_timeout = Duration::from_secs(rng.random_range(20..40));
                p.ticket_ttl = Duration::from_secs(rng.random_range(60..400));
                fast.update_policy(p.clone()).unwrap();
                slow.update_policy(p).unwrap();
            }
            3 => {
                *sink.refuse.lock().unwrap() = true;
                refusing_until = step + rng.random_range(1..100);
            }
            4 => {
                if let Some(&(seq, _)) = tickets.get(rng.random_range(0..tickets.len().max(1))) {
                    let spent = PassOrders {
                        started: 1,
                        open: 0,
                    };
                    assert_eq!(
                        fast.give_back_if_spent(seq, spent),
                        slow.give_back_if_spent(seq, spent)
                    );
                }
            }
            _ => {}
        }
        assert_eq!(fast.stats(latest), slow.stats(latest), "step {step}");
        assert_eq!(fast.watermark(), slow.watermark());
        assert_eq!(fast.view().watermark(), fast.watermark(), "step {step}");
    }
    answered_by_view
}

#[test]
fn the_view_answers_early_polls_exactly_as_the_room_would() {
    for seed in 0..6 {
        let answered = lockstep(seed, policy());
        assert!(answered > 500, "seed {seed}: only {answered} from the view");
    }
}

#[test]
fn the_view_answers_a_fair_start_pre_queue_and_line_alike() {
    let mut p = policy();
    p.opens_at_ms = Some(T0_MS + 60_000);
    for seed in 10..14 {
        let answered = lockstep(seed, p.clone());
        assert!(answered > 500, "seed {seed}: only {answered} from the view");
    }
}

fn join(room: &mut WaitingRoom, now: u64) -> (u64, TicketId, u64) {
    let j = room.join(now).expect("join");
    let poll = match j.status {
        Status::Waiting(w) => u64::from(w.poll_after_s),
        other => panic!("{other:?}"),
    };
    (j.seq, j.ticket_id, poll)
}

fn room(policy: Policy) -> WaitingRoom {
    common::room(policy)
}

/// Joins `n` others first: the front of a moving line is told to come at
/// its turn (the poll pacing), so a ticket that is to be told `poll_min`
/// or more stands far enough back.
fn behind(room: &mut WaitingRoom, n: usize, now: u64) -> (u64, TicketId, u64) {
    for _ in 0..n {
        room.join(now).expect("join");
    }
    join(room, now)
}

#[test]
fn an_early_poll_is_answered_by_the_view_and_counted() {
    let mut r = room(policy());
    let (seq, id, poll) = behind(&mut r, 40, T0_MS);
    assert_eq!(poll, 2);
    let view = r.view();
    assert_eq!(view.early_poll(seq, &id, T0_MS + 500), Some(2));
    assert_eq!(r.stats(T0_MS).too_early_total, 1);
    // Inside the slack it is on time: only the room answers.
    assert_eq!(view.early_poll(seq, &id, T0_MS + 1_000), None);
    // Another ticket's id, or a made-up one, is never answered here.
    let (other, other_id, _) = join(&mut r, T0_MS);
    assert_eq!(view.early_poll(seq, &other_id, T0_MS + 500), None);
    assert_eq!(view.early_poll(other, &id, T0_MS + 500), None);
    assert_eq!(
        view.early_poll(999, &id, T0_MS + 500),
        None,
        "no such place"
    );
    assert_eq!(r.stats(T0_MS).too_early_total, 1);
}

#[test]
fn a_released_ticket_is_never_answered_early_from_its_old_answer() {
    let mut p = policy();
    p.poll_min = Duration::from_secs(5);
    p.burst = nz(40);
    let mut r = room(p);
    let (seq, id, poll) = behind(&mut r, 60, T0_MS);
    assert_eq!(poll, 5);
    let view = r.view();
    assert!(view.early_poll(seq, &id, T0_MS + 100).is_some());
    // 40 at once and 10 a second: the ticket is let in by 3 s.
    let released =
        r.release_once(T0_MS + 200, 1_000).released + r.release_once(T0_MS + 3_000, 1_000).released;
    assert_eq!(released, 61);
    // Still sooner than told, but released: the pass, from the room.
    assert_eq!(view.early_poll(seq, &id, T0_MS + 3_100), None);
    assert!(matches!(
        r.status(seq, &id, T0_MS + 3_100),
        Ok(Status::Admitted(_))
    ));
}

#[test]
fn on_time_polls_still_go_through_the_room_and_keep_a_ticket_alive() {
    let mut p = policy();
    p.release_per_second = nz(1);
    p.burst = nz(1);
    p.max_active = nz(1);
    p.pass_ttl = Duration::from_secs(3600);
    let mut r = room(p);
    // The first takes the one slot (collected: it holds it for an hour).
    let (front, front_id, _) = join(&mut r, T0_MS);
    r.release_once(T0_MS, 10);
    assert!(matches!(
        r.status(front, &front_id, T0_MS),
        Ok(Status::Admitted(_))
    ));
    let (alive, alive_id, told) = join(&mut r, T0_MS);
    let (early, early_id, _) = join(&mut r, T0_MS);
    let view = r.view();
    // 90 s, three idle time-outs: `alive` polls when told (through the
    // room), `early` only ever asks too soon (the view answers it).
    let mut due = T0_MS + told * 1000;
    let mut last_early_answer = None;
    for t in (T0_MS..T0_MS + 90_000).step_by(250) {
        if t >= due {
            assert_eq!(view.early_poll(alive, &alive_id, t), None, "on time");
            match r.status(alive, &alive_id, t) {
                Ok(Status::Waiting(w)) => due = t + u64::from(w.poll_after_s) * 1000,
                other => panic!("{other:?}"),
            }
        }
        // Until its due time: then it would be on time once, and told
        // again; this shopper instead never asks again.
        if last_early_answer.is_none_or(|at| at + 250 == t)
            && view.early_poll(early, &early_id, t).is_some()
        {
            last_early_answer = Some(t);
        }
    }
    assert!(last_early_answer.is_some());
    r.release_once(T0_MS + 90_000, 10);
    assert_eq!(r.stats(T0_MS + 90_000).abandoned_total, 1, "only `early`");
    assert!(matches!(
        r.status(alive, &alive_id, due.max(T0_MS + 90_000)),
        Ok(Status::Waiting(_))
    ));
    assert_eq!(
        r.status(early, &early_id, T0_MS + 90_000),
        Ok(Status::Expired)
    );
}

#[test]
fn an_idle_or_expired_ticket_is_left_to_the_room() {
    let mut p = policy();
    p.poll_min = Duration::from_secs(10);
    p.poll_max = Duration::from_secs(10);
    p.idle_timeout = Duration::from_secs(20);
    p.ticket_ttl = Duration::from_secs(5);
    let mut r = room(p);
    let (seq, id, poll) = behind(&mut r, 150, T0_MS);
    assert_eq!(poll, 10);
    let view = r.view();
    assert!(view.early_poll(seq, &id, T0_MS + 4_000).is_some());
    // Past its TTL, though told to wait 10 s: the room says expired.
    assert_eq!(view.early_poll(seq, &id, T0_MS + 5_000), None);
    assert_eq!(r.status(seq, &id, T0_MS + 5_000), Ok(Status::Expired));
    // The room's latest time counts: a poll whose clock runs behind the
    // room's is not answered early for a slot that time already ended.
    // (Paused, the release walks nobody, so the cursor stays: only the
    // sweep writes the slot down.)
    let (seq, id, _) = behind(&mut r, 150, T0_MS + 10_000);
    assert!(view.early_poll(seq, &id, T0_MS + 14_000).is_some());
    r.set_paused(true);
    r.release_once(T0_MS + 15_000, 10);
    assert!(r.watermark().serving <= seq, "not passed over by the walk");
    assert_eq!(view.early_poll(seq, &id, T0_MS + 14_000), None);
    assert_eq!(r.status(seq, &id, T0_MS + 14_000), Ok(Status::Expired));
}

#[test]
fn a_reload_of_the_time_outs_voids_every_answer_recorded_before() {
    let mut p = policy();
    p.idle_timeout = Duration::from_secs(20);
    p.poll_max = Duration::from_secs(10);
    let mut r = room(p.clone());
    for _ in 0..2000 {
        r.join(T0_MS).unwrap();
    }
    let (seq, id, poll) = join(&mut r, T0_MS);
    assert!(poll >= 8, "far back: told about poll_max, {poll}");
    let view = r.view();
    assert!(view.early_poll(seq, &id, T0_MS + 1_000).is_some());
    // The same policy again: nothing changes.
    r.update_policy(p.clone()).unwrap();
    assert!(view.early_poll(seq, &id, T0_MS + 1_000).is_some());
    // A longer idle time-out: what the room wrote down under the old one
    // is not the view's to judge again.
    p.idle_timeout = Duration::from_secs(25);
    r.update_policy(p).unwrap();
    assert_eq!(view.early_poll(seq, &id, T0_MS + 1_000), None);
    assert!(matches!(
        r.status(seq, &id, T0_MS + 1_000),
        Err(PollError::TooEarly { .. })
    ));
}

#[test]
fn a_sold_out_room_or_a_refusing_sink_leaves_every_poll_to_the_room() {
    let stock = Arc::new(InMemoryStock::new());
    let sink = Sink::default();
    let mut r = durable_room(&policy(), stock.clone(), &sink);
    let (seq, id, _) = behind(&mut r, 40, T0_MS);
    let view = r.view();
    assert!(view.early_poll(seq, &id, T0_MS + 100).is_some());
    stock.set_sold_out("drop", true);
    assert_eq!(view.early_poll(seq, &id, T0_MS + 100), None);
    assert_eq!(r.status(seq, &id, T0_MS + 100), Ok(Status::SoldOut));
    stock.set_sold_out("drop", false);
    // The sink refuses a join: the room keeps it pending and offers it
    // again with the next operation, an early poll included.
    *sink.refuse.lock().unwrap() = true;
    assert!(r.join(T0_MS + 200).is_err());
    assert_eq!(view.early_poll(seq, &id, T0_MS + 300), None);
    *sink.refuse.lock().unwrap() = false;
    assert!(matches!(
        r.status(seq, &id, T0_MS + 300),
        Err(PollError::TooEarly { .. })
    ));
    assert!(
        view.early_poll(seq, &id, T0_MS + 300).is_some(),
        "kept: back"
    );
}

#[test]
fn a_restored_room_answers_its_first_polls_itself() {
    let sink = Sink::default();
    let stock = Arc::new(InMemoryStock::new());
    let mut before = durable_room(&policy(), stock.clone(), &sink);
    let (seq, id, _) = behind(&mut before, 40, T0_MS);
    assert!(before.view().early_poll(seq, &id, T0_MS + 100).is_some());
    let mut events = Vec::new();
    before.snapshot(&mut |e| events.push(e));
    let after = WaitingRoom::restore(
        "drop",
        policy(),
        stock,
        [5; 32],
        StdRng::seed_from_u64(11),
        T0_MS + 100,
        events,
        Box::new(sink),
    )
    .unwrap();
    assert_eq!(after.view().early_poll(seq, &id, T0_MS + 100), None);
    assert_eq!(after.view().watermark(), after.watermark());
}

#[test]
fn a_pre_queue_answer_stops_counting_at_the_opening() {
    let mut p = policy();
    p.poll_min = Duration::from_secs(5);
    p.opens_at_ms = Some(T0_MS + 20_000);
    let mut r = room(p);
    // A second before the opening: told to come back in 5 s, after it.
    let j = r.join(T0_MS + 19_000).unwrap();
    match j.status {
        Status::PreQueue(q) => assert_eq!(q.poll_after_s, 5),
        other => panic!("{other:?}"),
    }
    let view = r.view();
    assert!(view
        .early_poll(j.seq, &j.ticket_id, T0_MS + 19_500)
        .is_some());
    // Opened and let in at once: still sooner than told, but the pass is
    // the room's answer.
    assert_eq!(r.release_once(T0_MS + 20_500, 10).released, 1);
    assert_eq!(view.early_poll(j.seq, &j.ticket_id, T0_MS + 21_000), None);
    assert!(matches!(
        r.status(j.seq, &j.ticket_id, T0_MS + 21_000),
        Ok(Status::Admitted(_))
    ));
}
