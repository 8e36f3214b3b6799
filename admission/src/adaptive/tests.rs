use super::law::*;
use super::*;

const B: Bounds = Bounds {
    target_p99_ms: 800,
    max_error_ratio: 0.02,
    min_per_second: 5,
    max_per_second: 500,
};

fn at(rate: f64, phase: Phase) -> Decision {
    Decision {
        rate,
        phase,
        ..Decision::start(&B, 0)
    }
}

/// A window of `checkouts` at `mean_ms` (p99 at 4 × the mean, as for
/// exponential service), served at `served`/s, with `in_flight` running
/// and `started`/s arriving.
fn m(checkouts: u32, mean_ms: f64, served: f64, in_flight: f64, started: f64) -> Measurements {
    Measurements {
        checkouts,
        p99_ms: Some((mean_ms * 4.0) as u32),
        mean_ms: Some(mean_ms),
        backend_failures: 0,
        served_per_second: served,
        served_last_s: served,
        long_mean_ms: Some(mean_ms),
        long_p99_ms: Some((mean_ms * 4.0) as u32),
        slow_room_mean_ms: None,
        in_flight: Some(in_flight),
        started_per_second: Some(started),
        free_slots: 100,
    }
}

/// A backend at 100 ms a checkout with no queue: in flight = rate × 0.1.
fn healthy(rate: f64) -> Measurements {
    m(300, 100.0, rate, rate * 0.1, rate)
}

#[test]
fn starts_at_the_geometric_middle_of_the_bounds_in_startup() {
    assert_eq!(B.start_per_second(), 50.0);
    let d = Decision::start(&B, 7);
    assert_eq!(
        (d.per_second(), d.phase, d.reason),
        (50, Phase::Startup, Reason::Steady)
    );
}

#[test]
fn startup_grows_while_no_queue_builds() {
    let mut d = at(50.0, Phase::Startup);
    for s in 1..=3u64 {
        let before = d.rate;
        d = step(&B, &d, &healthy(before), s * 1000);
        assert_eq!(d.phase, Phase::Startup);
        assert_eq!(d.reason, Reason::Latency);
        assert!(
            (d.rate - before * (1.0 + STARTUP_GROWTH)).abs() < 1e-9,
            "{}",
            d.rate
        );
    }
    assert_eq!(d.base_ms, Some(100.0), "the no-queue latency is learnt");
}

