use super::*;

const B: Bounds = Bounds {
    target_p99_ms: 800,
    max_error_ratio: 0.02,
    min_per_second: 5,
    max_per_second: 500,
};

fn at(rate: f64) -> Decision {
    Decision {
        rate,
        reason: Reason::Steady,
        at_ms: 0,
        cut_at_ms: None,
    }
}

fn m(p99_ms: u32, checkouts: u32, failures: u32, served: f64, free: u32) -> Measurements {
    Measurements {
        checkouts,
        p99_ms: Some(p99_ms),
        backend_failures: failures,
        served_per_second: served,
        free_slots: free,
    }
}

#[test]
fn starts_at_the_geometric_middle_of_the_bounds() {
    assert_eq!(B.start_per_second(), 50.0);
    assert_eq!(Decision::start(&B, 7).per_second(), 50);
}

#[test]
fn slow_checkouts_cut_the_rate_with_reason_latency() {
    let d = step(&B, &at(100.0), &m(1600, 300, 0, 100.0, 100), 1000);
    assert_eq!(d.reason, Reason::Latency);
    // gradient 0.5, smoothing 0.25: 100 × (0.75 + 0.25 × 0.5)
    assert!((d.rate - 87.5).abs() < 1e-9, "{}", d.rate);
    assert_eq!(d.cut_at_ms, Some(1000));
}

#[test]
fn a_cut_is_not_repeated_until_the_window_has_seen_it() {
    let first = step(&B, &at(100.0), &m(1600, 300, 0, 100.0, 100), 1000);
    let held = step(&B, &first, &m(1600, 300, 0, 100.0, 100), 2000);
    assert_eq!(held.rate, first.rate);
    let again = step(&B, &first, &m(1600, 300, 0, 100.0, 100), 1000 + COOLDOWN_MS);
    assert!(again.rate < first.rate);
}

#[test]
fn a_cut_starts_from_what_the_backend_served() {
    // Released 100/s, served 40/s: the cut applies to 40.
    let d = step(&B, &at(100.0), &m(1600, 120, 0, 40.0, 100), 1000);
    assert!(
        (d.rate - (75.0 + 0.25 * 40.0 * 0.5)).abs() < 1e-9,
        "{}",
        d.rate
    );
}

#[test]
fn fast_checkouts_raise_the_rate_but_not_far_above_what_was_served() {
    let d = step(&B, &at(100.0), &m(200, 300, 0, 100.0, 100), 1000);
    assert_eq!(d.reason, Reason::Latency);
    assert!(
        (d.rate - 115.0).abs() < 1e-9,
        "gradient 2 capped at 1.15 × served: {}",
        d.rate
    );
    let d = step(&B, &at(100.0), &m(200, 300, 0, 200.0, 100), 1000);
    assert!(
        (d.rate - 125.0).abs() < 1e-9,
        "gradient 2, smoothed: {}",
        d.rate
    );
}

#[test]
fn backend_errors_cut_even_when_fast() {
    let d = step(&B, &at(100.0), &m(200, 100, 8, 92.0, 100), 1000);
    assert_eq!(d.reason, Reason::Errors);
    // error gradient 0.02 / 0.08 = 0.25, floored at 0.5
    assert!(d.rate < 100.0);
    let d = step(&B, &at(100.0), &m(200, 100, 2, 98.0, 100), 1000);
    assert_ne!(d.reason, Reason::Errors, "at max_error_ratio is allowed");
}

#[test]
fn no_free_slot_stops_growth() {
    let d = step(&B, &at(100.0), &m(200, 300, 0, 100.0, 0), 1000);
    assert_eq!((d.rate, d.reason), (100.0, Reason::Slots));
    // but does not stop a cut
    let d = step(&B, &at(100.0), &m(1600, 300, 0, 100.0, 0), 1000);
    assert_eq!(d.reason, Reason::Latency);
}

#[test]
fn the_bounds_hold() {
    let d = step(&B, &at(490.0), &m(100, 3000, 0, 1000.0, 100), 1000);
    assert_eq!((d.rate, d.reason), (500.0, Reason::Bound));
    let d = step(&B, &at(5.5), &m(10_000, 30, 0, 5.0, 100), 1000);
    assert_eq!((d.rate, d.reason), (5.0, Reason::Bound));
    // A rate from before a reload to narrower bounds comes back in.
    let d = step(&B, &at(900.0), &m(800, 30, 0, 5.0, 100), 1000);
    assert_eq!((d.rate, d.reason), (500.0, Reason::Bound));
    let d = step(&B, &at(f64::NAN), &m(800, 30, 0, 5.0, 100), 1000);
    assert!((B.min_per_second as f64..=B.max_per_second as f64).contains(&d.rate));
}

#[test]
fn too_few_checkouts_or_on_target_is_steady() {
    let d = step(&B, &at(100.0), &m(5000, SAMPLES_MIN - 1, 0, 1.0, 100), 1000);
    assert_eq!((d.rate, d.reason), (100.0, Reason::Steady));
    let d = step(&B, &at(100.0), &m(800, 300, 0, 100.0, 100), 1000);
    assert_eq!((d.rate, d.reason), (100.0, Reason::Steady));
}

#[test]
fn on_target_it_does_not_move() {
    // A backend whose p99 is the target at 80/s: the rate stays there.
    let mut d = at(80.0);
    for s in 1..=120u64 {
        d = step(&B, &d, &m(800, 240, 0, 80.0, 100), s * 1000);
        assert_eq!(d.rate, 80.0);
    }
}

#[test]
fn a_rate_at_its_floor_grows_by_at_least_one_per_second_while_fast() {
    // 2/s released, 2/s served, p99 far below the target: the served-rate
    // bound alone would keep it at 2.3, which rounds back to 2.
    let mut d = at(5.0);
    for s in 1..=10u64 {
        let served = d.rate.round();
        d = step(&B, &d, &m(200, 30, 0, served, 100), s * 1000);
    }
    assert!(d.per_second() >= 10, "{}", d.rate);
}

#[test]
fn one_failure_among_few_checkouts_is_not_an_error_ratio() {
    // 1 of 6 failed: 17 %, but one failure says little; the p99 decides.
    let d = step(&B, &at(5.0), &m(200, 6, 1, 5.0, 100), 1000);
    assert_eq!(d.reason, Reason::Latency);
    assert!(d.rate > 5.0, "{}", d.rate);
    let d = step(&B, &at(20.0), &m(200, 6, 2, 4.0, 100), 1000);
    assert_eq!(d.reason, Reason::Errors);
}
