//! `sluice-load capacity`: how many checkouts per second the purchase flow
//! finishes within its targets. Admission is taken out of the way (a very
//! high release rate, a pool of passes); the offered checkout rate rises
//! step by step, open loop, until p99 latency or the error rate crosses its
//! threshold. The release rate to configure is the last good step's rate
//! times a headroom. A last step at half that capacity says what a shopper
//! waits for when the store is not pushed.
//!
//! With `--gateways N` (and `--postgres`) the purchase flow is a fleet: N
//! gateways sharing a throwaway Redis (the line, so a pass works on each)
//! and PostgreSQL (the stock), started as a `[fleet]` scenario's are, and
//! the checkouts spread over them in turn. A checkout counts as done when
//! its answer says `confirmed`.
//!
//! With `--cpu` each step also charges the gateways' and PostgreSQL's CPU
//! time over exactly its span (first request to last answer, [`cpu`]) to
//! the checkouts confirmed in it, no half-capacity step is run, and the
//! books are checked at the end: stock conserved, every order final, units
//! committed = checkouts confirmed, and `sluice audit` for a lone gateway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::json;

use super::books::{self, Check};
use super::cpu::{Meter, Reading};
use super::fleet::Fleet;
use super::gateway::{find_sluice, sibling};
use super::http::{send, send_at};
use super::record::{quantile, Recorder};
use super::scenario::Scenario;

/// Requests in flight at once, at most; beyond it the step counts the
/// request as an error (the system is not keeping up).
pub const IN_FLIGHT_MAX: usize = 4_096;
/// Polls to get one pass, at most.
pub const PASS_POLLS_MAX: u32 = 30;
/// Joins refused `503` (a fleet room warming up) retried at most this often.
pub const JOIN_RETRIES_MAX: u32 = 10;

#[derive(Debug, Clone)]
pub struct CapacityOptions {
    pub sluice: Option<std::path::PathBuf>,
    /// Offered checkouts per second at the first step.
    pub start_per_s: f64,
    /// Each step offers this many times the previous one.
    pub step_factor: f64,
    pub steps_max: u32,
    pub step: Duration,
    /// Over this p99 checkout latency a step fails, milliseconds.
    pub p99_ms_max: f64,
    /// Over this share of failed checkouts a step fails.
    pub error_rate_max: f64,
    /// Share of the measured capacity to configure.
    pub headroom: f64,
    /// Passes used in turn (each checkout needs one).
    pub passes: usize,
    /// The store test knob, to see capacity with a slow disk.
    pub commit_delay_ms: Option<u32>,
    pub request_timeout: Duration,
    /// Gateways sharing the stores (1: a lone gateway).
    pub gateways: u32,
    /// Stock and orders on a shared PostgreSQL instead of each gateway's
    /// embedded store.
    pub postgres: bool,
    /// Stock rows of the one SKU (`partitions`).
    pub partitions: u32,
    /// Pay through `paysim` over HTTP, answering each call after this
    /// long, instead of the gateway's in-process simulator.
    pub paysim_latency_ms: Option<u32>,
    /// Pay through `paysim` with these knobs (`[paysim.faults]`) and this
    /// provider timeout instead (a scenario phase's provider:
    /// `phase_capacity`); wins over `paysim_latency_ms`.
    pub paysim: Option<PaysimKnobs>,
    /// Charge each step's CPU time to its confirmed checkouts; check the
    /// books at the end; no half-capacity step.
    pub cpu: bool,
}

/// paysim as a phase of a scenario sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct PaysimKnobs {
    pub provider_timeout_ms: u64,
    pub faults: toml::Table,
}

