//! The scenario's faults, played at their second while the shoppers run:
//! the kill switch through the watched config file, SIGKILL and restart,
//! paysim's knobs (a provider that slows down).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::gateway::Target;
use super::record::Recorder;
use super::scenario::{FaultAction, Scenario};

/// Plays the scenario's faults at their times; each one is recorded.
pub async fn play(scenario: Scenario, target: Arc<Target>, rec: Arc<Recorder>, start: Instant) {
    let mut faults = scenario.faults.clone();
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    for f in faults {
        tokio::time::sleep_until((start + Duration::from_secs_f64(f.at_s)).into()).await;
        let (what, result) = match f.action {
            FaultAction::PauseAdmissions => (
                "admissions paused (config file)".to_string(),
                target.set_admissions(false),
            ),
            FaultAction::OpenAdmissions => (
                "admissions reopened (config file)".to_string(),
                target.set_admissions(true),
            ),
            FaultAction::KillRestart { down_s } => {
                rec.fault("gateway SIGKILLed".into());
                let r = target.kill_restart(Duration::from_secs_f64(down_s)).await;
                (
                    "gateway restarted on the same ports and data".to_string(),
                    r,
                )
            }
            FaultAction::PaysimFaults { knobs } => (
                format!("paysim knobs set: {knobs}").replace('\n', ", "),
                target.set_paysim_faults(&knobs).await,
            ),
        };
        match result {
            Ok(()) => rec.fault(what),
            Err(e) => rec.fault(format!("{what}: FAILED: {e:#}")),
        }
    }
}
