//! Did the release rate follow the backend? The run is cut into phases at
//! each change of the backend (a `paysim_faults` fault); each phase is
//! judged from `settle_s` after its start to its end, on what the harness
//! saw: the room's rate in force (`/admin/state` every 500 ms), admitted
//! shoppers' checkout latencies and failed checkouts. The figures of every
//! phase go into `summary.json` for fixed and adaptive runs alike; the bar
//! (`[adaptive_bar]`) is checked only when the room is adaptive.

use serde::Serialize;

use super::books::Check;
use super::record::{quantile, Inner};
use super::scenario::Scenario;

/// What one phase looked like once settled.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Phase {
    pub from_s: f64,
    pub to_s: f64,
    /// Judged from here (`from_s + settle_s`, at most `to_s`).
    pub settled_s: f64,
    /// Mean and extremes of the release rate in force while settled.
    pub rate_mean: f64,
    pub rate_min: f64,
    pub rate_max: f64,
    /// Largest |rate − mean| / mean while settled.
    pub rate_swing: f64,
    pub checkouts: u64,
    pub checkout_p99_ms: Option<u32>,
    pub checkouts_failed: u64,
    pub failed_ratio: f64,
    /// The backend's capacity at the target in this phase (checkouts per
    /// second), when a sweep measured it (`phase_capacity`).
    pub capacity_per_s: Option<f64>,
}

/// Sets each phase's capacity at the target, in order.
pub fn set_capacities(phases: &mut [Phase], capacities: &[f64]) {
    for (p, &c) in phases.iter_mut().zip(capacities) {
        p.capacity_per_s = Some(c);
    }
}

/// The phases of a run that ended at `end_s`.
pub fn phases(scenario: &Scenario, rec: &Inner, end_s: f64) -> Vec<Phase> {
    let mut edges = vec![0.0];
    edges.extend(scenario.phase_starts_s().into_iter().filter(|&t| t < end_s));
    edges.push(end_s);
    edges
        .windows(2)
        .map(|w| phase(rec, w[0], w[1], scenario.adaptive_bar.settle_s))
        .collect()
}

fn phase(rec: &Inner, from_s: f64, to_s: f64, settle_s: f64) -> Phase {
    let settled_s = (from_s + settle_s).min(to_s);
    let rates: Vec<f64> = rec
        .samples
        .iter()
        .filter(|x| x.up && x.t_s >= settled_s && x.t_s < to_s)
        .map(|x| x.release_per_second)
        .collect();
    let rate_mean = if rates.is_empty() {
        0.0
    } else {
        rates.iter().sum::<f64>() / rates.len() as f64
    };
    let rate_swing = rates
        .iter()
        .map(|r| (r - rate_mean).abs() / rate_mean.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max);
    // Whole seconds that lie inside the settled part, of those recorded:
    // the per-second lists end at the last second a checkout ended in,
    // which may be before the phase does (slicing past it would drop the
    // whole phase's checkouts).
    let seconds = settled_s.ceil() as usize..to_s.floor() as usize;
    let recorded = |len: usize| seconds.start.min(len)..seconds.end.min(len);
    let mut latencies: Vec<u32> = rec
        .checkout_ms
        .get(recorded(rec.checkout_ms.len()))
        .unwrap_or_default()
        .iter()
        .flatten()
        .copied()
        .collect();
    latencies.sort_unstable();
    let (calls, failed) = rec
        .checkout_calls
        .get(recorded(rec.checkout_calls.len()))
        .unwrap_or_default()
        .iter()
        .fold((0u64, 0u64), |(c, f), &(n, x)| {
            (c + u64::from(n), f + u64::from(x))
        });
    Phase {
        from_s,
        to_s,
        settled_s,
        rate_mean,
        rate_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
        rate_max: rates.iter().copied().fold(0.0, f64::max),
        rate_swing,
        checkouts: calls,
        checkout_p99_ms: quantile(&latencies, 0.99),
        checkouts_failed: failed,
        failed_ratio: if calls == 0 {
            0.0
        } else {
            failed as f64 / calls as f64
        },
        capacity_per_s: None,
    }
}

