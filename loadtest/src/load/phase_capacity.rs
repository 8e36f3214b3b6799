//! The backend's capacity at the target in each phase of a run whose
//! provider changes (`paysim_faults` faults), measured before the run: a
//! fixed-rate sweep (`sluice-load capacity`) against a gateway and a
//! paysim of their own, with that phase's provider knobs, judged at the
//! room's own `target_p99_ms` and `max_error_ratio`. What the adaptive
//! rate is held to (`[adaptive_bar] utilisation_min`, `follow::check`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::capacity::{self, Capacity, CapacityOptions, PaysimKnobs};
use super::scenario::{FaultAction, Scenario};

/// Each sweep step offers this many times the last...
pub const STEP_FACTOR: f64 = 1.1;
/// ...for this long.
pub const STEP_S: u64 = 8;
/// Steps at most (2/s × 1.1^40 is 90/s).
pub const STEPS_MAX: u32 = 40;

/// paysim's knobs in force in each phase: `[paysim.faults]` with the
/// knobs of every `paysim_faults` fault up to the phase's start laid
/// over it, in the order `follow::phases` cuts the run.
pub fn knobs(scenario: &Scenario) -> Vec<toml::Table> {
    let mut faults: Vec<(f64, &toml::Table)> = scenario
        .faults
        .iter()
        .filter_map(|f| match &f.action {
            FaultAction::PaysimFaults { knobs } => Some((f.at_s, knobs)),
            _ => None,
        })
        .collect();
    faults.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut now = scenario
        .paysim
        .as_ref()
        .map(|p| p.faults.clone())
        .unwrap_or_default();
    let mut out = vec![now.clone()];
    for (_, k) in faults {
        for (key, value) in k {
            now.insert(key.clone(), value.clone());
        }
        out.push(now.clone());
    }
    out
}

/// The sweep's settings for one phase's knobs; `None` without an
/// adaptive room or a `[paysim]`.
pub fn options(
    scenario: &Scenario,
    knobs: &toml::Table,
    sluice: Option<PathBuf>,
) -> Option<CapacityOptions> {
    let a = scenario.gateway.adaptive.as_ref()?;
    let paysim = scenario.paysim.as_ref()?;
    Some(CapacityOptions {
        sluice,
        start_per_s: f64::from(a.min_per_second),
        step_factor: STEP_FACTOR,
        steps_max: STEPS_MAX,
        step: Duration::from_secs(STEP_S),
        p99_ms_max: f64::from(a.target_p99_ms),
        error_rate_max: a.max_error_ratio,
        headroom: 1.0,
        paysim: Some(PaysimKnobs {
            provider_timeout_ms: paysim.provider_timeout_ms,
            faults: knobs.clone(),
        }),
        ..CapacityOptions::default()
    })
}

/// Sweeps each phase's provider (the same knobs once) and returns the
/// capacity of each phase, in order, with the sweeps.
pub async fn sweep(
    scenario: &Scenario,
    sluice: Option<PathBuf>,
) -> Result<Vec<(toml::Table, Capacity)>> {
    let mut done: Vec<(toml::Table, Capacity)> = Vec::new();
    let mut out = Vec::new();
    for (n, k) in knobs(scenario).into_iter().enumerate() {
        if let Some((_, c)) = done.iter().find(|(d, _)| *d == k) {
            out.push((k, c.clone()));
            continue;
        }
        let o = options(scenario, &k, sluice.clone())
            .context("a capacity sweep needs an adaptive room and a [paysim]")?;
        eprintln!("capacity sweep, phase {n} (paysim {k}):");
        let c = capacity::run(&o)
            .await
            .with_context(|| format!("the capacity sweep of phase {n}"))?;
        eprint!("{}", c.table());
        done.push((k.clone(), c.clone()));
        out.push((k, c));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_has_the_knobs_in_force_then() {
        let s = Scenario::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/backend-degrades.toml"
        )))
        .unwrap();
        let k = knobs(&s);
        assert_eq!(k.len(), 3);
        let at = |n: usize, key: &str| k[n].get(key).and_then(|v| v.as_integer());
        assert_eq!(
            (
                at(0, "latency_ms"),
                at(1, "latency_ms"),
                at(2, "latency_ms")
            ),
            (Some(25), Some(80), Some(25))
        );
        // Knobs a fault does not name stay as they were.
        assert_eq!((at(0, "workers"), at(1, "workers")), (Some(1), Some(1)));
        let o = options(&s, &k[1], None).unwrap();
        assert_eq!((o.p99_ms_max, o.error_rate_max), (1200.0, 0.02));
        assert_eq!(o.start_per_s, 2.0);
        let p = o.paysim.unwrap();
        assert_eq!(p.provider_timeout_ms, 1000);
        assert_eq!(p.faults, k[1]);
        assert!(options(&s.clone().with_fixed_rate(), &k[0], None).is_none());
    }
}
