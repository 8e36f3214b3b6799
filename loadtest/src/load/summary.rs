//! The numbers of a run (`summary.json`), computed from the recorder: who
//! got in at what pace, how long they waited, how fast checkout answered,
//! what they bought, and the verdict of the books.

use std::collections::BTreeMap;

use serde::Serialize;

use super::books::{Check, Level};
use super::record::{quantile, Inner, Outcome, Sample};
use super::scenario::Scenario;

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub target: TargetInfo,
    pub configured: Configured,
    pub shoppers: Shoppers,
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Confirmed orders per shopper started.
    pub conversion: f64,
    pub admitted: Admitted,
    pub wait_s: Quantiles,
    pub checkout_ms: Quantiles,
    /// Responses by route, then by status ("0" = timeout or connection error).
    pub responses: BTreeMap<String, BTreeMap<String, u64>>,
    pub orders: Orders,
    pub faults: Vec<FaultAt>,
    /// Each gateway's share, as the shoppers saw it.
    pub gateways: Vec<GatewaySummary>,
    /// Stock per SKU at the end, from `/admin/state`.
    pub inventory_end: BTreeMap<String, Level>,
    pub books: Vec<Check>,
    /// The phases of a backend that changed mid-run (one phase otherwise):
    /// release rate, checkout p99 and failures once settled.
    pub phases: Vec<super::follow::Phase>,
    /// A bot-farm rehearsal's figures (`[farm]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_farm: Option<super::bot_farm::FarmReport>,
    /// `pass` or `fail`.
    pub verdict: String,
    pub violations: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    pub public: String,
    pub admin: String,
    /// The harness started the gateway itself.
    pub managed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Configured {
    pub release_per_second: f64,
    pub burst: f64,
    pub max_active: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Shoppers {
    pub planned: u64,
    pub started: u64,
    pub finished: u64,
    /// Impatient early polls answered 429.
    pub held_back: u64,
    /// Impatient early polls served though surely early (must be 0).
    pub impatient_served: u64,
    /// Impatient polls served that may have been on time by the gateway's
    /// clock (their join's or their own answer was slow).
    pub impatient_late: u64,
    pub rejoins: u64,
    pub checkout_retries: u64,
    /// Waiting shoppers answered by another gateway after a move.
    pub moved_waiting: u64,
    /// Tickets lost while waiting, by the answer and by the second of the
    /// run in which it came (`"expired": {"53": 12}`).
    pub tickets_lost: BTreeMap<String, BTreeMap<u64, u64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Admitted {
    /// Admissions counted by the gateway during the run.
    pub gateway_total: u64,
    /// Shoppers who saw `admitted`.
    pub shoppers_total: u64,
    /// Least-squares slope of the gateway's admissions while they rose,
    /// per second.
    pub rate_per_s: f64,
    /// Highest admissions in any one-second window.
    pub peak_per_s: f64,
    /// Seconds from the first to the last rise.
    pub window_s: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Orders {
    pub acknowledged: u64,
    pub by_state: BTreeMap<String, u64>,
}

/// One gateway of the run.
#[derive(Debug, Clone, Serialize)]
pub struct GatewaySummary {
    pub index: usize,
    pub public: String,
    pub requests: u64,
    /// Requests with no HTTP answer (refused, reset, timed out).
    pub failed: u64,
    /// Shoppers whose pass it handed out.
    pub admissions: u64,
    /// Orders it acknowledged (`200`/`201` to `POST /checkout`).
    pub orders: u64,
    /// Checkout calls to it with no HTTP answer, and when each was sent
    /// (seconds into the run; the first 10,000): one sent before the
    /// gateway's SIGKILL was in flight when it died.
    pub checkouts_unanswered: u64,
    pub checkouts_unanswered_sent_s: Vec<f64>,
    /// Answered requests' latency, ms, from when each was due.
    pub latency_ms: Quantiles,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultAt {
    pub t_s: f64,
    pub what: String,
}

/// What the run knows besides the recorder.
pub struct RunInfo<'a> {
    pub scenario: &'a Scenario,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub planned: u64,
    pub target: TargetInfo,
    pub configured: Configured,
    /// Every gateway's public URL, in order.
    pub publics: Vec<String>,
}

impl Summary {
    /// The summary of a finished run; the verdict fails if any check did.
    pub fn assemble(
        run: RunInfo<'_>,
        i: &Inner,
        books: Vec<Check>,
        phases: Vec<super::follow::Phase>,
        inventory_end: BTreeMap<String, Level>,
    ) -> Summary {
        let (admitted, wait_s, checkout_ms, mut shoppers) = numbers(i);
        shoppers.planned = run.planned;
        let confirmed = i.outcomes.get(&Outcome::Confirmed).copied().unwrap_or(0);
        let mut responses: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((route, status), n) in &i.responses {
            *responses
                .entry(route.clone())
                .or_default()
                .entry(status.to_string())
                .or_default() += n;
        }
        let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
        for o in &i.orders {
            *by_state.entry(o.state.clone()).or_default() += 1;
        }
        let violations: Vec<String> = books
            .iter()
            .filter(|c| c.failed())
            .flat_map(|c| c.violations.iter().map(move |v| format!("{}: {v}", c.name)))
            .collect();
        Summary {
            scenario: run.scenario.name.clone(),
            description: run.scenario.description.clone(),
            seed: run.scenario.seed,
            started_unix_s: run.started_unix_s,
            duration_s: run.duration_s,
            target: run.target,
            configured: run.configured,
            conversion: if i.shoppers_started > 0 {
                confirmed as f64 / i.shoppers_started as f64
            } else {
                0.0
            },
            shoppers,
            outcomes: i.outcomes.clone(),
            admitted,
            wait_s,
            checkout_ms,
            responses,
            orders: Orders {
                acknowledged: i.orders.len() as u64,
                by_state,
            },
            faults: i
                .faults
                .iter()
                .map(|(t, w)| FaultAt {
                    t_s: *t,
                    what: w.clone(),
                })
                .collect(),
            gateways: run
                .publics
                .iter()
                .enumerate()
                .map(|(g, public)| {
                    let stats = i.gateways.get(g).cloned().unwrap_or_default();
                    GatewaySummary {
                        index: g,
                        public: public.clone(),
                        requests: stats.requests,
                        failed: stats.failed,
                        admissions: stats.admissions,
                        orders: i.orders.iter().filter(|o| o.gateway == g).count() as u64,
                        checkouts_unanswered: stats.checkouts_lost,
                        checkouts_unanswered_sent_s: stats.checkouts_lost_sent_s,
                        latency_ms: quantiles(
                            stats.latencies_ms.iter().map(|ms| f64::from(*ms)).collect(),
                        ),
                    }
                })
                .collect(),
            verdict: if violations.is_empty() {
                "pass"
            } else {
                "fail"
            }
            .into(),
            violations,
            books,
            phases,
            inventory_end,
            bot_farm: None,
        }
    }
}

pub fn quantiles(mut v: Vec<f64>) -> Quantiles {
    v.sort_by(f64::total_cmp);
    let q = |p| quantile(&v, p).unwrap_or(0.0);
    Quantiles {
        count: v.len() as u64,
        p50: q(0.5),
        p95: q(0.95),
        p99: q(0.99),
        max: v.last().copied().unwrap_or(0.0),
    }
}

/// Admissions so far at each sample, across gateway restarts (the
/// gateway's counter starts again from 0 after one).
pub fn cumulative_admitted(samples: &[Sample]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(samples.len());
    let (mut cum, mut prev) = (0u64, 0u64);
    for s in samples.iter().filter(|s| s.up) {
        cum += if s.admitted_total >= prev {
            s.admitted_total - prev
        } else {
            s.admitted_total
        };
        prev = s.admitted_total;
        out.push((s.t_s, cum as f64));
    }
    out
}

/// (rate by least squares between the first and last rise, peak over one
/// second, window, total).
pub fn admitted_rate(cum: &[(f64, f64)]) -> (f64, f64, f64, f64) {
    let first_value = cum.first().map_or(0.0, |p| p.1);
    let total = cum.last().map_or(0.0, |p| p.1) - first_value;
    let first = cum.iter().position(|p| p.1 > first_value);
    let last = cum
        .iter()
        .rposition(|p| p.1 < cum.last().map_or(0.0, |l| l.1));
    let (Some(a), Some(b)) = (first, last.map(|l| l + 1)) else {
        return (0.0, 0.0, 0.0, total);
    };
    let window = &cum[a..=b.min(cum.len() - 1)];
    let n = window.len() as f64;
    let slope = if window.len() >= 2 {
        let mx = window.iter().map(|p| p.0).sum::<f64>() / n;
        let my = window.iter().map(|p| p.1).sum::<f64>() / n;
        let sxy: f64 = window.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = window.iter().map(|p| (p.0 - mx).powi(2)).sum();
        if sxx > 0.0 {
            sxy / sxx
        } else {
            0.0
        }
    } else {
        0.0
    };
    let mut peak: f64 = 0.0;
    let mut j = 0;
    for i in 0..cum.len() {
        while cum[i].0 - cum[j].0 > 1.0 {
            j += 1;
        }
        peak = peak.max(cum[i].1 - cum[j].1);
    }
    let span = window.last().map_or(0.0, |p| p.0) - window.first().map_or(0.0, |p| p.0);
    (slope, peak, span, total)
}

/// The summary's numbers from what the run recorded.
pub fn numbers(i: &Inner) -> (Admitted, Quantiles, Quantiles, Shoppers) {
    let cum = cumulative_admitted(&i.samples);
    let (rate_per_s, peak_per_s, window_s, total) = admitted_rate(&cum);
    let admitted = Admitted {
        gateway_total: total as u64,
        shoppers_total: i.waits_s.len() as u64,
        rate_per_s,
        peak_per_s,
        window_s,
    };
    let checkout: Vec<f64> = i
        .checkout_ms
        .iter()
        .flatten()
        .map(|ms| f64::from(*ms))
        .collect();
    let shoppers = Shoppers {
        planned: 0,
        started: i.shoppers_started,
        finished: i.shoppers_done,
        held_back: i.held_back,
        impatient_served: i.impatient_served,
        impatient_late: i.impatient_late,
        rejoins: i.rejoins,
        checkout_retries: i.checkout_retries,
        moved_waiting: i.moved_waiting,
        tickets_lost: {
            let mut by: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
            for (t, why) in &i.tickets_lost {
                *by.entry(why.clone())
                    .or_default()
                    .entry(*t as u64)
                    .or_default() += 1;
            }
            by
        },
    };
    (
        admitted,
        quantiles(i.waits_s.clone()),
        quantiles(checkout),
        shoppers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, admitted_total: u64) -> Sample {
        Sample {
            t_s,
            up: true,
            admitted_total,
            ..Sample::default()
        }
    }

    #[test]
    fn admissions_add_up_across_a_restart() {
        let s = [
            sample(0.0, 0),
            sample(1.0, 10),
            sample(2.0, 3),
            sample(3.0, 8),
        ];
        let cum: Vec<f64> = cumulative_admitted(&s).iter().map(|p| p.1).collect();
        assert_eq!(cum, vec![0.0, 10.0, 13.0, 18.0]);
    }

    #[test]
    fn the_rate_is_the_slope_while_admissions_rise() {
        // A burst of 20 at once, then 10 per second for 5 s, then nothing.
        let mut cum = vec![(0.0, 0.0)];
        for k in 1..=11 {
            let t = f64::from(k) * 0.5;
            cum.push((t, 20.0 + 10.0 * (t - 0.5)));
        }
        cum.push((6.0, 70.0));
        cum.push((6.5, 70.0));
        let (rate, peak, window, total) = admitted_rate(&cum);
        assert!((rate - 10.0).abs() < 0.5, "{rate}");
        assert!(peak >= 20.0, "{peak}");
        assert!((window - 5.0).abs() < 0.6, "{window}");
        assert_eq!(total, 70.0);
    }
}
