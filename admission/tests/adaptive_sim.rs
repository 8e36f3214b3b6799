//! A seeded simulation of adaptive release against a backend whose
//! capacity drops from 100 to 30 checkouts per second and comes back: the
//! controller of `sluice_admission::adaptive`, run every simulated second
//! on the window the gateway keeps, with an injected clock (no sleeping).
//!
//! The backend: `workers` checkouts at once, each taking an exponentially
//! distributed time (mean 100 ms), so it serves `workers × 10` per second;
//! a checkout still queued after 5 s times out (a backend failure). An
//! admitted shopper starts checkout 0-2 s after admission; 5 % of cards are
//! declined (served, not the backend's fault) and 0.3 % of checkouts fail
//! on their own.
//!
//! The lagged case is the real line's (traced on `backend-degrades`): a
//! released shopper learns it was let in only at its next status poll,
//! and the shoppers released one after the other joined one after the
//! other, so they poll together: the releases of a whole poll interval
//! (`poll_min_s` = 10 s here, as in that scenario) reach checkout in one
//! round, spread over 2 s, and between rounds nothing arrives. What the
//! backend serves then trails the release rate by up to a poll interval
//! and is zero between rounds. That was the line before its front was
//! paced (`sluice_admission::poll`); the rounds plant stays as a harder
//! case for the law.
//!
//! `BD_LINE` is `backend-degrades` with its provider as the real
//! binaries meet it (`adaptive_sim/provider.rs`: paysim's one FIFO worker
//! at a fixed time a call, two calls a checkout, the driver's 1 s
//! timeout, look-ups and retries), judged as the load harness judges it,
//! utilisation included: the released rate once settled at least 85 % of
//! the capacity at the target p99 that a fixed-rate sweep behind the same
//! line finds for each phase (`capacity_at_target`).
//!
//! The line's plant (`BIG_LINE`, `SMALL_LINE`) is the real one: shoppers
//! join a `WaitingRoom`, poll when it tells them (plus 0-300 ms of their
//! own), collect their pass at that poll and start checkout 0-2 s later;
//! the rate the law decides is set on the room every second, the room's
//! free slots are the law's, and a checkout that ends gives its pass back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_admission::adaptive::{
    step, Bounds, CheckoutWindow, Decision, InFlight, Measurements, Outcome, Phase,
};
use sluice_admission::{InMemoryStock, PassOrders, Policy, Status, TicketId, WaitingRoom};

#[path = "adaptive_sim/provider.rs"]
mod provider;
use provider::{Provider, ProviderCfg};

const TICK_MS: u64 = 10;
const SERVICE_MEAN_MS: f64 = 100.0;
const TIMEOUT_MS: u64 = 5000;
const MAX_ACTIVE: u32 = 1000;
const PHASE_MS: u64 = 120_000;
const SETTLE_MS: u64 = 30_000;

const BOUNDS: Bounds = Bounds {
    target_p99_ms: 800,
    max_error_ratio: 0.02,
    min_per_second: 5,
    max_per_second: 500,
};

/// One simulated second, as the test judges it.
#[derive(Debug, Clone, Copy)]
struct Second {
    at_ms: u64,
    rate: f64,
    phase: Phase,
    /// The window's p99 and the 10 s one, as the step saw them.
    p99_ms: Option<u32>,
    long_p99_ms: Option<u32>,
    /// The law's queue estimate (smoothed), for the trace.
    queue: Option<f64>,
    /// The whole decision, for `SIM_TRACE_DECISIONS=from-to` (seconds).
    decision: Decision,
}

struct Run {
    seconds: Vec<Second>,
    /// (ended at, latency, failed) of every checkout.
    checkouts: Vec<(u64, u64, bool)>,
    /// Per simulated second: places released, and checkouts that reached
    /// the backend.
    released: Vec<u32>,
    arrived: Vec<u32>,
    /// Polls answered (the line's plant only).
    polls: u64,
}

/// A backend and the line in front of it.
#[derive(Debug, Clone, Copy)]
struct Plant {
    bounds: Bounds,
    /// Workers and their mean service time (ms) in each phase.
    workers: [usize; 3],
    service_ms: [f64; 3],
    /// Poll rounds this far apart (0: a shopper starts checkout 0-2 s
    /// after its release, whenever that is).
    round_ms: u64,
    /// Instead of rounds, the real line: shoppers join a
    /// `sluice_admission::WaitingRoom` and poll when it tells them.
    line: Option<LineCfg>,
    /// How long each of the three phases lasts.
    phase_ms: u64,
    /// Instead of `workers` and `service_ms`: the real provider behind
    /// the real checkout driver (`provider.rs`).
    provider: Option<ProviderCfg>,
    /// A fixed release rate instead of the law (a capacity sweep's step).
    fixed: Option<u32>,
}

/// The real line in front of the backend.
#[derive(Debug, Clone, Copy)]
struct LineCfg {
    /// This many join, evenly over `over_ms`, from the start.
    shoppers: u32,
    over_ms: u64,
    poll_min_s: u64,
    poll_max_s: u64,
}

/// The backend: 100, then 30, then 100 checkouts a second.
const BIG: Plant = Plant {
    bounds: BOUNDS,
    workers: [10, 3, 10],
    service_ms: [SERVICE_MEAN_MS; 3],
    round_ms: NO_LAG_MS,
    line: None,
    phase_ms: PHASE_MS,
    provider: None,
    fixed: None,
};

/// The backend behind the real line, as `backend-degrades` sets
/// it (`poll_min_s` = 10, `poll_max_s` = 20): 40,000 shoppers join in the
/// first 40 s, so the line lasts the whole run.
const BIG_LINE: Plant = Plant {
    line: Some(LineCfg {
        shoppers: 40_000,
        over_ms: 40_000,
        poll_min_s: 10,
        poll_max_s: 20,
    }),
    ..BIG
};

