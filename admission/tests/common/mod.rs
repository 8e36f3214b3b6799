//! Shared test helpers: a policy, a room, and a seeded simulation of
//! shoppers that join, poll when told, sometimes leave, check out and finish.

#![allow(dead_code)] // each test binary uses its own part of the helpers

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_admission::{
    Admitted, InMemoryStock, JoinError, PassOrders, Policy, ReleaseOutcome, Status, TicketId,
    WaitingRoom,
};

/// 2026-01-01T00:00:00Z, a round unix time to start every test at.
pub const T0_MS: u64 = 1_767_225_600_000;

pub fn nz(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).expect("non-zero")
}

pub fn policy() -> Policy {
    Policy {
        release_per_second: nz(10),
        burst: nz(10),
        max_active: nz(100),
        queue_capacity: nz(10_000),
        pass_ttl: Duration::from_secs(60),
        ticket_ttl: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(30),
        poll_min: Duration::from_secs(2),
        poll_max: Duration::from_secs(10),
        opens_at_ms: None,
        pass_idle: std::time::Duration::ZERO,
        max_orders_per_pass: nz(1),
    }
}

pub fn room_with(policy: Policy, stock: Arc<InMemoryStock>, seed: u64) -> WaitingRoom {
    WaitingRoom::new("drop", policy, stock, StdRng::seed_from_u64(seed), T0_MS)
        .expect("valid policy")
}

pub fn room(policy: Policy) -> WaitingRoom {
    room_with(policy, Arc::new(InMemoryStock::new()), 7)
}

/// One simulated shopper.
#[derive(Debug, Clone)]
pub struct Shopper {
    pub seq: u64,
    pub id: TicketId,
    pub joined_ms: u64,
    pub estimated_wait_s: u64,
    /// Stops polling from this instant on.
    pub leaves_at_ms: Option<u64>,
    /// The pass, as first seen, and when (unix ms): its collection.
    pub pass: Option<Admitted>,
    pub collected_ms: Option<u64>,
    pub saw_paused: bool,
    pub saw_sold_out: bool,
    pub expired: bool,
    pub too_early: u32,
    /// Checkouts this pass started, and how many of them are still open.
    pub orders: PassOrders,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub policy: Policy,
    pub tick_ms: u64,
    pub duration_ms: u64,
    /// (from_ms, to_ms, arrivals per second): arrival phases.
    pub arrivals: Vec<(u64, u64, u32)>,
    /// Fraction of shoppers who stop polling at some point.
    pub leave_fraction: f64,
    /// Leavers stop within this long after joining.
    pub leave_within_ms: u64,
    /// How long a checkout takes, and whether it reports its end.
    pub checkout_ms: (u64, u64),
    pub finish_reported_fraction: f64,
    /// After a checkout, the chance the shopper tries to start another
    /// (whether or not the pass still may).
    pub another_order_fraction: f64,
    /// Kill switch on between these instants (relative ms).
    pub pause: Option<(u64, u64)>,
    /// Sold out from this instant (relative ms).
    pub sold_out_at_ms: Option<u64>,
    pub release_limit: usize,
}

impl SimConfig {
    pub fn new(seed: u64, policy: Policy) -> Self {
        Self {
            seed,
            policy,
            tick_ms: 100,
            duration_ms: 120_000,
            arrivals: vec![],
            leave_fraction: 0.0,
            leave_within_ms: 60_000,
            checkout_ms: (5_000, 20_000),
            finish_reported_fraction: 0.8,
            another_order_fraction: 0.5,
            pause: None,
            sold_out_at_ms: None,
            release_limit: 10_000,
        }
    }
}

/// One release pass, as seen from outside.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseEvent {
    pub at_ms: u64,
    pub outcome: ReleaseOutcome,
    pub active_after: u64,
    /// Collected passes and released places waiting for their holder.
    pub held_after: u64,
    pub paused: bool,
}

#[derive(Debug, Default)]
pub struct SimLog {
    pub shoppers: Vec<Shopper>,
    pub releases: Vec<ReleaseEvent>,
    pub refused_full: u64,
    pub refused_paused: u64,
    pub refused_sold_out: u64,
    /// A shopper with a pass asked during the pause and still had it.
    pub pass_kept_while_paused: u64,
    /// Checkouts started, and attempts the room refused (slot gone).
    pub orders_started: u64,
    pub starts_refused: u64,
    /// Slots given back because their pass had spent its checkouts.
    pub given_back: u64,
    /// The most passes able to start a checkout at one instant.
    pub able_to_start_max: u64,
    pub final_stats: Option<sluice_admission::RoomStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Poll(usize),
    /// The shopper tries to start a checkout with their pass.
    Start(usize),
    /// One of the shopper's checkouts ends (paid, declined, cancelled).
    End(usize),
}

