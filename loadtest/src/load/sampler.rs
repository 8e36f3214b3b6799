//! Samples `/admin/state` every [`SAMPLE_EVERY`] while the run lasts: people
//! waiting, passes active, admissions so far, stock by state. In a fleet
//! every gateway is sampled ([`FleetSample`]), and the run's sample is the
//! fleet's line as the most advanced gateway shows it, with admissions so
//! far the passes collected across the fleet, counted by Redis itself.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::fleet::Fleet;
use super::record::{FleetSample, Recorder, Sample};

pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Samples kept, at most (a day at two a second).
pub const SAMPLES_MAX: usize = 2 * 24 * 3600;

/// One sample of `room` from an `/admin/state` answer (`None`: down).
pub fn sample_of(state: Option<&Value>, room: &str, t_s: f64) -> Sample {
    let Some(state) = state else {
        return Sample {
            t_s,
            ..Sample::default()
        };
    };
    let r = state["rooms"]
        .as_array()
        .and_then(|rooms| rooms.iter().find(|r| r["name"] == room))
        .cloned()
        .unwrap_or(Value::Null);
    let sum = |key: &str| -> i64 {
        state["inventory"]
            .as_array()
            .map_or(0, |l| l.iter().filter_map(|x| x[key].as_i64()).sum())
    };
    Sample {
        t_s,
        read_s: 0.0,
        up: true,
        waiting: r["waiting"].as_u64().unwrap_or(0),
        active: r["active"].as_u64().unwrap_or(0),
        admitted_total: r["admitted_total"].as_u64().unwrap_or(0),
        available: sum("available"),
        reserved: sum("reserved"),
        committed: sum("committed"),
        paused: state["admissions"] == "paused",
        release_per_second: r["release_per_second"].as_f64().unwrap_or(0.0),
        release_reason: r["release_source"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        release_phase: r["release_source"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        release_exact: r["release_source"]["exact_per_second"].as_f64(),
        release_queue: r["release_source"]["queue"].as_f64(),
        release_capacity: r["release_source"]["capacity_per_second"].as_f64(),
    }
}

/// The room's fleet numbers in one gateway's `/admin/state` answer.
pub fn fleet_sample_of(state: Option<&Value>, room: &str, t_s: f64, gateway: usize) -> FleetSample {
    let Some(state) = state else {
        return FleetSample {
            t_s,
            gateway,
            ..FleetSample::default()
        };
    };
    let r = state["rooms"]
        .as_array()
        .and_then(|rooms| rooms.iter().find(|r| r["name"] == room))
        .cloned()
        .unwrap_or(Value::Null);
    FleetSample {
        t_s,
        gateway,
        up: true,
        serving: r["serving"].as_u64().unwrap_or(0),
        active: r["active"].as_u64().unwrap_or(0),
        waiting: r["waiting"].as_u64().unwrap_or(0),
    }
}

/// Samples until `stop` fires.
pub async fn run(
    fleet: Arc<Fleet>,
    room: String,
    rec: Arc<Recorder>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut collected = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let asked_s = rec.now_s();
        let mut sample = if fleet.shared() {
            let mut each = Vec::new();
            let mut best: Option<(u64, Value)> = None;
            for (g, target) in fleet.gateways.iter().enumerate() {
                let state = target.admin_state().await.ok();
                let fs = fleet_sample_of(state.as_ref(), &room, rec.now_s(), g);
                if let Some(state) = state {
                    if best
                        .as_ref()
                        .is_none_or(|(serving, _)| fs.serving > *serving)
                    {
                        best = Some((fs.serving, state));
                    }
                }
                each.push(fs);
            }
            // Admitted so far: the passes collected, Redis's own count
            // (the places released run ahead of it by the no-show make-up,
            // which the rate does not bound). While Redis does not answer,
            // the last count stands.
            if let Some(n) = fleet.collected_in_redis(&room).await {
                collected = n;
            }
            let t = rec.now_s();
            let mut sample = sample_of(best.as_ref().map(|b| &b.1), &room, t);
            sample.admitted_total = collected;
            rec.with(|i| {
                if i.fleet_samples.len() < SAMPLES_MAX * 16 {
                    i.fleet_samples.extend(each);
                }
            });
            sample
        } else {
            let state = fleet.first().admin_state().await.ok();
            sample_of(state.as_ref(), &room, rec.now_s())
        };
        sample.read_s = sample.t_s - asked_s;
        rec.with(|i| {
            if i.samples.len() < SAMPLES_MAX {
                i.samples.push(sample);
            }
        });
    }
}