/// `backend-degrades`' short test, as traced: one provider worker at
/// 50 ms a checkout (20/s), then 160 ms (6/s), then 50 ms again; the
/// scenario's bounds (2-40/s, 1,200 ms); shoppers in poll rounds.
const SMALL: Plant = Plant {
    bounds: Bounds {
        target_p99_ms: 1200,
        max_error_ratio: 0.02,
        min_per_second: 2,
        max_per_second: 40,
    },
    workers: [1; 3],
    service_ms: [50.0, 160.0, 50.0],
    round_ms: POLL_ROUND_MS,
    line: None,
    phase_ms: PHASE_MS,
    provider: None,
    fixed: None,
};

/// The same backend and bounds behind the real line (10-20 s polls), with
/// enough shoppers (6,000 in 20 s) for the line to last the run.
const SMALL_LINE: Plant = Plant {
    round_ms: NO_LAG_MS,
    line: Some(LineCfg {
        shoppers: 6_000,
        over_ms: 20_000,
        poll_min_s: 10,
        poll_max_s: 20,
    }),
    ..SMALL
};

/// `backend-degrades` itself: the scenario's bounds and line (3,000
/// shoppers in 20 s, polls 10-20 s), and its provider as the real
/// binaries meet it (`provider.rs`: paysim's one worker at 25, then 80,
/// then 25 ms a call, two calls a checkout, the driver's 1 s timeout and
/// retries), slowed from 60 s to 120 s; judged as its verdict judges
/// (`bd_verdict`).
const BD_LINE: Plant = Plant {
    round_ms: NO_LAG_MS,
    line: Some(LineCfg {
        shoppers: 3_000,
        over_ms: 20_000,
        poll_min_s: 10,
        poll_max_s: 20,
    }),
    phase_ms: 60_000,
    provider: Some(provider::BACKEND_DEGRADES),
    ..SMALL
};

impl Plant {
    fn phase(&self, now_ms: u64) -> usize {
        ((now_ms / self.phase_ms) as usize).min(2)
    }
}

/// The existing case: a shopper starts checkout 0-2 s after its release.
const NO_LAG_MS: u64 = 0;
/// The line's: shoppers learn of their release in poll rounds this far
/// apart, and start checkout 0-2 s after the round.
const POLL_ROUND_MS: u64 = 10_000;

/// The shoppers in line and the room they wait in.
struct Line {
    room: WaitingRoom,
    cfg: LineCfg,
    /// (seq, ticket id) of each shopper, by index.
    tickets: Vec<(u64, TicketId)>,
    /// Polls due: (at, shopper).
    polls: BinaryHeap<Reverse<(u64, usize)>>,
    joined: u32,
    answered: u64,
}

/// 2026-01-01T00:00:00Z: the line's clock is unix ms.
const T0_MS: u64 = 1_767_225_600_000;

impl Line {
    fn new(cfg: LineCfg, start_per_second: f64, seed: u64) -> Self {
        let start = NonZeroU32::new(start_per_second.round() as u32).unwrap();
        let policy = Policy {
            release_per_second: start,
            burst: start,
            max_active: NonZeroU32::new(MAX_ACTIVE).unwrap(),
            queue_capacity: NonZeroU32::new(cfg.shoppers).unwrap(),
            pass_ttl: Duration::from_secs(120),
            ticket_ttl: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3 * cfg.poll_max_s),
            poll_min: Duration::from_secs(cfg.poll_min_s),
            poll_max: Duration::from_secs(cfg.poll_max_s),
            opens_at_ms: None,
            pass_idle: std::time::Duration::ZERO,
            max_orders_per_pass: NonZeroU32::new(1).unwrap(),
        };
        let room = WaitingRoom::new(
            "drop",
            policy,
            Arc::new(InMemoryStock::new()),
            StdRng::seed_from_u64(seed ^ 0x11e),
            T0_MS,
        )
        .unwrap();
        Self {
            room,
            cfg,
            tickets: Vec::new(),
            polls: BinaryHeap::new(),
            joined: 0,
            answered: 0,
        }
    }

    /// One tick at `now` (ms from the start): joins due, the release
    /// pass, and the polls due; a shopper whose poll shows its pass starts
    /// checkout 0-2 s later (pushed on `thinking` with its index).
    fn tick(&mut self, now: u64, rng: &mut StdRng, thinking: &mut Vec<(u64, usize)>) -> u32 {
        let at = T0_MS + now;
        let due = (u64::from(self.cfg.shoppers) * now / self.cfg.over_ms)
            .min(u64::from(self.cfg.shoppers)) as u32;
        while self.joined < due {
            let joined = self.room.join(at).expect("room for everyone");
            let Status::Waiting(w) = joined.status else {
                panic!("join answered {:?}", joined.status)
            };
            let i = self.tickets.len();
            self.tickets.push((joined.seq, joined.ticket_id));
            self.polls
                .push(Reverse((now + poll_delay_ms(w.poll_after_s, rng), i)));
            self.joined += 1;
        }
        let released = self.room.release_once(at, 10_000).released;
        while let Some(&Reverse((due, i))) = self.polls.peek() {
            if due > now {
                break;
            }
            self.polls.pop();
            self.answered += 1;
            let (seq, id) = self.tickets[i];
            match self.room.status(seq, &id, at) {
                Ok(Status::Waiting(w)) | Ok(Status::Paused(w)) => {
                    self.polls
                        .push(Reverse((now + poll_delay_ms(w.poll_after_s, rng), i)));
                }
                Ok(Status::Admitted(_)) => thinking.push((now + rng.random_range(0..2000), i)),
                other => panic!("poll answered {other:?}"),
            }
        }
        released
    }

    /// Shopper `i`'s checkout ended: its pass gives its slot back.
    fn done(&mut self, i: usize) {
        let orders = PassOrders {
            started: 1,
            open: 0,
        };
        assert!(self.room.give_back_if_spent(self.tickets[i].0, orders));
    }
}