/// Runs a seeded simulation; fully deterministic for a given config.
pub fn simulate(cfg: &SimConfig) -> SimLog {
    let stock = Arc::new(InMemoryStock::new());
    let mut room = room_with(cfg.policy.clone(), stock.clone(), cfg.seed);
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed);
    let mut log = SimLog::default();
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    let mut arrival_credit_milli = 0u64;
    // Shoppers whose pass has not expired: the only ones who could start
    // a checkout.
    let mut holders: Vec<usize> = Vec::new();
    let mut t = 0u64;
    while t <= cfg.duration_ms {
        let now = T0_MS + t;
        if let Some((from, to)) = cfg.pause {
            room.set_paused(t >= from && t < to);
        }
        if cfg.sold_out_at_ms.is_some_and(|at| t >= at) {
            stock.set_sold_out("drop", true);
        }
        let rate = cfg
            .arrivals
            .iter()
            .find(|(from, to, _)| t >= *from && t < *to)
            .map_or(0, |a| a.2);
        arrival_credit_milli += u64::from(rate) * cfg.tick_ms;
        while arrival_credit_milli >= 1000 {
            arrival_credit_milli -= 1000;
            match room.join(now) {
                Ok(joined) => {
                    let (est, poll) = match joined.status {
                        Status::Waiting(w) => (w.estimated_wait_s, w.poll_after_s),
                        Status::PreQueue(p) => (0, p.poll_after_s),
                        other => panic!("join answered {other:?}"),
                    };
                    let leaves = rng.random_bool(cfg.leave_fraction);
                    let i = log.shoppers.len();
                    log.shoppers.push(Shopper {
                        seq: joined.seq,
                        id: joined.ticket_id,
                        joined_ms: now,
                        estimated_wait_s: est,
                        leaves_at_ms: leaves
                            .then(|| now + rng.random_range(0..cfg.leave_within_ms)),
                        pass: None,
                        collected_ms: None,
                        saw_paused: false,
                        saw_sold_out: false,
                        expired: false,
                        too_early: 0,
                        orders: PassOrders::default(),
                    });
                    let delay = rng.random_range(0..300);
                    events.push(Reverse((
                        now + u64::from(poll) * 1000 + delay,
                        Event::Poll(i),
                    )));
                }
                Err(JoinError::QueueFull { .. }) => log.refused_full += 1,
                Err(JoinError::Paused { .. }) => log.refused_paused += 1,
                Err(JoinError::SoldOut) => log.refused_sold_out += 1,
                Err(e @ JoinError::StoreUnavailable { .. }) => {
                    panic!("a room without a sink refused a join: {e}")
                }
                Err(e @ JoinError::RateLimited { .. }) => {
                    panic!("the room counts no client's joins: {e}")
                }
            }
        }
        let outcome = room.release_once(now, cfg.release_limit);
        let stats = room.stats(now);
        log.releases.push(ReleaseEvent {
            at_ms: now,
            outcome,
            active_after: stats.active_passes,
            held_after: stats.active_passes + stats.uncollected,
            paused: room.is_paused(),
        });
        check_able_to_start(cfg, &room, &mut log, &mut holders, now);
        while let Some(Reverse((at, event))) = events.peek().copied() {
            if at > now {
                break;
            }
            events.pop();
            match event {
                Event::Start(i) => start(&room, &mut rng, cfg, &mut log, &mut events, i, now),
                Event::End(i) => {
                    let s = &mut log.shoppers[i];
                    s.orders.open -= 1;
                    if room.give_back_if_spent(s.seq, s.orders) {
                        log.given_back += 1;
                    }
                    if rng.random_bool(cfg.another_order_fraction) {
                        let later = rng.random_range(0..3_000);
                        events.push(Reverse((now + later, Event::Start(i))));
                    }
                }
                Event::Poll(i) => {
                    let had_pass = log.shoppers[i].pass.is_some();
                    poll(&mut room, &mut rng, &mut log, &mut events, i, now);
                    if !had_pass && log.shoppers[i].pass.is_some() {
                        holders.push(i);
                    }
                    // A poll never changes which passes may start.
                    continue;
                }
            }
            // Starts and ends are what change the right to start: check
            // the bound after each of them, as after each release.
            check_able_to_start(cfg, &room, &mut log, &mut holders, now);
        }
        // Polls collect passes: the slots held once they have.
        let held = room.stats(now).active_passes;
        if let Some(last) = log.releases.last_mut() {
            last.active_after = last.active_after.max(held);
        }
        t += cfg.tick_ms;
    }
    log.final_stats = Some(room.stats(T0_MS + cfg.duration_ms));
    log
}

