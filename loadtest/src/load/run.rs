//! `sluice-load run`: set up (or reach) the gateway, play the shoppers
//! with the scenario's faults while sampling the system, check the books,
//! write the report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use super::balancer::Balancer;
use super::books::{self, Check};
use super::datetime::civil_from_days;
use super::farm::{Farm, FarmPlan};
use super::fleet::Fleet;
use super::fleet_books::{self, Line};
use super::gateway::{find_sluice, new_key, sibling, Target};
use super::record::{OrderSeen, Recorder, Sample};
use super::report;
use super::scenario::Scenario;
use super::shopper::Door;
use super::shopper::{self, Shared};
use super::summary::{self, Configured, Summary, TargetInfo};
use super::{arrivals, bot_farm, event_day, faults, follow, phase_capacity, progress, sampler};

/// Idle keep-alive connections kept to the gateway.
pub const POOL_IDLE_MAX: usize = 512;
/// After the deadline, how long shoppers get to notice it.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A deployment that is already running.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    pub public: String,
    pub admin: String,
    pub admin_token: Option<String>,
    pub config_path: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    /// paysim's URL, for its `/ledger`.
    pub paysim_url: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The `sluice` binary (started, and used for `sluice audit`).
    pub sluice: Option<PathBuf>,
    /// The `paysim` binary, for scenarios with `[paysim]`.
    pub paysim: Option<PathBuf>,
    /// Report folder; default `target/sluice-load/<scenario>-<time>/`.
    pub out: Option<PathBuf>,
    pub remote: Option<Remote>,
    /// Draw the status line on stderr.
    pub progress: bool,
}

/// What a run produced.
pub struct RunResult {
    pub summary: Summary,
    pub out: PathBuf,
    /// Every order shoppers were told about, as re-read at the end.
    pub orders: Vec<OrderSeen>,
    /// `/admin/state` every 500 ms.
    pub samples: Vec<Sample>,
}