/// When a shopper told `poll_after_s` polls again: then, plus the
/// harness's 0-250 ms of its own (the load test's shopper adds its index
/// mod 250 ms) and 0-50 ms of network.
fn poll_delay_ms(poll_after_s: u32, rng: &mut StdRng) -> u64 {
    u64::from(poll_after_s) * 1000 + rng.random_range(0..300)
}

fn simulate(seed: u64, plant: &Plant) -> Run {
    let lag_ms = plant.round_ms;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut window = CheckoutWindow::new();
    let mut decision = Decision::start(&plant.bounds, 0);
    if let Some(r) = plant.fixed {
        decision.rate = f64::from(r);
    }
    let mut line = plant.line.map(|cfg| Line::new(cfg, decision.rate, seed));
    let mut provider = plant.provider.map(|cfg| Provider::new(cfg, plant.phase_ms));
    let mut tokens = 0.0f64;
    let mut active = 0u32;
    // Shoppers admitted, by when they start their checkout (and who:
    // their index in the line, or usize::MAX).
    let mut thinking: Vec<(u64, usize)> = Vec::new();
    let mut queued: VecDeque<(u64, usize)> = VecDeque::new();
    // (started at, done at, failed, who)
    let mut serving: Vec<(u64, u64, bool, usize)> = Vec::new();
    let end = 3 * plant.phase_ms;
    let mut run = Run {
        seconds: Vec::new(),
        checkouts: Vec::new(),
        released: vec![0; (end / 1000) as usize + 1],
        arrived: vec![0; (end / 1000) as usize + 1],
        polls: 0,
    };
    let mut now = 0u64;
    // Checkouts at the backend (queued or being served), as the gateway
    // counts its own: from the backend's events, not its capacity.
    let mut in_flight = InFlight::new(0);
    let mut ended: Vec<usize> = Vec::new();
    while now < end {
        now += TICK_MS;
        let second = (now / 1000) as usize;
        if let Some(line) = line.as_mut() {
            run.released[second] += line.tick(now, &mut rng, &mut thinking);
        } else {
            // Release at the rate in force, as the room's bucket does.
            tokens = (tokens + decision.per_second() as f64 * TICK_MS as f64 / 1000.0).min(1.0e3);
            while tokens >= 1.0 && active < MAX_ACTIVE {
                tokens -= 1.0;
                active += 1;
                run.released[second] += 1;
                // The next poll round after the release (none: at once).
                let round = if lag_ms == 0 {
                    now
                } else {
                    now.next_multiple_of(lag_ms)
                };
                thinking.push((round + rng.random_range(0..2000), usize::MAX));
            }
        }
        thinking.retain(|&(at, who)| {
            if at <= now {
                in_flight.start(now);
                match provider.as_mut() {
                    Some(p) => p.arrive(at, who, &mut rng),
                    None => queued.push_back((at, who)),
                }
                run.arrived[second] += 1;
                false
            } else {
                true
            }
        });
        // Checkouts that ended.
        serving.retain(|&(arrived, done, failed, who)| {
            if done <= now {
                let outcome = if failed {
                    Outcome::Failed
                } else {
                    Outcome::Served
                };
                window.record(now, (now - arrived) as u32, outcome);
                run.checkouts.push((now, now - arrived, failed));
                in_flight.end(now);
                ended.push(who);
                false
            } else {
                true
            }
        });
        while queued.front().is_some_and(|&(a, _)| now - a > TIMEOUT_MS) {
            let (arrived, who) = queued.pop_front().unwrap();
            window.record(now, (now - arrived) as u32, Outcome::Failed);
            run.checkouts.push((now, now - arrived, true));
            in_flight.end(now);
            ended.push(who);
        }
        if let Some(p) = provider.as_mut() {
            for (_, latency, failed, who) in p.advance(now, &mut rng) {
                let outcome = if failed {
                    Outcome::Failed
                } else {
                    Outcome::Served
                };
                window.record(now, latency as u32, outcome);
                run.checkouts.push((now, latency, failed));
                in_flight.end(now);
                ended.push(who);
            }
        }
        for who in ended.drain(..) {
            match line.as_mut() {
                Some(line) => line.done(who),
                None => active -= 1,
            }
        }
        while serving.len() < plant.workers[plant.phase(now)] {
            let Some((arrived, who)) = queued.pop_front() else {
                break;
            };
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            let service = (-u.ln() * plant.service_ms[plant.phase(now)]) as u64;
            // Declined cards are served like any other checkout.
            let failed = rng.random_bool(0.003);
            serving.push((arrived, now + service, failed, who));
        }
        if now.is_multiple_of(1000) {
            let span = in_flight.take(now);
            let free = match line.as_ref() {
                Some(line) => line.room.free_slots(),
                None => MAX_ACTIVE - active,
            };
            let m = Measurements {
                in_flight: Some(span.average),
                started_per_second: span.started_per_second,
                ..window.measure(now, free)
            };
            decision = match plant.fixed {
                Some(_) => Decision {
                    at_ms: now,
                    ..decision
                },
                None => step(&plant.bounds, &decision, &m, now),
            };
            if let Some(line) = line.as_mut() {
                line.room
                    .set_release_per_second(NonZeroU32::new(decision.per_second()).unwrap());
            }
            run.seconds.push(Second {
                at_ms: now,
                rate: decision.rate,
                phase: decision.phase,
                p99_ms: m.p99_ms,
                long_p99_ms: m.long_p99_ms,
                queue: decision.queue,
                decision,
            });
        }
    }
    run.polls = line.map_or(0, |l| l.answered);
    run
}