#[test]
fn startup_stays_within_reach_of_what_was_served() {
    // Released 50/s, served 30/s, no queue: up to 1.5 × 30 = 45 at most,
    // so no growth (and no cut either).
    let d = step(
        &B,
        &at(50.0, Phase::Startup),
        &m(300, 100.0, 30.0, 3.0, 30.0),
        1000,
    );
    assert_eq!(d.rate, 50.0);
    let d = step(
        &B,
        &at(50.0, Phase::Startup),
        &m(300, 100.0, 36.0, 3.6, 36.0),
        1000,
    );
    assert!((d.rate - 36.0 * STARTUP_SERVED).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn a_queue_at_the_backend_ends_startup_and_drain_measures_the_capacity() {
    let mut d = at(120.0, Phase::Startup);
    d.base_ms = Some(100.0);
    // 120/s released, 100/s served: 30 in flight where 12 would do.
    d = step(&B, &d, &m(300, 250.0, 100.0, 30.0, 120.0), 1000);
    assert_eq!((d.phase, d.reason), (Phase::Drain, Reason::Latency));
    assert!(d.rate < 100.0, "below what is served, to drain: {}", d.rate);
    // Still saturated: the capacity is what it serves meanwhile.
    for s in 2..=4u64 {
        d = step(&B, &d, &m(300, 250.0, 98.0, 25.0, d.rate), s * 1000);
        assert_eq!(d.phase, Phase::Drain);
    }
    assert!(
        (d.capacity.unwrap() - 98.0).abs() < 1e-9,
        "{:?}",
        d.capacity
    );
    // Drained: cruise at a share of it.
    d = step(&B, &d, &healthy(80.0), 5000);
    assert_eq!(d.phase, Phase::Cruise);
    assert!((d.rate - CRUISE_GAIN * 98.0).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn cruise_holds_through_noise_below_saturation() {
    let mut d = at(85.0, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.capacity = Some(100.0);
    d.cruised = true;
    for s in 1..=120u64 {
        // Queues of up to 12 come and go at 85 % load: no cut.
        let queue = (s % 7) as f64 * 2.0;
        let x = m(255, 100.0 + queue * 10.0, 85.0, 8.5 + queue, 85.0);
        d = step(&B, &d, &x, s * 1000);
        assert_eq!((d.rate, d.phase), (85.0, Phase::Cruise), "at {s} s");
        assert_eq!(d.reason, Reason::Steady);
    }
}

#[test]
fn cruise_drains_when_the_backend_slows_down() {
    let mut d = at(85.0, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.cruised = true;
    // Capacity fell to 30/s: served 30, a queue growing by 55 a second.
    let mut s = 0u64;
    while d.phase == Phase::Cruise {
        s += 1;
        assert!(s <= SATURATED_STEPS as u64, "still cruising after {s} s");
        d = step(
            &B,
            &d,
            &m(200, 900.0, 30.0, 55.0 * s as f64, 85.0),
            s * 1000,
        );
    }
    assert_eq!(d.phase, Phase::Drain);
    assert!(d.rate <= 30.0, "{}", d.rate);
}

#[test]
fn a_recovery_returns_to_the_highest_capacity() {
    let mut d = at(25.0, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.capacity = Some(30.0);
    d.capacity_high = Some(100.0);
    d.cruised = true;
    // Cruising at 25/s against 30/s: 250 ms on average, a queue of 2.
    for s in 1..=20u64 {
        d = step(&B, &d, &m(75, 250.0, 25.0, 6.25, 25.0), s * 1000);
    }
    assert_eq!(d.phase, Phase::Cruise);
    // The capacity came back: 100 ms, no queue.
    let mut s = 20u64;
    while d.phase == Phase::Cruise {
        s += 1;
        assert!(s <= 20 + 20, "no recovery seen");
        d = step(&B, &d, &m(75, 100.0, 25.0, 2.5, 25.0), s * 1000);
    }
    assert_eq!(d.phase, Phase::Startup);
    d = step(&B, &d, &healthy(25.0), (s + 1) * 1000);
    assert!((d.rate - CRUISE_GAIN * 100.0).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn a_false_alarm_after_a_slowdown_resumes_the_slow_cruise_not_the_highest_capacity() {
    // Cruising at 17/s on a capacity of 20/s measured after the backend
    // slowed down from 100/s.
    let mut d = at(17.0, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.capacity = Some(20.0);
    d.capacity_high = Some(100.0);
    d.cruised = true;
    d.cruise_steps = 30;
    // A window p99 above the ceiling with no queue (slow checkouts of the
    // slowdown still in a small window): DRAIN...
    d = step(&B, &d, &m(50, 1000.0, 17.0, 1.7, 17.0), 1000);
    assert_eq!(d.phase, Phase::Drain);
    // ...that never sees a queue: a false alarm, back to STARTUP.
    d = step(&B, &d, &healthy(17.0), 2000);
    assert_eq!((d.phase, d.rate), (Phase::Startup, 17.0));
    // Nothing says the 100/s came back: STARTUP goes straight back to the
    // cruise it interrupted (0.85 × 20/s), not to 0.85 × 100/s.
    d = step(&B, &d, &healthy(17.0), 3000);
    assert_eq!(d.phase, Phase::Cruise);
    assert_eq!(d.capacity, Some(20.0));
    assert!((d.rate - CRUISE_GAIN * 20.0).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn startup_ends_when_the_p99_passes_the_target_and_holds_between() {
    // No queue count at all, a p99 above the target: DRAIN.
    let mut x = healthy(50.0);
    x.p99_ms = Some(900);
    let d = step(&B, &at(50.0, Phase::Startup), &x, 1000);
    assert_eq!(d.phase, Phase::Drain);
    // Between STARTUP_GROW_BELOW × the target and the target, rising
    // (the 10 s p99 at 400 ms): holds.
    x.p99_ms = Some(700);
    let d = step(&B, &at(50.0, Phase::Startup), &x, 1000);
    assert_eq!((d.phase, d.rate), (Phase::Startup, 50.0));
    // The same p99 not rising (the 10 s one at 680 ms) is the backend's
    // own spread, a no-queue p99 near the gate: grows.
    x.long_p99_ms = Some(680);
    let d = step(&B, &at(50.0, Phase::Startup), &x, 1000);
    assert_eq!(d.phase, Phase::Startup);
    assert!(
        (d.rate - 50.0 * (1.0 + STARTUP_GROWTH)).abs() < 1e-9,
        "{}",
        d.rate
    );
}

#[test]
fn a_round_of_checkouts_served_well_above_the_cruise_capacity_ends_cruise() {
    // Cruising at 5/s on a capacity of 6/s measured while the backend was
    // slow, with a cruise latency learnt after it had recovered (so no
    // latency drop will ever show): shoppers who learn of their pass at
    // their next poll check out in a round, which the backend serves at
    // 20/s.
    let mut d = at(5.1, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.capacity = Some(6.0);
    d.capacity_high = Some(6.0);
    d.cruised = true;
    d.cruise_steps = 30;
    d.cruise_latency_ms = Some(100.0);
    let round = m(60, 100.0, 20.0, 2.0, 20.0);
    // One such window may be noise: still cruising.
    d = step(&B, &d, &round, 1000);
    assert_eq!(
        (d.phase, d.rate, d.outserved_steps),
        (Phase::Cruise, 5.1, 1)
    );
    // Between rounds nothing is served: the count starts again.
    d = step(&B, &d, &m(20, 100.0, 2.0, 0.2, 0.0), 2000);
    assert_eq!((d.phase, d.outserved_steps), (Phase::Cruise, 0));
    for s in 3..=4u64 {
        d = step(&B, &d, &round, s * 1000);
    }
    assert_eq!(d.phase, Phase::Startup);
    assert_eq!((d.capacity, d.capacity_high), (Some(20.0), Some(20.0)));
    // STARTUP returns to CRUISE_GAIN × the new highest capacity.
    d = step(&B, &d, &round, 5000);
    assert!((d.rate - CRUISE_GAIN * 20.0).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn backend_errors_drain_even_when_fast() {
    let mut x = healthy(100.0);
    x.backend_failures = 20; // 20 of 300: 6.7 %, above 2 % (6) by 2 σ.
    x.served_per_second = 280.0 / 3.0;
    let d = step(&B, &at(100.0, Phase::Cruise), &x, 1000);
    assert_eq!((d.phase, d.reason), (Phase::Drain, Reason::Errors));
    assert!((d.rate - 280.0 / 3.0).abs() < 1e-9, "{}", d.rate);
    // 2 of 6 is a third, but two failures say little.
    let mut x = m(6, 100.0, 5.0, 0.5, 5.0);
    x.backend_failures = 2;
    let d = step(&B, &at(20.0, Phase::Startup), &x, 1000);
    assert_ne!(d.reason, Reason::Errors);
}

#[test]
fn a_p99_far_above_the_target_drains_without_a_queue_count() {
    // A caller that counts no checkouts in flight, a p99 of 4 × 900 ms:
    // the rate comes down to what is served.
    let mut x = m(300, 900.0, 60.0, 0.0, 60.0);
    x.in_flight = None;
    x.started_per_second = None;
    let d = step(&B, &at(100.0, Phase::Startup), &x, 1000);
    assert_eq!(
        (d.phase, d.reason, d.rate),
        (Phase::Drain, Reason::Latency, 60.0)
    );
}

#[test]
fn no_free_slot_stops_growth() {
    let mut x = healthy(100.0);
    x.free_slots = 0;
    let d = step(&B, &at(100.0, Phase::Startup), &x, 1000);
    assert_eq!((d.rate, d.reason), (100.0, Reason::Slots));
}

#[test]
fn the_bounds_hold() {
    let d = step(&B, &at(490.0, Phase::Startup), &healthy(490.0), 1000);
    assert_eq!((d.rate, d.reason), (500.0, Reason::Bound));
    // A rate from before a reload to narrower bounds comes back in.
    let d = step(&B, &at(900.0, Phase::Cruise), &healthy(900.0), 1000);
    assert_eq!((d.rate, d.reason), (500.0, Reason::Bound));
    let d = step(&B, &at(f64::NAN, Phase::Cruise), &healthy(50.0), 1000);
    assert!((B.min_per_second as f64..=B.max_per_second as f64).contains(&d.rate));
    // Draining never goes under the floor.
    let mut d = at(6.0, Phase::Startup);
    d.base_ms = Some(100.0);
    let d = step(&B, &d, &m(300, 900.0, 1.0, 50.0, 6.0), 1000);
    assert_eq!((d.rate, d.reason), (5.0, Reason::Bound));
}

#[test]
fn too_few_checkouts_hold_everything() {
    let before = at(100.0, Phase::Startup);
    let d = step(
        &B,
        &before,
        &m(SAMPLES_MIN - 1, 5000.0, 1.0, 90.0, 1.0),
        1000,
    );
    assert_eq!((d.rate, d.reason), (100.0, Reason::Steady));
    assert_eq!(
        Decision {
            at_ms: 0,
            reason: Reason::Steady,
            ..d
        },
        before
    );
}

#[test]
fn a_resumed_cruise_is_judged_as_startup_for_its_first_steps() {
    // Resumed on a capacity of 100/s (a recovery), released at 85/s: a
    // queue of 6 at the backend, over QUEUE_STARTUP but under
    // QUEUE_SATURATED, with the backend serving only 60/s.
    let mut d = at(85.0, Phase::Cruise);
    d.base_ms = Some(100.0);
    d.capacity = Some(100.0);
    d.capacity_high = Some(100.0);
    d.cruised = true;
    d.resumed = true;
    let queued = m(300, 100.0, 60.0, 85.0 * 0.1 + 6.0, 85.0);
    // Within PROBE_STEPS: one such step drains.
    d.cruise_steps = PROBE_STEPS - 1;
    assert_eq!(step(&B, &d, &queued, 1000).phase, Phase::Drain);
    // After them, as any cruise: it takes SATURATED_STEPS over
    // QUEUE_SATURATED, and 6 is not.
    d.cruise_steps = PROBE_STEPS;
    assert_eq!(step(&B, &d, &queued, 1000).phase, Phase::Cruise);
    // A cruise on a capacity it measured just now is never probed.
    d.resumed = false;
    d.cruise_steps = 0;
    assert_eq!(step(&B, &d, &queued, 1000).phase, Phase::Cruise);
}

#[test]
fn a_false_alarm_waits_for_the_window_p99_to_clear() {
    // Draining after a cruise, no queue seen, but the window still holds
    // checkouts slower than the ceiling (3 × 800 ms).
    let mut d = at(17.0, Phase::Drain);
    d.base_ms = Some(100.0);
    d.capacity = Some(20.0);
    d.cruised = true;
    let mut x = healthy(17.0);
    x.p99_ms = Some(3_000);
    let held = step(&B, &d, &x, 1000);
    assert_eq!((held.phase, held.rate), (Phase::Drain, 17.0));
    // Once it has rolled past: the false alarm, back to STARTUP.
    let d = step(&B, &held, &healthy(17.0), 2000);
    assert_eq!((d.phase, d.rate), (Phase::Startup, 17.0));
}

#[test]
fn a_cruise_with_room_under_the_target_probes_a_step_higher_every_ten_steps() {
    // Cruising at 17/s on 20/s, the p99 at 200 ms (a quarter of the
    // target), no queue, no failure.
    let mut d = at(17.0, Phase::Cruise);
    d.base_ms = Some(50.0);
    d.capacity = Some(20.0);
    d.capacity_high = Some(20.0);
    d.cruised = true;
    let calm = m(60, 50.0, 17.0, 17.0 * 0.05, 17.0);
    for s in 1..PROBE_EVERY as u64 {
        d = step(&B, &d, &calm, s * 1000);
        assert_eq!((d.rate, d.phase), (17.0, Phase::Cruise), "at {s} s");
    }
    d = step(&B, &d, &calm, u64::from(PROBE_EVERY) * 1000);
    // 5 % more capacity is less than one more release a second: + 1/s.
    let c = 20.0 + 1.0 / CRUISE_GAIN;
    assert_eq!(d.capacity, Some(c));
    assert!((d.rate - 18.0).abs() < 1e-9, "{}", d.rate);
    assert_eq!(
        (d.phase, d.reason, d.capacity_high),
        (Phase::Cruise, Reason::Latency, Some(20.0)),
        "a probe is not a measured capacity: a recovery returns to the highest measured"
    );
    // No room (p99 at 0.6 × the target), or a failure: it holds.
    for x in [m(60, 120.0, 18.0, 0.9, 18.0), {
        let mut x = calm;
        x.backend_failures = 1;
        x
    }] {
        let mut e = d;
        for s in 1..=PROBE_EVERY as u64 * 2 {
            e = step(&B, &e, &x, 20_000 + s * 1000);
        }
        assert_eq!((e.rate, e.capacity), (d.rate, Some(c)), "{x:?}");
    }
}

#[test]
fn a_slow_room_takes_an_early_base_at_its_opening_and_sees_the_queue() {
    // 30 checkouts a window (10/s, under BASE_SAMPLES and no slow-room
    // mean yet) at 60 ms with no queue: the base is the window's mean
    // from the EARLY_BASE_STEPSth step.
    let mut d = at(10.0, Phase::Startup);
    let calm = m(30, 60.0, 10.0, 0.6, 10.0);
    for s in 1..EARLY_BASE_STEPS as u64 {
        d = step(&B, &d, &calm, s * 1000);
        assert_eq!(d.base_ms, None, "at {s} s");
    }
    d = step(&B, &d, &calm, u64::from(EARLY_BASE_STEPS) * 1000);
    assert_eq!(d.base_ms, Some(60.0));
    // Then a queue of 6 with the backend behind: STARTUP drains.
    let before = d.rate;
    let queued = m(30, 200.0, 10.0, before * 0.06 + 6.0, before);
    d = step(&B, &d, &queued, 10_000);
    assert_eq!(d.phase, Phase::Drain);
    // A fast room (windows of BASE_SAMPLES / 2 and more) waits for the
    // usual learning.
    let mut d = at(50.0, Phase::Startup);
    for s in 1..=10u64 {
        d = step(&B, &d, &m(150, 60.0, 50.0, 3.0, 50.0), s * 1000);
    }
    assert_eq!(d.base_ms, None);
}

#[test]
fn out_served_after_a_collapse_resumes_what_was_served_not_the_highest() {
    // A drain during a collapse measured next to nothing: cruising at the
    // floor on 2.35/s, the highest capacity a healthy phase's 23/s; the
    // backlog cleared, the backend serves 6/s.
    let mut d = at(5.0, Phase::Cruise);
    d.base_ms = Some(160.0);
    d.capacity = Some(2.35);
    d.capacity_high = Some(23.0);
    d.cruised = true;
    d.cruise_steps = OUTSERVED_FROM_STEP;
    let served = m(30, 300.0, 6.0, 1.0, 6.0);
    for s in 1..=OUTSERVED_STEPS as u64 {
        d = step(&B, &d, &served, s * 1000);
    }
    assert_eq!((d.phase, d.resume), (Phase::Startup, Some(6.0)));
    // Straight back to a cruise on it, not 4 × towards 0.85 × 23/s.
    d = step(&B, &d, &served, 10_000);
    assert_eq!(d.phase, Phase::Cruise);
    assert!((d.rate - CRUISE_GAIN * 6.0).abs() < 1e-9, "{}", d.rate);
}

#[test]
fn a_drain_that_ends_serving_more_than_it_measured_cruises_on_what_it_serves() {
    // A collapse: while the queue was over QUEUE_CAPACITY the backend's
    // calls timed out and it served next to nothing (the mean of those
    // seconds: 1/s); once drained it serves 6/s.
    let mut d = at(10.0, Phase::Drain);
    d.base_ms = Some(160.0);
    d.cruised = true;
    d.capacity = Some(1.0);
    d.capacity_samples = 5;
    d.capacity_sum = 5.0;
    let drained = m(30, 300.0, 6.0, 6.0 * 0.16, 6.0);
    d = step(&B, &d, &drained, 1000);
    assert_eq!((d.phase, d.capacity), (Phase::Cruise, Some(6.0)));
    assert!((d.rate - CRUISE_GAIN * 6.0).abs() < 1e-9, "{}", d.rate);
}