/// Plays `scenario` and checks the books.
pub async fn run(scenario: &Scenario, opts: &RunOptions) -> Result<RunResult> {
    if opts.remote.is_some() && scenario.fleet.is_some() {
        anyhow::bail!(
            "`{}` has a [fleet]: the harness starts its gateways and stores itself (--target is for one running gateway)",
            scenario.name
        );
    }
    // A campaign's schedule counts from an instant fixed now, far enough
    // ahead for the setup; the run starts then.
    let timed;
    let scenario = match &scenario.event {
        Some(e) => {
            let mut s = scenario.clone();
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            s.event.as_mut().expect("checked").start_unix_s = Some(now + 1 + e.setup_s);
            timed = s;
            &timed
        }
        None => scenario,
    };
    // The harness plays the store: its enqueue key, written into the
    // room's config, signs every account's token.
    let keyed;
    let scenario = match &scenario.gateway.enqueue {
        Some(e) if e.store_key.is_none() => {
            let mut s = scenario.clone();
            s.gateway.enqueue.as_mut().expect("checked").store_key = Some(new_key());
            keyed = s;
            &keyed
        }
        _ => scenario,
    };
    let sluice = opts.sluice.clone().unwrap_or_else(find_sluice);
    // The capacity each phase's backend has at the target, measured
    // first on a gateway and paysim of its own, when the bar asks for it.
    let sweeps = if scenario.adaptive_bar.utilisation_min.is_some()
        && scenario.gateway.adaptive.is_some()
        && opts.remote.is_none()
    {
        phase_capacity::sweep(scenario, Some(sluice.clone())).await?
    } else {
        Vec::new()
    };
    let fleet = Arc::new(match &opts.remote {
        Some(r) => Fleet::single(Target::remote(
            &r.public,
            &r.admin,
            r.admin_token.clone(),
            r.config_path.clone(),
            r.data_dir.clone(),
            Some(sluice),
            r.paysim_url.clone(),
        )?),
        None => {
            let paysim = scenario
                .needs_paysim()
                .then(|| opts.paysim.clone().unwrap_or_else(|| sibling("paysim")));
            Fleet::start(&sluice, paysim.as_deref(), scenario).await?
        }
    });
    let target = fleet.first().clone();
    let before = target
        .admin_state()
        .await
        .context("reading /admin/state before the run")?;
    let room_state = before["rooms"]
        .as_array()
        .and_then(|rooms| {
            rooms
                .iter()
                .find(|r| r["name"] == scenario.gateway.room.as_str())
        })
        .cloned()
        .with_context(|| format!("the gateway has no room `{}`", scenario.gateway.room))?;
    let configured = Configured {
        release_per_second: room_state["release_per_second"].as_f64().unwrap_or(0.0),
        burst: f64::from(
            scenario
                .gateway
                .burst
                .unwrap_or(scenario.gateway.release_per_second),
        ),
        max_active: room_state["max_active"].as_u64().unwrap_or(0),
    };

    if let Some(at) = scenario.event.as_ref().and_then(|e| e.start_unix_s) {
        let at = UNIX_EPOCH + Duration::from_secs(at);
        let wait = at.duration_since(SystemTime::now()).with_context(|| {
            "the setup took longer than `event.setup_s`: the schedule written in the room's config has started already"
        })?;
        tokio::time::sleep(wait).await;
    }
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // A campaign's seconds count from the instant its schedule does, not
    // from when the sleep above ended (later on a busy machine).
    let late = scenario
        .event
        .as_ref()
        .and_then(|e| e.start_unix_s)
        .and_then(|at| started_unix.checked_sub(Duration::from_secs(at)))
        .unwrap_or_default();
    let start = Instant::now()
        .checked_sub(late)
        .unwrap_or_else(Instant::now);
    let rec = Arc::new(Recorder::new(start));
    let max_duration = Duration::from_secs(scenario.limits.max_duration_s);
    let times = arrivals::schedule(
        &scenario.arrivals,
        scenario.seed,
        scenario.limits.max_shoppers,
        max_duration.as_secs_f64(),
    );
    let plans = shopper::plans(scenario, &times);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(scenario.shoppers.request_timeout_ms))
        .pool_max_idle_per_host(POOL_IDLE_MAX)
        .build()?;
    let lb = Arc::new(Balancer::new(
        fleet.publics(),
        fleet.gateways.iter().map(|g| g.admin.clone()).collect(),
    ));
    let shared = Arc::new(Shared {
        http: http.clone(),
        lb: lb.clone(),
        room: scenario.gateway.room.clone(),
        sells: !scenario.rooms_only(),
        place_slack: (configured.release_per_second + configured.burst).ceil() as u64,
        behaviour: scenario.shoppers.clone(),
        rec: rec.clone(),
        deadline: start + max_duration,
        run_id: format!("sl{}-{:x}", scenario.seed, started_unix.as_millis()),
        event: scenario.event.is_some(),
        door: Door {
            challenge: scenario.gateway.challenge.is_some(),
            store_key: scenario
                .gateway
                .enqueue
                .as_ref()
                .and_then(|e| e.store_key.clone()),
            phone_hashes_per_second: scenario.shoppers.phone_hashes_per_second,
        },
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health = tokio::spawn(lb.clone().health_checks(http.clone(), stop_rx.clone()));
    let sampler = tokio::spawn(sampler::run(
        fleet.clone(),
        scenario.gateway.room.clone(),
        rec.clone(),
        stop_rx.clone(),
    ));
    let progress = opts.progress.then(|| {
        tokio::spawn(progress::run(
            scenario.name.clone(),
            plans.len(),
            rec.clone(),
            stop_rx.clone(),
        ))
    });
    let faults = tokio::spawn(faults::play(
        scenario.clone(),
        fleet.clone(),
        rec.clone(),
        start,
    ));

    let farm = scenario.farm.as_ref().map(|setup| {
        Farm::start(
            FarmPlan {
                setup: setup.clone(),
                public: lb.public(0).to_string(),
                room: scenario.gateway.room.clone(),
                // Tokens only where the room requires them: with the
                // challenge alone the farm joins anonymously, each join a
                // new place.
                store_key: scenario
                    .gateway
                    .enqueue
                    .as_ref()
                    .filter(|e| e.required)
                    .and_then(|e| e.store_key.clone()),
                sku: scenario
                    .products
                    .first()
                    .map(|p| p.sku.clone())
                    .unwrap_or_default(),
                request_timeout: Duration::from_millis(scenario.shoppers.request_timeout_ms),
            },
            shared.clone(),
        )
    });
    let mut shoppers = tokio::task::JoinSet::new();
    for plan in plans.iter().cloned() {
        let at = start + Duration::from_secs_f64(plan.arrive_at_s);
        if at >= shared.deadline {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        rec.with(|i| i.shoppers_started += 1);
        shoppers.spawn(shopper::run(shared.clone(), plan));
    }
    let _ = tokio::time::timeout_at((shared.deadline + STOP_GRACE).into(), async {
        while shoppers.join_next().await.is_some() {}
    })
    .await;
    shoppers.abort_all();
    // The farm plays as long as the honest shoppers do.
    if let Some(farm) = farm {
        farm.stop().await;
        let at = rec.now_s();
        rec.with(|i| i.farm.stopped_s = at);
    }
    // Faults still ahead of us are cut short with the run.
    if !faults.is_finished() {
        let left = shared.deadline.saturating_duration_since(Instant::now()) + STOP_GRACE;
        if tokio::time::timeout(left, faults).await.is_err() {
            rec.fault("faults still pending when the run ended were not played".into());
        }
    }
    let duration_s = rec.now_s();
    let _ = stop_tx.send(true);
    let _ = sampler.await;
    let _ = health.await;
    if let Some(p) = progress {
        let _ = p.await;
    }

    let settle = Duration::from_secs(scenario.books.settle_s_max);
    let (mut checks, inventory_end) = if scenario.rooms_only() {
        let mut c = rooms_only_books();
        c.push(books::impatient_check(&rec));
        (c, Default::default())
    } else {
        books::check(&target, &rec, &http, &before, settle, !fleet.shared()).await
    };
    if scenario.fleet.is_some() {
        let line = Line {
            rate: configured.release_per_second,
            burst: configured.burst,
            max_active: configured.max_active,
            poll_s: poll_interval_s(scenario),
        };
        // A fair start's pre-queue is drawn, not FIFO: its order is the
        // event's draw check; FIFO holds for the joins after the opening.
        let drawn_until_s = scenario
            .event
            .as_ref()
            .map(|e| e.opens_after_s as f64 + super::event_day::EDGE_SLACK_S);
        checks.extend(rec.with(|i| fleet_checks(i, line, drawn_until_s)));
    }
    checks.push(books::faults_check(&rec.with(|i| i.faults.clone())));
    if let Some(e) = &scenario.event {
        let line = event_day::LineSetup::of(scenario);
        checks.extend(rec.with(|i| event_day::checks(e, line, &i.event)));
    }
    let farm_report = match &scenario.farm {
        Some(_) => {
            // A held pass is reclaimed only once it has been idle for
            // `pass_idle_s`: the run's shoppers may be done sooner, so the
            // count is read once the last held pass is due (and the release
            // pass that ends it has run).
            let last_held = rec.with(|i| {
                i.farm
                    .held_at_s
                    .iter()
                    .map(|&t| bot_farm::idle_from(scenario, &i.farm, t))
                    .reduce(f64::max)
            });
            if let (Some(held), Some(idle_s)) = (last_held, scenario.gateway.pass_idle_s) {
                let due = held + f64::from(idle_s) + bot_farm::IDLE_SLACK_S;
                let wait = (due - rec.now_s()).max(0.0);
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            let metrics = async {
                http.get(format!("{}/metrics", target.admin))
                    .send()
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()
            }
            .await
            .unwrap_or_default();
            let idle = bot_farm::idle_ended(&metrics, &scenario.gateway.room);
            let end_s = rec.now_s();
            let (report, farm_checks) = rec.with(|i| {
                let r = bot_farm::report(scenario, &i.farm, &i.orders, i.shoppers_started, idle);
                let c = bot_farm::checks(scenario, &r, &i.farm, end_s);
                (r, c)
            });
            checks.extend(farm_checks);
            Some(report)
        }
        None => None,
    };
    let mut phases = rec.with(|i| follow::phases(scenario, i, duration_s));
    let capacities: Vec<f64> = sweeps.iter().map(|(_, c)| c.capacity_per_s).collect();
    follow::set_capacities(&mut phases, &capacities);
    checks.extend(follow::check(scenario, &phases));
    let run_info = summary::RunInfo {
        scenario,
        started_unix_s: started_unix.as_secs(),
        duration_s,
        planned: plans.len() as u64,
        target: TargetInfo {
            public: target.public.clone(),
            admin: target.admin.clone(),
            managed: target.process.is_some(),
        },
        configured,
        publics: fleet.publics(),
    };
    let mut summary = rec.with(|i| Summary::assemble(run_info, i, checks, phases, inventory_end));
    summary.bot_farm = farm_report;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| default_out(&scenario.name, started_unix.as_secs()));
    rec.with(|i| report::write(&out, &summary, i))?;
    if !sweeps.is_empty() {
        let json: Vec<serde_json::Value> = sweeps
            .iter()
            .map(|(k, c)| serde_json::json!({"paysim_faults": k, "sweep": c}))
            .collect();
        std::fs::write(
            out.join("capacity.json"),
            serde_json::to_string_pretty(&json)?,
        )?;
    }
    if let Some(text) = target.config_text() {
        let _ = std::fs::write(out.join("sluice.toml"), text);
    }
    for (g, gw) in fleet.gateways.iter().enumerate() {
        let name = if fleet.gateways.len() > 1 {
            format!("sluice-{g}.log")
        } else {
            "sluice.log".to_string()
        };
        if let Some(log) = gw.log() {
            let _ = std::fs::write(out.join(name), log);
        }
    }
    let (orders, samples) = rec.with(|i| (i.orders.clone(), i.samples.clone()));
    Ok(RunResult {
        summary,
        out,
        orders,
        samples,
    })
}

/// The checks of stock and orders, skipped with the reason: a rooms-only
/// fleet sells nothing (each gateway would sell from its own data_dir).
fn rooms_only_books() -> Vec<Check> {
    const WHY: &str =
        "rooms-only fleet rehearsal: nothing is sold without `[fleet] postgres = true`";
    books::ORDER_BOOKS
        .iter()
        .chain([&books::AUDIT])
        .map(|name| Check::skipped(name, WHY))
        .collect()
}

/// The longest a shopper can go between two polls: the room's
/// `poll_max_s`, the poll jitter, and a request's time.
pub fn poll_interval_s(scenario: &Scenario) -> f64 {
    f64::from(scenario.gateway.poll_max_s) + 0.25 + 1.0
}

/// The line's books, fleet-wide.
fn fleet_checks(i: &super::record::Inner, line: Line, drawn_until_s: Option<f64>) -> Vec<Check> {
    let after_draw: Vec<_> = i
        .tickets
        .iter()
        .filter(|t| drawn_until_s.is_none_or(|until| t.joined_s > until))
        .cloned()
        .collect();
    vec![
        fleet_books::rate_check(&i.samples, line, &i.store_resets_s),
        fleet_books::seen_rate_check(&i.admitted_seen, line, &i.store_resets_s),
        fleet_books::max_active_check(&i.fleet_samples, &i.samples, line.max_active),
        fleet_books::fifo_check(&after_draw, line.poll_s),
        fleet_books::places_check(i.moved_waiting, &i.places_lost),
    ]
}

/// `target/sluice-load/<scenario>-<YYYYmmdd-HHMMSS>` (UTC).
pub fn default_out(name: &str, unix_s: u64) -> PathBuf {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    Path::new("target").join("sluice-load").join(format!(
        "{name}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_report_folder_is_named_by_scenario_and_utc_time() {
        assert_eq!(
            default_out("flash-crowd", 1_796_000_000),
            Path::new("target/sluice-load/flash-crowd-20261130-005320")
        );
    }
}