fn mean_rate(run: &Run, from_ms: u64, to_ms: u64) -> f64 {
    let rates: Vec<f64> = run
        .seconds
        .iter()
        .filter(|s| (from_ms..to_ms).contains(&s.at_ms))
        .map(|s| s.rate)
        .collect();
    rates.iter().sum::<f64>() / rates.len() as f64
}

/// The highest rate decided in `[from_ms, to_ms)`.
fn max_rate(run: &Run, from_ms: u64, to_ms: u64) -> f64 {
    run.seconds
        .iter()
        .filter(|s| (from_ms..to_ms).contains(&s.at_ms))
        .map(|s| s.rate)
        .fold(0.0, f64::max)
}

fn p99(mut latencies: Vec<u64>) -> u64 {
    latencies.sort_unstable();
    latencies[(latencies.len() * 99).div_ceil(100) - 1]
}

fn check_bounds(seed: u64, bounds: &Bounds, run: &Run) {
    for s in &run.seconds {
        assert!(
            (f64::from(bounds.min_per_second)..=f64::from(bounds.max_per_second)).contains(&s.rate),
            "seed {seed}: rate {} out of bounds at {} ms",
            s.rate,
            s.at_ms
        );
    }
}

fn settled_checkouts(run: &Run, from_ms: u64, to_ms: u64) -> Vec<(u64, u64, bool)> {
    run.checkouts
        .iter()
        .copied()
        .filter(|c| (from_ms..to_ms).contains(&c.0))
        .collect()
}

/// What the controller achieves today: it stays in its bounds, follows the
/// capacity down and back up within 30 s, and keeps backend failures under
/// `max_error_ratio`.
#[test]
fn the_rate_follows_the_backend_down_and_up() {
    follows_down_and_up(&BIG);
}

/// When shoppers reach checkout in poll rounds (the real line's lag, see
/// the top): the rate still follows the capacity down and comes back after
/// the recovery, rather than cruising at what the backend served on
/// average, rounds and the empty seconds between them together. Only the
/// bounds, the following and the recovery are asserted: a round holds a
/// whole poll interval's releases, so its checkouts queue for seconds at
/// any rate worth the name, and neither the p99 nor the error bar is
/// within reach of a release rate alone.
#[test]
fn the_rate_follows_the_backend_down_and_up_when_shoppers_check_out_in_poll_rounds() {
    // Judged as the real short test judges it: from 15 s after each step
    // of the capacity, over the next 30 s.
    let judged = |run: &Run, phase: u64| {
        let from = phase * PHASE_MS + 15_000;
        mean_rate(run, from, from + 30_000)
    };
    for seed in [1, 2, 3, 42, 2026] {
        let run = simulate(seed, &SMALL);
        check_bounds(seed, &SMALL.bounds, &run);
        let (high, low, back) = (judged(&run, 0), judged(&run, 1), judged(&run, 2));
        if std::env::var_os("SIM_TRACE").is_some() {
            trace(&run);
        }
        eprintln!("poll rounds, seed {seed}: {high:.1}/s, then {low:.1}/s, then {back:.1}/s");
        assert!(
            low <= 6.25 && low < 0.8 * high,
            "seed {seed}: {high:.1}/s, then {low:.1}/s against 6.25/s"
        );
        assert!(
            back > 1.5 * low && back <= 20.0,
            "seed {seed}: {low:.1}/s against 6.25/s, then {back:.1}/s against 20/s again"
        );
    }
}

fn trace(run: &Run) {
    if let Some((from, to)) = std::env::var("SIM_TRACE_DECISIONS")
        .ok()
        .and_then(|r| {
            r.split_once('-')
                .map(|(a, b)| (a.parse::<u64>(), b.parse::<u64>()))
        })
        .and_then(|(a, b)| Some((a.ok()?, b.ok()?)))
    {
        for s in &run.seconds {
            if (from * 1000..=to * 1000).contains(&s.at_ms) {
                eprintln!("{}: {:?}", s.at_ms / 1000, s.decision);
            }
        }
    }
    if std::env::var_os("SIM_TRACE_SECONDS").is_some() {
        for (t, (r, a)) in run.released.iter().zip(&run.arrived).enumerate() {
            eprint!("{t}:{r}/{a} ");
        }
        eprintln!("\n(second: released/reached checkout), {} polls", run.polls);
    }
    let every = if std::env::var_os("SIM_TRACE_P99").is_some() {
        1
    } else {
        3
    };
    for s in run.seconds.iter().step_by(every) {
        eprint!(
            "{}:{:.0}{} ",
            s.at_ms / 1000,
            s.rate,
            &s.phase.as_str()[..1]
        );
        if every == 1 {
            eprint!(
                "[{}/{} q{:.1}] ",
                s.p99_ms.unwrap_or(0),
                s.long_p99_ms.unwrap_or(0),
                s.queue.unwrap_or(f64::NAN)
            );
        }
    }
    eprintln!();
}

