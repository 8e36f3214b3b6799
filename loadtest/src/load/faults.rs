//! The scenario's faults, played at their second while the shoppers run:
//! the kill switch through the watched config file, SIGKILL and restart of
//! a gateway, paysim's knobs (a provider that slows down), and for a fleet
//! its stores restarted and a gateway cut off from one. Each fault runs
//! from its own second, so a long one does not delay the next; changes of
//! paysim's knobs take turns, in the order of their seconds (each reads
//! the knobs and writes them back, and on a loaded machine one took 3 s:
//! a later change landed first and the earlier one undid it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::fleet::{link_of, Fleet};
use super::record::Recorder;
use super::scenario::{Fault, FaultAction, Scenario, Store};
use crate::relay::Link;

/// Plays the scenario's faults at their times; each one is recorded.
pub async fn play(scenario: Scenario, fleet: Arc<Fleet>, rec: Arc<Recorder>, start: Instant) {
    let mut faults = scenario.faults.clone();
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut playing = tokio::task::JoinSet::new();
    // Each knob change waits for the one before it to be done.
    let mut last_knobs: Option<tokio::task::JoinHandle<()>> = None;
    for f in faults {
        tokio::time::sleep_until((start + Duration::from_secs_f64(f.at_s)).into()).await;
        let (fleet, rec) = (fleet.clone(), rec.clone());
        if matches!(f.action, FaultAction::PaysimFaults { .. }) {
            let before = last_knobs.take();
            last_knobs = Some(tokio::spawn(async move {
                if let Some(before) = before {
                    let _ = before.await;
                }
                one(f, fleet, rec).await;
            }));
        } else {
            playing.spawn(one(f, fleet, rec));
        }
    }
    if let Some(last) = last_knobs {
        let _ = last.await;
    }
    while playing.join_next().await.is_some() {}
}

async fn one(f: Fault, fleet: Arc<Fleet>, rec: Arc<Recorder>) {
    let (what, result) = act(&f, &fleet, &rec).await;
    match result {
        Ok(()) => rec.fault(what),
        Err(e) => rec.fault(format!("{what}: FAILED: {e:#}")),
    }
}

/// Does `f`; what to record once it is done, and how it went.
async fn act(f: &Fault, fleet: &Fleet, rec: &Recorder) -> (String, Result<()>) {
    let name = |g: u32| {
        if fleet.gateways.len() > 1 {
            format!("gateway {g}")
        } else {
            "gateway".to_string()
        }
    };
    match &f.action {
        FaultAction::PauseAdmissions => (
            "admissions paused (config file)".to_string(),
            fleet.first().set_admissions(false),
        ),
        FaultAction::OpenAdmissions => (
            "admissions reopened (config file)".to_string(),
            fleet.first().set_admissions(true),
        ),
        FaultAction::KillRestart { gateway, down_s } => {
            rec.fault(format!("{} SIGKILLed", name(*gateway)));
            let r = match fleet.gateways.get(*gateway as usize) {
                Some(g) => g.kill_restart(Duration::from_secs_f64(*down_s)).await,
                None => Err(anyhow::anyhow!("there is no gateway {gateway}")),
            };
            (
                format!("{} restarted on the same ports and data", name(*gateway)),
                r,
            )
        }
        FaultAction::SetMessage { message } => {
            // The message is each gateway's config: every one is edited.
            let r = fleet
                .gateways
                .iter()
                .try_for_each(|g| g.set_message(message));
            if r.is_ok() {
                let at = rec.now_s();
                rec.with(|i| i.event.messages_set.push((at, message.clone())));
            }
            (format!("room message set to {message:?} (config file)"), r)
        }
        FaultAction::PaysimFaults { knobs } => (
            format!("paysim knobs set: {knobs}").replace('\n', ", "),
            fleet.first().set_paysim_faults(knobs).await,
        ),
        FaultAction::RestartRedis { keep_data, down_s } => {
            rec.fault("Redis SIGKILLed".into());
            let r = fleet
                .restart_redis(*keep_data, Duration::from_secs_f64(*down_s))
                .await;
            if r.is_ok() && !keep_data {
                let t = rec.now_s();
                rec.with(|i| i.store_resets_s.push(t));
            }
            let how = if *keep_data { "with its data" } else { "empty" };
            (format!("Redis back on the same port, {how}"), r)
        }
        FaultAction::RestartPostgres { down_s } => {
            rec.fault("PostgreSQL stopped (immediate)".into());
            (
                "PostgreSQL back with its data".to_string(),
                fleet
                    .restart_postgres(Duration::from_secs_f64(*down_s))
                    .await,
            )
        }
        FaultAction::CutOff {
            gateway,
            store,
            how,
            for_s,
        } => {
            let store_name = match store {
                Store::Redis => "Redis",
                Store::Postgres => "PostgreSQL",
            };
            let r = cut_off(
                fleet,
                rec,
                (*gateway as usize, *store, store_name),
                link_of(*how),
                *for_s,
            )
            .await
            .with_context(|| format!("cutting gateway {gateway} off from {store_name}"));
            (
                format!("gateway {gateway}'s link to {store_name} back up"),
                r,
            )
        }
    }
}

async fn cut_off(
    fleet: &Fleet,
    rec: &Recorder,
    (gateway, store, store_name): (usize, Store, &str),
    link: Link,
    for_s: f64,
) -> Result<()> {
    fleet.set_link(gateway, store, link)?;
    rec.fault(format!(
        "gateway {gateway} cut off from {store_name} ({link:?}) for {for_s} s"
    ));
    tokio::time::sleep(Duration::from_secs_f64(for_s)).await;
    fleet.set_link(gateway, store, Link::Up)
}