impl Default for CapacityOptions {
    fn default() -> Self {
        Self {
            sluice: None,
            start_per_s: 25.0,
            step_factor: 1.5,
            steps_max: 12,
            step: Duration::from_secs(5),
            p99_ms_max: 250.0,
            error_rate_max: 0.01,
            headroom: 0.8,
            passes: 32,
            commit_delay_ms: None,
            request_timeout: Duration::from_secs(5),
            gateways: 1,
            postgres: false,
            partitions: 1,
            paysim_latency_ms: None,
            paysim: None,
            cpu: false,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub offered_per_s: f64,
    pub achieved_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub error_rate: f64,
    pub ok: bool,
    /// Checkouts answered `confirmed`.
    pub confirmed: u64,
    /// Checkouts not answered `confirmed` (or not sent).
    pub failed: u64,
    /// With `--cpu`: CPU seconds over the step's span.
    pub cpu: Option<StepCpu>,
}

/// CPU spent over one step, first request to last answer.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StepCpu {
    pub span_s: f64,
    pub gateways_s: f64,
    pub postgres_s: f64,
}

impl Step {
    /// Gateway and PostgreSQL CPU microseconds per confirmed checkout.
    pub fn cpu_per_confirmed_us(&self) -> Option<(f64, f64)> {
        let c = self.cpu?;
        let n = self.confirmed.max(1) as f64;
        Some((c.gateways_s * 1e6 / n, c.postgres_s * 1e6 / n))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Capacity {
    pub steps: Vec<Step>,
    /// Checkouts per second the last good step finished.
    pub capacity_per_s: f64,
    /// `release_per_second` to set (capacity × headroom).
    pub release_per_second: u32,
    pub stopped_because: String,
    /// A step offered at half `capacity_per_s` (none when no step was good).
    pub half: Option<Step>,
    /// With `--cpu`: the books at the end.
    pub books: Vec<Check>,
}

impl Capacity {
    /// The evidence table and the advice, for a terminal.
    pub fn table(&self) -> String {
        let mut t = String::from("offered/s  achieved/s   p50 ms   p99 ms   errors  ok\n");
        for s in &self.steps {
            t.push_str(&format!(
                "{:9.1}  {:10.1}  {:7.1}  {:7.1}  {:6.2}%  {}\n",
                s.offered_per_s,
                s.achieved_per_s,
                s.p50_ms,
                s.p99_ms,
                s.error_rate * 100.0,
                if s.ok { "yes" } else { "NO" }
            ));
        }
        t.push_str(&format!(
            "stopped: {}\ncapacity: {:.1} checkouts/s → set release_per_second = {}\n",
            self.stopped_because, self.capacity_per_s, self.release_per_second
        ));
        for s in &self.steps {
            if let (Some(c), Some((g, p))) = (s.cpu, s.cpu_per_confirmed_us()) {
                t.push_str(&format!(
                    "cpu: offered {:.1}/s, {} confirmed in {:.2} s; gateways {:.3} s, postgres {:.3} s; per confirmed checkout: gateways {g:.0} us, postgres {p:.0} us\n",
                    s.offered_per_s, s.confirmed, c.span_s, c.gateways_s, c.postgres_s
                ));
            }
        }
        for b in &self.books {
            t.push_str(&format!("books: {}: {} ({})\n", b.name, b.result, b.detail));
            for v in &b.violations {
                t.push_str(&format!("  {v}\n"));
            }
        }
        if let Some(h) = &self.half {
            t.push_str(&format!(
                "at half capacity ({:.1}/s offered): achieved {:.1}/s, p50 {:.1} ms, p99 {:.1} ms, errors {:.2} %\n",
                h.offered_per_s,
                h.achieved_per_s,
                h.p50_ms,
                h.p99_ms,
                h.error_rate * 100.0
            ));
        }
        t
    }
}

fn scenario(o: &CapacityOptions) -> Result<Scenario> {
    let delay = o
        .commit_delay_ms
        .map(|ms| format!("test_store_commit_delay_ms = {ms}\n"))
        .unwrap_or_default();
    let fleet = if o.gateways > 1 || o.postgres {
        format!(
            "[fleet]\ngateways = {}\nredis = {}\npostgres = {}\n",
            o.gateways.max(1),
            o.gateways > 1,
            o.postgres
        )
    } else {
        String::new()
    };
    let paysim = match (&o.paysim, o.paysim_latency_ms) {
        (Some(k), _) => format!(
            "[paysim]\nprovider_timeout_ms = {}\n[paysim.faults]\n{}",
            k.provider_timeout_ms,
            toml::to_string(&k.faults).context("paysim knobs")?
        ),
        (None, Some(ms)) => {
            format!("[paysim]\nprovider_timeout_ms = 5000\n[paysim.faults]\nlatency_ms = {ms}\n")
        }
        (None, None) => String::new(),
    };
    let text = format!(
        "name = \"capacity\"\n[limits]\nmax_shoppers = 1\nmax_duration_s = 3600\n{fleet}\
         [gateway]\nrelease_per_second = 100000\nmax_active = 1000000\nmax_orders_per_pass = 1000\npoll_min_s = 1\npoll_max_s = 2\n{delay}\
         [[products]]\nsku = \"capacity-sku\"\nstock = 1000000000\npartitions = {}\n\
         [arrivals]\nprofile = \"spike\"\nshoppers = 1\nover_s = 1\n{paysim}",
        o.partitions.max(1)
    );
    Ok(Scenario::parse(&text, "capacity")?)
}

/// Runs the steps against a gateway the harness starts.
pub async fn run(o: &CapacityOptions) -> Result<Capacity> {
    if !(o.step_factor > 1.0 && o.start_per_s > 0.0 && o.headroom > 0.0 && o.headroom <= 1.0) {
        bail!("--step-factor must be > 1, --start-per-s > 0, --headroom in (0, 1]");
    }
    let sc = scenario(o)?;
    let sluice = o.sluice.clone().unwrap_or_else(find_sluice);
    // paysim beside this binary, as `run` finds it.
    let paysim = sc.needs_paysim().then(|| sibling("paysim"));
    let fleet = Fleet::start(&sluice, paysim.as_deref(), &sc).await?;
    let publics = fleet.publics();
    let rec = Arc::new(Recorder::new(Instant::now()));
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(o.request_timeout)
        .pool_max_idle_per_host(IN_FLIGHT_MAX)
        .build()?;
    // Each gateway's line hands out its share of the passes (on a fleet
    // any pass works on any gateway; each checkout goes to the next one).
    let mut passes = Vec::new();
    for i in 0..o.passes.max(publics.len()) {
        passes.push(pass(&http, &rec, &publics[i % publics.len()]).await?);
    }
    let passes = Arc::new(passes);
    let meter = o.cpu.then(|| fleet.meter());
    let before = if o.cpu {
        Some(fleet.first().admin_state().await?)
    } else {
        None
    };
    let mut steps: Vec<Step> = Vec::new();
    let mut rate = o.start_per_s;
    let mut stopped = format!("{} steps, none failed", o.steps_max);
    for n in 0..o.steps_max {
        let step = step(
            &http,
            &rec,
            &publics,
            &passes,
            rate,
            o.step,
            n,
            meter.as_ref(),
        )
        .await?;
        let ok = step.p99_ms <= o.p99_ms_max
            && step.error_rate <= o.error_rate_max
            && step.achieved_per_s >= 0.9 * rate;
        let why = (!ok).then(|| {
            format!(
                "at {rate:.1}/s offered: p99 {:.0} ms (max {:.0}), errors {:.2} % (max {:.2} %), achieved {:.1}/s",
                step.p99_ms,
                o.p99_ms_max,
                step.error_rate * 100.0,
                o.error_rate_max * 100.0,
                step.achieved_per_s
            )
        });
        // The evidence so far, as it comes (a step lasts seconds).
        eprintln!(
            "step {}: offered {rate:.1}/s achieved {:.1}/s p99 {:.0} ms errors {:.2} %",
            n + 1,
            step.achieved_per_s,
            step.p99_ms,
            step.error_rate * 100.0
        );
        steps.push(Step { ok, ..step });
        if let Some(why) = why {
            stopped = why;
            break;
        }
        rate *= o.step_factor;
    }
    let capacity_per_s = steps
        .iter()
        .filter(|s| s.ok)
        .map(|s| s.achieved_per_s)
        .fold(0.0, f64::max);
    let half = if capacity_per_s > 0.0 && !o.cpu {
        let n = steps.len() as u32;
        let h = step(
            &http,
            &rec,
            &publics,
            &passes,
            capacity_per_s / 2.0,
            2 * o.step,
            n,
            None,
        )
        .await?;
        eprintln!(
            "half capacity: offered {:.1}/s achieved {:.1}/s p99 {:.0} ms errors {:.2} %",
            h.offered_per_s,
            h.achieved_per_s,
            h.p99_ms,
            h.error_rate * 100.0
        );
        Some(h)
    } else {
        None
    };
    let books = match &before {
        Some(before) => cpu_books(&fleet, before, &steps).await,
        None => Vec::new(),
    };
    drop(fleet);
    Ok(Capacity {
        books,
        release_per_second: ((capacity_per_s * o.headroom).floor() as u32).max(1),
        capacity_per_s,
        steps,
        stopped_because: stopped,
        half,
    })
}

/// Joins and polls until admitted; the pass.
async fn pass(http: &reqwest::Client, rec: &Recorder, public: &str) -> Result<String> {
    // A fleet room refuses joins `503` while its store warms up (its
    // first 2 s): wait as told, a bounded number of times.
    let mut r = send(rec, "join", http.post(format!("{public}/queue/drop/join"))).await;
    for _ in 0..JOIN_RETRIES_MAX {
        if r.status != 503 {
            break;
        }
        tokio::time::sleep(r.retry_after().unwrap_or(Duration::from_secs(1))).await;
        r = send(rec, "join", http.post(format!("{public}/queue/drop/join"))).await;
    }
    let ticket = r
        .str("ticket")
        .with_context(|| format!("join answered {}", r.status))?
        .to_string();
    for _ in 0..PASS_POLLS_MAX {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let r = send(
            rec,
            "status",
            http.get(format!("{public}/queue/drop/status"))
                .bearer_auth(&ticket),
        )
        .await;
        if let Some(p) = r.str("pass") {
            return Ok(p.to_string());
        }
    }
    bail!("no pass after {PASS_POLLS_MAX} polls")
}

/// Orders still open after the steps are given this long to end.
pub const SETTLE_MAX: Duration = Duration::from_secs(60);

/// The books after a `--cpu` run: stock conserved, every order final,
/// units committed during the run between the checkouts answered
/// `confirmed` and those plus the ones not answered (one unit each; an
/// unanswered one is not replayed here, as `run`'s books do), and
/// `sluice audit` of a lone gateway's data dir.
async fn cpu_books(fleet: &Fleet, before: &serde_json::Value, steps: &[Step]) -> Vec<Check> {
    let target = fleet.first();
    let deadline = Instant::now() + SETTLE_MAX;
    let mut state = target.admin_state().await.ok();
    while Instant::now() < deadline
        && !state
            .as_ref()
            .is_some_and(|s| books::not_final(&books::order_counts(s)).is_empty())
    {
        tokio::time::sleep(books::SETTLE_POLL_EVERY).await;
        state = target.admin_state().await.ok();
    }
    let Some(state) = state else {
        return vec![Check::new(
            "admin state readable",
            vec!["GET /admin/state failed at the end of the run".into()],
            String::new(),
        )];
    };
    let after = books::levels(&state);
    let start = books::levels(before);
    let confirmed: u64 = steps.iter().map(|s| s.confirmed).sum();
    let failed: u64 = steps.iter().map(|s| s.failed).sum();
    let committed = |l: &std::collections::BTreeMap<String, books::Level>| {
        l.get(SKU).map_or(0, |x| x.committed)
    };
    let units = committed(&after) - committed(&start);
    let mut checks = vec![
        Check::new(
            "stock conserved, no oversell",
            books::stock_violations(&after),
            "available + reserved + committed = total".into(),
        ),
        Check::new(
            "no order stuck",
            books::not_final(&books::order_counts(&state)),
            format!("every order final within {SETTLE_MAX:?} of the end"),
        ),
        Check::new(
            "confirmed units = committed units",
            // A checkout whose answer was lost (the client's timeout) may
            // still have been confirmed: it may add a unit, never take one.
            if (confirmed as i64..=(confirmed + failed) as i64).contains(&units) {
                Vec::new()
            } else {
                vec![format!(
                    "{units} units committed during the run, {confirmed} checkouts answered confirmed and {failed} unanswered or refused"
                )]
            },
            format!(
                "{confirmed} confirmed, {failed} unanswered or refused, {units} units committed"
            ),
        ),
    ];
    checks.push(if fleet.shared() {
        Check::skipped(books::AUDIT, "a fleet's orders live in PostgreSQL")
    } else {
        books::audit(target).await
    });
    checks
}

/// The SKU every capacity checkout buys.
const SKU: &str = "capacity-sku";

/// Offers `rate` checkouts per second for `length`, open loop; with a
/// meter, the CPU its processes spent from just before the first request
/// to just after the last answer.
#[allow(clippy::too_many_arguments)]
async fn step(
    http: &reqwest::Client,
    rec: &Arc<Recorder>,
    publics: &[String],
    passes: &Arc<Vec<String>>,
    rate: f64,
    length: Duration,
    n: u32,
    meter: Option<&Meter>,
) -> Result<Step> {
    let total = (rate * length.as_secs_f64()).round().max(1.0) as u64;
    let start = Instant::now();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MAX));
    let mut tasks = tokio::task::JoinSet::new();
    let mut refused = 0u64;
    let cpu_start = match meter {
        Some(m) => Some((Instant::now(), m.read()?)),
        None => None,
    };
    let body = json!({"sku": SKU, "quantity": 1, "payment_method": "pm_ok"}).to_string();
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            refused += 1;
            continue;
        };
        let public = &publics[i as usize % publics.len()];
        let req = http
            .post(format!("{public}/checkout"))
            .bearer_auth(&passes[i as usize % passes.len()])
            .header("idempotency-key", format!("cap-{n}-{i:09}"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        let rec = rec.clone();
        tasks.spawn(async move {
            // Timed from its place in the schedule, not from when the loop
            // got round to it.
            let r = send_at(&rec, "checkout", req, due).await;
            drop(permit);
            (
                (r.status == 201 || r.status == 200) && r.str("state") == Some("confirmed"),
                r.elapsed.as_secs_f64() * 1000.0,
            )
        });
    }
    let mut latencies = Vec::new();
    let mut failed = refused;
    let mut confirmed = 0;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((true, ms)) => {
                confirmed += 1;
                latencies.push(ms);
            }
            Ok((false, ms)) => {
                failed += 1;
                latencies.push(ms);
            }
            Err(_) => failed += 1,
        }
    }
    let cpu = match (meter, cpu_start) {
        (Some(m), Some((at, r0))) => {
            let r1: Reading = m.read()?;
            Some(StepCpu {
                span_s: at.elapsed().as_secs_f64(),
                gateways_s: r1.gateways_s - r0.gateways_s,
                postgres_s: r1.postgres_s - r0.postgres_s,
            })
        }
        _ => None,
    };
    let elapsed = start.elapsed().as_secs_f64().max(length.as_secs_f64());
    latencies.sort_by(f64::total_cmp);
    Ok(Step {
        confirmed,
        failed,
        cpu,
        offered_per_s: rate,
        achieved_per_s: (total - failed) as f64 / elapsed,
        p50_ms: quantile(&latencies, 0.5).unwrap_or(0.0),
        p99_ms: quantile(&latencies, 0.99).unwrap_or(0.0),
        error_rate: failed as f64 / total as f64,
        ok: true,
    })
}