fn follows_down_and_up(plant: &Plant) {
    for seed in [1, 2, 3, 42, 2026] {
        let run = simulate(seed, plant);
        check_bounds(seed, &plant.bounds, &run);
        // Down: from 30 s after the drop, on average no more than the
        // backend's 30 per second.
        let low = mean_rate(&run, PHASE_MS + SETTLE_MS, 2 * PHASE_MS);
        assert!(low <= 30.0, "seed {seed}: {low:.1}/s released against 30/s");
        // Up: within 30 s of the capacity coming back, above 60 % of it.
        let back = max_rate(&run, 2 * PHASE_MS, 2 * PHASE_MS + SETTLE_MS);
        assert!(
            back >= 60.0,
            "seed {seed}: at most {back:.1}/s in the 30 s after recovery"
        );
        for phase in 0..3u64 {
            let (start, end) = (phase * PHASE_MS, (phase + 1) * PHASE_MS);
            let after = settled_checkouts(&run, start + SETTLE_MS, end);
            let failed = after.iter().filter(|c| c.2).count() as f64 / after.len() as f64;
            assert!(
                failed < BOUNDS.max_error_ratio,
                "seed {seed}: phase {phase} error ratio {failed:.4}"
            );
        }
    }
}

/// The full bar: from 30 s after each step of the capacity, the
/// rate holds within ±15 % of its mean, that mean is 60-100 % of the
/// capacity, and the p99 of the checkouts that ended stays within 1.5 × the
/// target.
#[test]
fn after_settling_the_rate_holds_within_15_percent_and_p99_within_1_5x() {
    holds_after_settling(&BIG);
}

fn holds_after_settling(plant: &Plant) {
    // SIM_SEEDS (with SIM_REPORT) reports on other seeds than the asserted ones.
    let seeds: Vec<u64> = match std::env::var("SIM_SEEDS") {
        Ok(list) if std::env::var_os("SIM_REPORT").is_some() => {
            list.split(',').map(|s| s.trim().parse().unwrap()).collect()
        }
        _ => vec![1, 2, 3, 42, 2026],
    };
    for seed in seeds {
        let result = settled_bar(plant, seed, None);
        if std::env::var_os("SIM_REPORT").is_none() {
            if let Err(e) = result {
                panic!("{e}");
            }
        }
    }
}

/// The bar once settled, on one seed: from 30 s after each step of the
/// capacity, the rate holds within ±15 % of its mean, that mean is
/// 60-100 % of the nominal capacity (and, with `at_target`, at least
/// [`UTILISATION_MIN`] of the capacity at the target p99 that a
/// fixed-rate sweep found for the phase), the p99 of the checkouts that
/// ended stays within 1.5 × the target and their failures under
/// `max_error_ratio`. The first violation, if any.
fn settled_bar(plant: &Plant, seed: u64, at_target: Option<[u32; 3]>) -> Result<(), String> {
    let run = simulate(seed, plant);
    if std::env::var_os("SIM_TRACE").is_some() {
        trace(&run);
    }
    let bounds = &plant.bounds;
    let mut first = Ok(());
    let mut fail = |e: String| {
        if first.is_ok() {
            first = Err(e);
        }
    };
    for phase in 0..3u64 {
        let n = phase as usize;
        let capacity = plant.workers[n] as f64 * 1000.0 / plant.service_ms[n];
        let (start, end) = (phase * plant.phase_ms, (phase + 1) * plant.phase_ms);
        let settled = start + SETTLE_MS;
        let steady = mean_rate(&run, settled, end);
        let in_phase = || {
            run.seconds
                .iter()
                .filter(|s| (settled..end).contains(&s.at_ms))
        };
        let swing = in_phase()
            .map(|s| (s.rate - steady).abs() / steady)
            .fold(0.0, f64::max);
        let after = settled_checkouts(&run, settled, end);
        let latency = p99(after.iter().map(|c| c.1).collect());
        let failed = after.iter().filter(|c| c.2).count() as f64 / after.len().max(1) as f64;
        let low = in_phase().min_by(|a, b| a.rate.total_cmp(&b.rate)).unwrap();
        let high = in_phase().max_by(|a, b| a.rate.total_cmp(&b.rate)).unwrap();
        let of_target = at_target.map_or(String::new(), |c| {
            format!(
                ", {:.0} % of {} at target",
                100.0 * steady / f64::from(c[n]),
                c[n]
            )
        });
        eprintln!(
            "seed {seed} phase {phase}: mean {steady:.1}/s{of_target}, swing ±{:.0} % ({:.0} at {} s, {:.0} at {} s), p99 {latency} ms, {:.2} % failed",
            swing * 100.0,
            low.rate,
            low.at_ms / 1000,
            high.rate,
            high.at_ms / 1000,
            failed * 100.0
        );
        if !(steady <= capacity && steady >= 0.6 * capacity) {
            fail(format!(
                "seed {seed}: phase {phase} steady rate {steady:.1} for capacity {capacity}"
            ));
        }
        if let Some(c) = at_target {
            if steady < UTILISATION_MIN * f64::from(c[n]) {
                fail(format!(
                    "seed {seed}: phase {phase} steady rate {steady:.1} under {UTILISATION_MIN} × {} (the capacity at the target p99)",
                    c[n]
                ));
            }
            if failed >= bounds.max_error_ratio {
                fail(format!(
                    "seed {seed}: phase {phase} {:.2} % failed",
                    failed * 100.0
                ));
            }
        }
        if let Some(s) = in_phase().find(|s| (s.rate - steady).abs() > 0.15 * steady) {
            fail(format!(
                "seed {seed}: phase {phase} rate {:.1} at {} ms is more than 15 % from {steady:.1}",
                s.rate, s.at_ms
            ));
        }
        if latency as f64 > 1.5 * f64::from(bounds.target_p99_ms) {
            fail(format!(
                "seed {seed}: phase {phase} p99 {latency} ms after settling"
            ));
        }
    }
    first
}

/// The released rate once settled must be at least this share of the
/// backend's capacity at the target p99 (issue 32).
const UTILISATION_MIN: f64 = 0.85;