fn poll(
    room: &mut WaitingRoom,
    rng: &mut StdRng,
    log: &mut SimLog,
    events: &mut BinaryHeap<Reverse<(u64, Event)>>,
    i: usize,
    now: u64,
) {
    let s = &mut log.shoppers[i];
    if s.leaves_at_ms.is_some_and(|at| now >= at) {
        return;
    }
    let delay = rng.random_range(0..300);
    match room.status(s.seq, &s.id, now) {
        Ok(Status::Waiting(w)) | Ok(Status::Paused(w)) => {
            s.saw_paused |= room.is_paused();
            events.push(Reverse((
                now + u64::from(w.poll_after_s) * 1000 + delay,
                Event::Poll(i),
            )));
        }
        Ok(Status::PreQueue(p)) => {
            events.push(Reverse((
                now + u64::from(p.poll_after_s) * 1000 + delay,
                Event::Poll(i),
            )));
        }
        Ok(Status::Admitted(a)) => {
            match s.pass {
                None => {
                    s.pass = Some(a);
                    s.collected_ms = Some(now);
                    let think = rng.random_range(0..2_000);
                    events.push(Reverse((now + think, Event::Start(i))));
                }
                Some(first) => {
                    assert_eq!(first, a, "a re-poll must return the same pass");
                    if room.is_paused() {
                        log.pass_kept_while_paused += 1;
                    }
                }
            }
            // Shoppers with a pass look again now and then (the page
            // re-checks); during a pause this shows the pass still works.
            events.push(Reverse((now + 3_000 + delay, Event::Poll(i))));
        }
        Ok(Status::Expired) => s.expired = true,
        Ok(Status::SoldOut) => s.saw_sold_out = true,
        Err(sluice_admission::PollError::TooEarly { retry_after_s }) => {
            s.too_early += 1;
            events.push(Reverse((now + retry_after_s * 1000, Event::Poll(i))));
        }
        Err(e) => panic!("poll of a real ticket failed: {e:?}"),
    }
}

/// The shopper tries to start a checkout, as the gateway would let them:
/// only while the room says the pass holds its slot and the pass has
/// checkouts left (the order store's count).
fn start(
    room: &WaitingRoom,
    rng: &mut StdRng,
    cfg: &SimConfig,
    log: &mut SimLog,
    events: &mut BinaryHeap<Reverse<(u64, Event)>>,
    i: usize,
    now: u64,
) {
    let s = &mut log.shoppers[i];
    let max = cfg.policy.max_orders_per_pass.get();
    if !room.may_start(s.seq, &s.id, now) || !s.orders.may_start(max) {
        log.starts_refused += 1;
        return;
    }
    s.orders.started += 1;
    s.orders.open += 1;
    log.orders_started += 1;
    let checkout = rng.random_range(cfg.checkout_ms.0..=cfg.checkout_ms.1);
    // An end nobody reports (the shopper walks away mid-payment) leaves
    // the order open: the slot is then held until the pass expires.
    if rng.random_bool(cfg.finish_reported_fraction) {
        events.push(Reverse((now + checkout, Event::End(i))));
    }
}

