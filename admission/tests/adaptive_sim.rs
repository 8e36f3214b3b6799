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

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_admission::adaptive::{
    step, Bounds, CheckoutWindow, Decision, InFlight, Measurements, Outcome,
};

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
}

struct Run {
    seconds: Vec<Second>,
    /// (ended at, latency, failed) of every checkout.
    checkouts: Vec<(u64, u64, bool)>,
}

fn workers_at(now_ms: u64) -> usize {
    if (PHASE_MS..2 * PHASE_MS).contains(&now_ms) {
        3
    } else {
        10
    }
}

fn simulate(seed: u64) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut window = CheckoutWindow::new();
    let mut decision = Decision::start(&BOUNDS, 0);
    let mut tokens = 0.0f64;
    let mut active = 0u32;
    // Shoppers admitted, by when they start their checkout.
    let mut thinking: Vec<u64> = Vec::new();
    let mut queued: VecDeque<u64> = VecDeque::new();
    // (started at, done at, failed)
    let mut serving: Vec<(u64, u64, bool)> = Vec::new();
    let mut run = Run {
        seconds: Vec::new(),
        checkouts: Vec::new(),
    };
    let end = 3 * PHASE_MS;
    let mut now = 0u64;
    // Checkouts at the backend (queued or being served), as the gateway
    // counts its own: from the backend's events, not its capacity.
    let mut in_flight = InFlight::new(0);
    while now < end {
        now += TICK_MS;
        // Release at the rate in force, as the room's bucket does.
        tokens = (tokens + decision.per_second() as f64 * TICK_MS as f64 / 1000.0).min(1.0e3);
        while tokens >= 1.0 && active < MAX_ACTIVE {
            tokens -= 1.0;
            active += 1;
            thinking.push(now + rng.random_range(0..2000));
        }
        thinking.retain(|&at| {
            if at <= now {
                in_flight.start(now);
                queued.push_back(at);
                false
            } else {
                true
            }
        });
        // Checkouts that ended.
        serving.retain(|&(arrived, done, failed)| {
            if done <= now {
                let outcome = if failed {
                    Outcome::Failed
                } else {
                    Outcome::Served
                };
                window.record(now, (now - arrived) as u32, outcome);
                run.checkouts.push((now, now - arrived, failed));
                in_flight.end(now);
                active -= 1;
                false
            } else {
                true
            }
        });
        while queued.front().is_some_and(|&a| now - a > TIMEOUT_MS) {
            let arrived = queued.pop_front().unwrap();
            window.record(now, (now - arrived) as u32, Outcome::Failed);
            run.checkouts.push((now, now - arrived, true));
            in_flight.end(now);
            active -= 1;
        }
        while serving.len() < workers_at(now) {
            let Some(arrived) = queued.pop_front() else {
                break;
            };
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            let service = (-u.ln() * SERVICE_MEAN_MS) as u64;
            // Declined cards are served like any other checkout.
            let failed = rng.random_bool(0.003);
            serving.push((arrived, now + service, failed));
        }
        if now.is_multiple_of(1000) {
            let span = in_flight.take(now);
            let m = Measurements {
                in_flight: Some(span.average),
                started_per_second: span.started_per_second,
                ..window.measure(now, MAX_ACTIVE - active)
            };
            decision = step(&BOUNDS, &decision, &m, now);
            run.seconds.push(Second {
                at_ms: now,
                rate: decision.rate,
            });
        }
    }
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

fn p99(mut latencies: Vec<u64>) -> u64 {
    latencies.sort_unstable();
    latencies[(latencies.len() * 99).div_ceil(100) - 1]
}

fn check_bounds(seed: u64, run: &Run) {
    for s in &run.seconds {
        assert!(
            (f64::from(BOUNDS.min_per_second)..=f64::from(BOUNDS.max_per_second)).contains(&s.rate),
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
    for seed in [1, 2, 3, 42, 2026] {
        let run = simulate(seed);
        check_bounds(seed, &run);
        // Down: from 30 s after the drop, on average no more than the
        // backend's 30 per second.
        let low = mean_rate(&run, PHASE_MS + SETTLE_MS, 2 * PHASE_MS);
        assert!(low <= 30.0, "seed {seed}: {low:.1}/s released against 30/s");
        // Up: within 30 s of the capacity coming back, above 60 % of it.
        let back = run
            .seconds
            .iter()
            .filter(|s| (2 * PHASE_MS..2 * PHASE_MS + SETTLE_MS).contains(&s.at_ms))
            .map(|s| s.rate)
            .fold(0.0, f64::max);
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
    // SIM_SEEDS (with SIM_REPORT) reports on other seeds than the asserted ones.
    let seeds: Vec<u64> = match std::env::var("SIM_SEEDS") {
        Ok(list) if std::env::var_os("SIM_REPORT").is_some() => {
            list.split(',').map(|s| s.trim().parse().unwrap()).collect()
        }
        _ => vec![1, 2, 3, 42, 2026],
    };
    for seed in seeds {
        let run = simulate(seed);
        if std::env::var_os("SIM_TRACE").is_some() {
            for s in run.seconds.iter().step_by(3) {
                eprint!("{}:{:.0} ", s.at_ms / 1000, s.rate);
            }
            eprintln!();
        }
        for (phase, capacity) in [(0u64, 100.0), (1, 30.0), (2, 100.0)] {
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
            let in_phase = || {
                run.seconds
                    .iter()
                    .filter(|s| (settled..end).contains(&s.at_ms))
            };
            let low = in_phase().min_by(|a, b| a.rate.total_cmp(&b.rate)).unwrap();
            let high = in_phase().max_by(|a, b| a.rate.total_cmp(&b.rate)).unwrap();
            eprintln!(
                "seed {seed} phase {phase}: mean {steady:.1}/s, swing ±{:.0} % ({:.0} at {} s, {:.0} at {} s), p99 {} ms",
                swing * 100.0,
                low.rate,
                low.at_ms / 1000,
                high.rate,
                high.at_ms / 1000,
                p99(after.iter().map(|c| c.1).collect())
            );
            if std::env::var_os("SIM_REPORT").is_some() {
                continue;
            }
            assert!(
                steady <= capacity && steady >= 0.6 * capacity,
                "seed {seed}: phase {phase} steady rate {steady:.1} for capacity {capacity}"
            );
            for s in run
                .seconds
                .iter()
                .filter(|s| (settled..end).contains(&s.at_ms))
            {
                assert!(
                    (s.rate - steady).abs() <= 0.15 * steady,
                    "seed {seed}: phase {phase} rate {:.1} at {} ms is more than 15 % from {steady:.1}",
                    s.rate,
                    s.at_ms
                );
            }
            let after = settled_checkouts(&run, settled, end);
            let latency = p99(after.iter().map(|c| c.1).collect());
            assert!(
                latency as f64 <= 1.5 * f64::from(BOUNDS.target_p99_ms),
                "seed {seed}: phase {phase} p99 {latency} ms after settling"
            );
        }
    }
}