/// A fixed-rate step of a capacity sweep lasts this long...
const SWEEP_MS: u64 = 90_000;
/// ...and is judged from here on (the line's opening gone).
const SWEEP_SETTLED_MS: u64 = 30_000;
/// The seeds a sweep's step must meet the target on.
const SWEEP_SEEDS: [u64; 3] = [101, 102, 103];

/// `plant` with phase `n`'s backend throughout, released at a fixed
/// `rate`, with a line that lasts the step.
fn fixed_plant(plant: &Plant, n: usize, rate: u32) -> Plant {
    Plant {
        workers: [plant.workers[n]; 3],
        service_ms: [plant.service_ms[n]; 3],
        provider: plant.provider.map(|p| ProviderCfg {
            latency_ms: [p.latency_ms[n]; 3],
            ..p
        }),
        line: plant.line.map(|l| LineCfg {
            shoppers: rate * (SWEEP_MS / 1000 + 20) as u32 + 1000,
            over_ms: 20_000,
            ..l
        }),
        fixed: Some(rate),
        phase_ms: SWEEP_MS / 3,
        ..*plant
    }
}

/// One fixed-rate step on one seed: (p99 ms, failed share, served per
/// second) of the checkouts that ended once settled.
fn fixed_step(plant: &Plant, n: usize, rate: u32, seed: u64) -> (u64, f64, f64) {
    let run = simulate(seed, &fixed_plant(plant, n, rate));
    let after = settled_checkouts(&run, SWEEP_SETTLED_MS, SWEEP_MS);
    let failed = after.iter().filter(|c| c.2).count();
    (
        if after.is_empty() {
            0
        } else {
            p99(after.iter().map(|c| c.1).collect())
        },
        failed as f64 / after.len().max(1) as f64,
        (after.len() - failed) as f64 * 1000.0 / (SWEEP_MS - SWEEP_SETTLED_MS) as f64,
    )
}