/// Counts the passes able to start a checkout at `now` (unexpired, holding
/// their slot, with checkouts left) and panics if more than `max_active`.
fn check_able_to_start(
    cfg: &SimConfig,
    room: &WaitingRoom,
    log: &mut SimLog,
    holders: &mut Vec<usize>,
    now: u64,
) {
    let max = cfg.policy.max_orders_per_pass.get();
    // A pass that expired or has started all its checkouts can never
    // start another (both are monotone): drop it from the count.
    holders.retain(|&i| {
        let s = &log.shoppers[i];
        s.orders.may_start(max) && s.pass.is_some_and(|p| now / 1000 < p.expires_at_s)
    });
    let able = holders
        .iter()
        .filter(|&&i| {
            let s = &log.shoppers[i];
            room.may_start(s.seq, &s.id, now)
        })
        .count() as u64;
    let max_active = u64::from(cfg.policy.max_active.get());
    assert!(
        able <= max_active,
        "{able} passes able to start a checkout at {now} ms, max_active {max_active}"
    );
    log.able_to_start_max = log.able_to_start_max.max(able);
}

fn common_end_ms(cfg: &SimConfig) -> u64 {
    T0_MS + cfg.duration_ms
}

/// Passes collected between `from_ms` and `to_ms` (relative): the
/// admissions that reached someone.
pub fn collected_between(log: &SimLog, from_ms: u64, to_ms: u64) -> u64 {
    log.shoppers
        .iter()
        .filter_map(|s| s.collected_ms)
        .filter(|at| *at >= T0_MS + from_ms && *at <= T0_MS + to_ms)
        .count() as u64
}

/// Places released between `from_ms` and `to_ms` (relative), inclusive of
/// both ends' passes.
pub fn minted_between(log: &SimLog, from_ms: u64, to_ms: u64) -> u64 {
    log.releases
        .iter()
        .filter(|r| r.at_ms >= T0_MS + from_ms && r.at_ms <= T0_MS + to_ms)
        .map(|r| u64::from(r.outcome.released))
        .sum()
}

/// Checks the invariants every simulation must keep:
/// - passes are minted in line order (FIFO): a later place never gets its
///   pass before an earlier one, and every shopper who kept polling and is
///   ahead of someone admitted was admitted too;
/// - over every window, released ≤ rate × window + burst, where the rate
///   is twice the configured one when some shoppers leave (the make-up for
///   no-shows is bounded at that, see `sluice_admission::no_show`);
/// - `max_active` is never exceeded.
pub fn assert_invariants(cfg: &SimConfig, log: &SimLog) {
    let mut admitted: Vec<&Shopper> = log.shoppers.iter().filter(|s| s.pass.is_some()).collect();
    admitted.sort_by_key(|s| s.seq);
    for pair in admitted.windows(2) {
        let (a, b) = (pair[0].pass.unwrap(), pair[1].pass.unwrap());
        assert!(
            a.number < b.number && a.issued_at_s <= b.issued_at_s,
            "FIFO broken: seq {} after seq {}",
            a.seq,
            b.seq
        );
    }
    // Only passes old enough that everyone ahead has polled since (polls
    // come at most `poll_max` + 0.3 s apart).
    let settled_s = (common_end_ms(cfg) - cfg.policy.poll_max.as_millis() as u64 - 1_000) / 1000;
    if let Some(last) = admitted
        .iter()
        .rev()
        .find(|s| s.pass.is_some_and(|p| p.issued_at_s < settled_s))
    {
        for s in log
            .shoppers
            .iter()
            .filter(|s| s.seq < last.seq && s.leaves_at_ms.is_none())
        {
            assert!(
                s.pass.is_some() || s.expired,
                "seq {} kept polling, was ahead of {} and got no pass",
                s.seq,
                last.seq
            );
        }
    }
    let configured = u64::from(cfg.policy.release_per_second.get());
    let rate = if cfg.leave_fraction > 0.0 {
        2 * configured
    } else {
        configured
    };
    let burst = u64::from(cfg.policy.burst.get());
    for window_ms in [1_000u64, 5_000, 30_000] {
        let mut sum = 0u64;
        let mut tail = 0usize;
        for (head, r) in log.releases.iter().enumerate() {
            sum += u64::from(r.outcome.released);
            while log.releases[tail].at_ms + window_ms <= r.at_ms {
                sum -= u64::from(log.releases[tail].outcome.released);
                tail += 1;
            }
            let span_ms = r.at_ms - log.releases[tail].at_ms;
            assert!(
                sum * 1000 <= rate * span_ms + burst * 1000,
                "minted {sum} in {span_ms} ms at pass {head}"
            );
        }
    }
    let max_active = u64::from(cfg.policy.max_active.get());
    assert!(
        log.releases.iter().all(|r| r.active_after <= max_active),
        "max_active exceeded"
    );
}