/// The bar of an adaptive room; `None` for a fixed one.
pub fn check(scenario: &Scenario, phases: &[Phase]) -> Option<Check> {
    let a = scenario.gateway.adaptive.as_ref()?;
    let bar = &scenario.adaptive_bar;
    let p99_max = bar.p99_factor_max * f64::from(a.target_p99_ms);
    let (lo, hi) = (f64::from(a.min_per_second), f64::from(a.max_per_second));
    let mut violations = Vec::new();
    for (n, p) in phases.iter().enumerate() {
        let at = format!("phase {n} ({:.0}–{:.0} s)", p.settled_s, p.to_s);
        if p.rate_mean <= 0.0 {
            violations.push(format!("{at}: no sample of the release rate"));
            continue;
        }
        if p.rate_min < lo || p.rate_max > hi {
            violations.push(format!(
                "{at}: the rate left its bounds [{lo}, {hi}]: {:.0}–{:.0}/s",
                p.rate_min, p.rate_max
            ));
        }
        if p.rate_swing > bar.swing_max {
            violations.push(format!(
                "{at}: the rate swung ±{:.0} % around {:.1}/s (at most ±{:.0} %)",
                p.rate_swing * 100.0,
                p.rate_mean,
                bar.swing_max * 100.0
            ));
        }
        match p.checkout_p99_ms {
            Some(ms) if f64::from(ms) > p99_max => {
                violations.push(format!("{at}: checkout p99 {ms} ms above {p99_max:.0} ms"))
            }
            _ => {}
        }
        if let Some(u) = bar.utilisation_min {
            match p.capacity_per_s {
                Some(c) if p.rate_mean < u * c => violations.push(format!(
                    "{at}: the rate used {:.0} % of the capacity at the target ({:.1}/s of {c:.1}/s; at least {:.0} %)",
                    100.0 * p.rate_mean / c,
                    p.rate_mean,
                    u * 100.0
                )),
                Some(_) => {}
                None => violations.push(format!(
                    "{at}: no capacity measured to hold the rate to (`utilisation_min` needs the sweep)"
                )),
            }
        }
        if p.failed_ratio >= a.max_error_ratio {
            violations.push(format!(
                "{at}: {} of {} checkouts failed ({:.2} %, at most {:.2} %)",
                p.checkouts_failed,
                p.checkouts,
                p.failed_ratio * 100.0,
                a.max_error_ratio * 100.0
            ));
        }
    }
    // Followed: the rate moved with each change of the backend.
    for (n, w) in phases.windows(2).enumerate() {
        if w[0].rate_mean > 0.0
            && w[1].rate_mean > 0.0
            && (w[1].rate_mean - w[0].rate_mean).abs() < 0.1 * w[0].rate_mean
        {
            violations.push(format!(
                "phases {n}→{}: the rate did not follow the backend ({:.1}/s, then {:.1}/s)",
                n + 1,
                w[0].rate_mean,
                w[1].rate_mean
            ));
        }
    }
    let detail = phases
        .iter()
        .map(|p| {
            format!(
                "{:.0}–{:.0} s: {:.1}/s{} ±{:.0} %, p99 {} ms, {} of {} failed",
                p.settled_s,
                p.to_s,
                p.rate_mean,
                p.capacity_per_s.map_or(String::new(), |c| format!(
                    " ({:.0} % of {c:.1}/s)",
                    100.0 * p.rate_mean / c
                )),
                p.rate_swing * 100.0,
                p.checkout_p99_ms.map_or("–".into(), |v| v.to_string()),
                p.checkouts_failed,
                p.checkouts
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(Check::new(
        "adaptive release followed the backend",
        violations,
        detail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::record::Sample;

    const SCENARIO: &str = r#"
name = "t"
[limits]
max_shoppers = 10
max_duration_s = 90
[gateway]
release_per_second = 50
max_active = 100
[gateway.adaptive]
target_p99_ms = 500
min_per_second = 5
max_per_second = 200
[[products]]
sku = "a"
stock = 3
[arrivals]
profile = "spike"
shoppers = 10
over_s = 1
[paysim]
[[faults]]
action = "paysim_faults"
at_s = 30
knobs = { latency_ms = 40 }
[adaptive_bar]
settle_s = 10
"#;

    fn run(rate: impl Fn(f64) -> f64, latency_ms: u32, failed_every: u32) -> Inner {
        let mut rec = Inner::default();
        for half in 0..120 {
            let t_s = f64::from(half) / 2.0;
            rec.samples.push(Sample {
                t_s,
                up: true,
                release_per_second: rate(t_s),
                ..Sample::default()
            });
        }
        for _second in 0..60 {
            rec.checkout_ms.push(vec![latency_ms; 100]);
            rec.checkout_calls.push((100, 100 / failed_every));
        }
        rec
    }

    #[test]
    fn a_last_phase_longer_than_the_recorded_seconds_keeps_its_checkouts() {
        let s = Scenario::parse(SCENARIO, "t.toml").unwrap();
        // Checkouts recorded up to second 59; the run (and its last phase)
        // ends at 62.5 s.
        let rec = run(|_| 50.0, 300, 1000);
        let p = phases(&s, &rec, 62.5);
        assert_eq!(p[1].checkouts, 100 * (60 - 40), "{:?}", p[1]);
        assert_eq!(p[1].checkout_p99_ms, Some(300));
    }

    #[test]
    fn a_rate_that_steps_down_and_holds_passes() {
        let s = Scenario::parse(SCENARIO, "t.toml").unwrap();
        let rec = run(|t| if t < 30.0 { 100.0 } else { 30.0 }, 400, 1000);
        let p = phases(&s, &rec, 60.0);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].settled_s, p[1].settled_s), (10.0, 40.0));
        assert_eq!(p[1].rate_mean, 30.0);
        assert_eq!(p[0].checkout_p99_ms, Some(400));
        let c = check(&s, &p).unwrap();
        assert_eq!(c.result, "pass", "{:?}", c.violations);
    }

    #[test]
    fn swings_slow_checkouts_errors_and_a_rate_that_stays_fail() {
        let s = Scenario::parse(SCENARIO, "t.toml").unwrap();
        // ±30 % every other sample, the same in both phases, p99 above
        // 1.5 × 500 ms, 5 % failed.
        let rec = run(
            |t| {
                if ((t * 2.0) as u32).is_multiple_of(2) {
                    130.0
                } else {
                    70.0
                }
            },
            900,
            20,
        );
        let c = check(&s, &phases(&s, &rec, 60.0)).unwrap();
        assert_eq!(c.result, "fail");
        let all = c.violations.join("\n");
        for needle in ["swung", "p99 900 ms", "checkouts failed", "did not follow"] {
            assert!(all.contains(needle), "{needle}: {all}");
        }
        // Out of bounds.
        let rec = run(|t| if t < 30.0 { 300.0 } else { 30.0 }, 400, 1000);
        let c = check(&s, &phases(&s, &rec, 60.0)).unwrap();
        assert!(
            c.violations.iter().any(|v| v.contains("bounds")),
            "{:?}",
            c.violations
        );
    }

    #[test]
    fn a_rate_under_the_utilisation_bar_fails_and_one_above_passes() {
        let mut s = Scenario::parse(SCENARIO, "t.toml").unwrap();
        s.adaptive_bar.utilisation_min = Some(0.85);
        let rec = run(|t| if t < 30.0 { 100.0 } else { 30.0 }, 400, 1000);
        let mut p = phases(&s, &rec, 60.0);
        // No sweep: the bar cannot be met.
        let c = check(&s, &p).unwrap();
        assert_eq!(c.result, "fail");
        assert!(c.violations.iter().all(|v| v.contains("no capacity")));
        // 100/s of 115/s is 87 %; 30/s of 40/s is 75 %.
        set_capacities(&mut p, &[115.0, 40.0]);
        let c = check(&s, &p).unwrap();
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert!(
            c.violations[0].contains("phase 1") && c.violations[0].contains("used 75 %"),
            "{:?}",
            c.violations
        );
        set_capacities(&mut p, &[115.0, 35.0]);
        assert_eq!(check(&s, &p).unwrap().result, "pass");
        assert!(check(&s, &p).unwrap().detail.contains("(86 % of 35.0/s)"));
    }

    #[test]
    fn a_fixed_room_has_figures_but_no_bar() {
        let s = Scenario::parse(SCENARIO, "t.toml")
            .unwrap()
            .with_fixed_rate();
        let rec = run(|_| 50.0, 400, 1000);
        let p = phases(&s, &rec, 60.0);
        assert_eq!(p.len(), 2);
        assert!(check(&s, &p).is_none());
    }
}