/// The capacity at the target p99 of phase `n`'s backend behind the
/// line, as `sluice-load capacity` finds it: the highest whole release
/// rate (the room's bucket runs at whole rates) whose checkouts, once
/// settled, have a p99 within `target_p99_ms`, failures under
/// `max_error_ratio`, and are served at 90 % of it or more, on every
/// seed of [`SWEEP_SEEDS`]; found by steps of × 1.25 from the floor, then
/// halving between the last good step and the first bad one.
fn capacity_at_target(plant: &Plant, n: usize) -> u32 {
    let b = &plant.bounds;
    let good = |rate: u32| {
        SWEEP_SEEDS.iter().all(|&seed| {
            let (p99_ms, failed, served) = fixed_step(plant, n, rate, seed);
            p99_ms <= u64::from(b.target_p99_ms)
                && failed < b.max_error_ratio
                && served >= 0.9 * f64::from(rate)
        })
    };
    let (mut lo, mut hi) = (b.min_per_second.max(1), None);
    while hi.is_none() && lo < b.max_per_second {
        let next = ((f64::from(lo) * 1.25).ceil() as u32).min(b.max_per_second);
        if good(next) {
            lo = next;
        } else {
            hi = Some(next);
        }
    }
    let Some(mut hi) = hi else { return lo };
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if good(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Each phase's capacity at the target p99 (the third phase's backend is
/// the first's).
fn capacities_at_target(plant: &Plant) -> [u32; 3] {
    assert_eq!(plant.workers[0], plant.workers[2]);
    assert_eq!(plant.service_ms[0], plant.service_ms[2]);
    assert!(plant
        .provider
        .is_none_or(|p| p.latency_ms[0] == p.latency_ms[2]));
    let healthy = capacity_at_target(plant, 0);
    let degraded = capacity_at_target(plant, 1);
    eprintln!("capacity at the target p99: {healthy}/s, {degraded}/s, {healthy}/s");
    [healthy, degraded, healthy]
}

/// Per plant, computed once for every test that wants it.
fn bd_capacities() -> [u32; 3] {
    static C: std::sync::OnceLock<[u32; 3]> = std::sync::OnceLock::new();
    *C.get_or_init(|| capacities_at_target(&BD_LINE))
}

fn line_capacities() -> [u32; 3] {
    static C: std::sync::OnceLock<[u32; 3]> = std::sync::OnceLock::new();
    *C.get_or_init(|| capacities_at_target(&BIG_LINE))
}

/// Runs `check` on every seed of `seeds` (on two threads); asserts that
/// at least `needed` pass.
fn seeds_pass(
    what: &str,
    seeds: std::ops::RangeInclusive<u64>,
    needed: usize,
    check: fn(u64) -> Result<(), String>,
) {
    let seeds: Vec<u64> = seeds.collect();
    let results: Vec<(u64, Result<(), String>)> = std::thread::scope(|scope| {
        let halves: Vec<_> = [0, 1]
            .map(|h| {
                let mine: Vec<u64> = seeds.iter().copied().skip(h).step_by(2).collect();
                scope.spawn(move || mine.into_iter().map(|s| (s, check(s))).collect::<Vec<_>>())
            })
            .into_iter()
            .collect();
        halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let failed: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    let passed = results.len() - failed.len();
    eprintln!(
        "{what}: {passed} of {} seeds ({}–{}) pass",
        results.len(),
        seeds[0],
        seeds[seeds.len() - 1]
    );
    for e in &failed {
        eprintln!("  {e}");
    }
    assert!(
        passed >= needed,
        "{what}: {passed} of {} seeds pass, {needed} needed: {failed:?}",
        results.len()
    );
}

fn line_bar(seed: u64) -> Result<(), String> {
    settled_bar(&BIG_LINE, seed, Some(line_capacities()))
}

/// Behind the real line (shoppers poll the room when it tells them and
/// collect their pass at that poll, `poll_min_s` = 10 as in
/// `backend-degrades`): checkouts reach the backend at the pace they were
/// released, not in rounds of a poll interval (the front's poll pacing,
/// `sluice_admission::poll`); and the rate still stays in its bounds and
/// follows the capacity down and back up. Without the pacing a whole
/// `poll_min_s` of releases comes back in one round: seconds with no
/// checkout at all between rounds of several times the rate.
#[test]
fn behind_the_line_checkouts_come_at_the_release_pace_and_the_rate_follows() {
    for seed in [1, 2, 3] {
        if let Err(e) = line_follows(seed) {
            panic!("{e}");
        }
    }
}

/// The same bar on more seeds, reported (`SIM_SEEDS=1-24`, default 1-12):
/// the seeds above are the test's, the others held out.
#[test]
#[ignore = "a report"]
fn report_line_follows_seeds() {
    let (from, to) = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|r| {
            let (a, b) = r.split_once('-')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((1u64, 12u64));
    let mut failed = 0;
    for seed in from..=to {
        match line_follows(seed) {
            Ok(()) => eprintln!("seed {seed}: ok"),
            Err(e) => {
                failed += 1;
                eprintln!("seed {seed}: FAILED {e}");
            }
        }
    }
    eprintln!("{failed} of {} seeds failed", to - from + 1);
}

fn line_follows(seed: u64) -> Result<(), String> {
    let run = simulate(seed, &BIG_LINE);
    if std::env::var_os("SIM_TRACE").is_some() {
        trace(&run);
    }
    check_bounds(seed, &BIG_LINE.bounds, &run);
    for phase in 0..3u64 {
        let (from, to) = (
            ((phase * PHASE_MS + SETTLE_MS) / 1000) as usize,
            ((phase + 1) * PHASE_MS / 1000) as usize,
        );
        let mean = run.released[from..to].iter().sum::<u32>() as f64 / (to - from) as f64;
        let most = *run.arrived[from..to].iter().max().unwrap();
        let none = run.arrived[from..to].iter().filter(|&&a| a == 0).count();
        eprintln!(
            "line seed {seed} phase {phase}: released {mean:.1}/s, checkouts per second at most {most} ({:.2}×), {none} seconds without one, {} polls",
            f64::from(most) / mean,
            run.polls
        );
        if f64::from(most) > 2.0 * mean || none > 0 {
            return Err(format!(
                "seed {seed}: phase {phase}: {mean:.1} released a second, up to {most} checkouts in one, {none} seconds without any"
            ));
        }
    }
    let low = mean_rate(&run, PHASE_MS + SETTLE_MS, 2 * PHASE_MS);
    if low > 30.0 {
        return Err(format!("seed {seed}: {low:.1}/s released against 30/s"));
    }
    let back = max_rate(&run, 2 * PHASE_MS, 2 * PHASE_MS + SETTLE_MS);
    if back < 60.0 {
        return Err(format!(
            "seed {seed}: at most {back:.1}/s in the 30 s after recovery"
        ));
    }
    Ok(())
}

/// The full bar behind the line (`settled_bar`, with the
/// utilisation: at least 85 % of the capacity at the target p99 found by
/// a fixed-rate sweep), on seeds 1-24: every one.
#[test]
#[ignore = "not met yet: 15 of 24 (issue 32)"]
fn behind_the_line_after_settling_on_seeds_1_to_24() {
    seeds_pass("behind the line", 1..=24, 24, line_bar);
}

/// The same on held-out seeds 25-48: at least 22 of 24.
#[test]
#[ignore = "not met yet: 13 of 24 (issue 32)"]
fn behind_the_line_after_settling_on_held_out_seeds() {
    seeds_pass("behind the line, held out", 25..=48, 22, line_bar);
}

/// `backend-degrades`' plant behind the line, reported.
#[test]
#[ignore = "a report"]
fn report_small_line() {
    for seed in [1, 2, 3, 42, 2026] {
        let run = simulate(seed, &SMALL_LINE);
        if std::env::var_os("SIM_TRACE").is_some() {
            trace(&run);
        }
        for phase in 0..3u64 {
            let (start, end) = (phase * PHASE_MS, (phase + 1) * PHASE_MS);
            let settled = start + SETTLE_MS;
            let steady = mean_rate(&run, settled, end);
            let swing = run
                .seconds
                .iter()
                .filter(|s| (settled..end).contains(&s.at_ms))
                .map(|s| (s.rate - steady).abs() / steady)
                .fold(0.0, f64::max);
            let after = settled_checkouts(&run, settled, end);
            let failed = after.iter().filter(|c| c.2).count() as f64 / after.len().max(1) as f64;
            eprintln!(
                "small line seed {seed} phase {phase}: mean {steady:.1}/s, swing ±{:.0} %, p99 {} ms, failed {:.3}",
                swing * 100.0,
                p99(after.iter().map(|c| c.1).collect()),
                failed
            );
        }
    }
}

/// One phase of `backend-degrades` as its verdict judges it (the load
/// harness's `follow.rs`): from 30 s after its start to its end, the whole
/// rate in force, its mean and largest swing, and the checkouts that ended
/// then: their p99 and the share that failed.
#[derive(Debug, Clone, Copy)]
struct Judged {
    mean: f64,
    swing: f64,
    p99_ms: u64,
    failed: f64,
    checkouts: usize,
}

fn bd_phases(run: &Run, plant: &Plant) -> [Judged; 3] {
    std::array::from_fn(|phase| {
        let (start, end) = (
            phase as u64 * plant.phase_ms,
            (phase as u64 + 1) * plant.phase_ms,
        );
        let settled = start + SETTLE_MS;
        let rates: Vec<f64> = run
            .seconds
            .iter()
            .filter(|s| (settled..end).contains(&s.at_ms))
            .map(|s| s.rate.round().max(1.0))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let swing = rates
            .iter()
            .map(|r| (r - mean).abs() / mean)
            .fold(0.0, f64::max);
        let after = settled_checkouts(run, settled, end);
        let failed = after.iter().filter(|c| c.2).count() as f64 / after.len().max(1) as f64;
        Judged {
            mean,
            swing,
            p99_ms: if after.is_empty() {
                0
            } else {
                p99(after.iter().map(|c| c.1).collect())
            },
            failed,
            checkouts: after.len(),
        }
    })
}

/// `backend-degrades`' bar on one run: each phase within ±15 %, p99 within
/// 1.5 × the target, failures under `max_error_ratio`, the mean at least
/// [`UTILISATION_MIN`] of the phase's capacity at the target p99
/// (`at_target`), and each phase's mean 10 % or more away from the one
/// before. The violations, if any.
fn bd_verdict(judged: &[Judged; 3], bounds: &Bounds, at_target: [u32; 3]) -> Vec<String> {
    let mut out = Vec::new();
    for (n, j) in judged.iter().enumerate() {
        if j.swing > 0.15 {
            out.push(format!("phase {n}: swing ±{:.0} %", j.swing * 100.0));
        }
        if j.p99_ms as f64 > 1.5 * f64::from(bounds.target_p99_ms) {
            out.push(format!("phase {n}: p99 {} ms", j.p99_ms));
        }
        if j.failed >= bounds.max_error_ratio {
            out.push(format!("phase {n}: {:.1} % failed", j.failed * 100.0));
        }
        if j.mean < UTILISATION_MIN * f64::from(at_target[n]) {
            out.push(format!(
                "phase {n}: {:.1}/s is {:.0} % of {}/s",
                j.mean,
                100.0 * j.mean / f64::from(at_target[n]),
                at_target[n]
            ));
        }
    }
    for n in 0..2 {
        if (judged[n + 1].mean - judged[n].mean).abs() < 0.1 * judged[n].mean {
            out.push(format!("phases {n}→{}: did not follow", n + 1));
        }
    }
    out
}

/// `backend-degrades` in the simulation on one seed: its verdict.
fn bd_check(seed: u64) -> Result<(), String> {
    let at_target = bd_capacities();
    let run = simulate(seed, &BD_LINE);
    if std::env::var_os("SIM_TRACE").is_some() {
        trace(&run);
    }
    let judged = bd_phases(&run, &BD_LINE);
    for (n, j) in judged.iter().enumerate() {
        eprintln!(
            "bd seed {seed} phase {n}: {:.1}/s ({:.0} % of {}/s) ±{:.0} %, p99 {} ms, {:.1} % of {} failed",
            j.mean,
            100.0 * j.mean / f64::from(at_target[n]),
            at_target[n],
            j.swing * 100.0,
            j.p99_ms,
            j.failed * 100.0,
            j.checkouts
        );
    }
    let verdict = bd_verdict(&judged, &BD_LINE.bounds, at_target);
    if verdict.is_empty() {
        Ok(())
    } else {
        Err(format!("bd seed {seed}: {verdict:?}"))
    }
}

/// `backend-degrades`' verdict in the simulation, seeds 1-24: every one.
#[test]
#[ignore = "not met yet: 17 of 24 (issue 32)"]
fn backend_degrades_on_seeds_1_to_24() {
    seeds_pass("backend-degrades", 1..=24, 24, bd_check);
}

/// The same on held-out seeds 25-48: at least 22 of 24.
#[test]
#[ignore = "not met yet: 16 of 24 (issue 32)"]
fn backend_degrades_on_held_out_seeds() {
    seeds_pass("backend-degrades, held out", 25..=48, 22, bd_check);
}

/// `backend-degrades` in the simulation, reported: `SIM_SEEDS=…` to pick
/// the seeds (a list or a range `a-b`).
#[test]
#[ignore = "a report"]
fn report_backend_degrades() {
    let seeds: Vec<u64> = match std::env::var("SIM_SEEDS") {
        Ok(r) if r.contains('-') => {
            let (a, b) = r.split_once('-').unwrap();
            (a.parse().unwrap()..=b.parse().unwrap()).collect()
        }
        Ok(list) => list.split(',').map(|s| s.trim().parse().unwrap()).collect(),
        _ => vec![1, 2, 3, 42, 2026],
    };
    let mut passed = 0;
    for &seed in &seeds {
        match bd_check(seed) {
            Ok(()) => passed += 1,
            Err(e) => eprintln!("{e}"),
        }
    }
    eprintln!("bd: {passed} of {} seeds pass", seeds.len());
}

/// The capacity at the target p99 of each plant behind the line, and the
/// fixed-rate steps around it (`SIM_SWEEP=bd` or `line`).
#[test]
#[ignore = "a report"]
fn report_capacity_sweep() {
    let plant = match std::env::var("SIM_SWEEP").as_deref() {
        Ok("line") => BIG_LINE,
        _ => BD_LINE,
    };
    let caps = capacities_at_target(&plant);
    for n in [0usize, 1] {
        for rate in caps[n].saturating_sub(2).max(1)..=caps[n] + 2 {
            for seed in SWEEP_SEEDS {
                let (p99_ms, failed, served) = fixed_step(&plant, n, rate, seed);
                eprintln!(
                    "phase {n} fixed {rate}/s seed {seed}: p99 {p99_ms} ms, {:.2} % failed, served {served:.1}/s",
                    failed * 100.0
                );
            }
        }
    }
}
