//! The books at the end of a run, from the system's own records:
//! `/admin/state`, `sluice audit`, and the orders the shoppers were told
//! about. Every check passes, fails with the list of what is wrong, or is
//! skipped with the reason (e.g. no data dir to audit).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::gateway::Target;
use super::http::send;
use super::record::{OrderSeen, Recorder, Unanswered};
use super::shopper::FINAL_STATES;

/// Orders re-read at the same time at the end.
pub const ORDER_READS_CONCURRENT_MAX: usize = 32;
/// Violations listed per check, at most (the count is always exact).
pub const VIOLATIONS_LISTED_MAX: usize = 20;
/// How often the settle loop looks at `/admin/state`.
pub const SETTLE_POLL_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    /// `pass`, `fail` or `skipped`.
    pub result: String,
    pub detail: String,
    pub violations: Vec<String>,
}

impl Check {
    pub(crate) fn new(name: &str, violations: Vec<String>, detail: String) -> Check {
        let total = violations.len();
        let mut listed: Vec<String> = violations.into_iter().take(VIOLATIONS_LISTED_MAX).collect();
        if total > listed.len() {
            listed.push(format!("… and {} more", total - listed.len()));
        }
        Check {
            name: name.to_string(),
            result: if total == 0 { "pass" } else { "fail" }.to_string(),
            detail,
            violations: listed,
        }
    }

    pub fn skipped(name: &str, why: &str) -> Check {
        Check {
            name: name.to_string(),
            result: "skipped".into(),
            detail: why.to_string(),
            violations: Vec::new(),
        }
    }

    pub fn failed(&self) -> bool {
        self.result == "fail"
    }
}

/// Stock of one SKU as `/admin/state` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Level {
    pub total: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

pub fn levels(state: &Value) -> BTreeMap<String, Level> {
    state["inventory"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|x| {
                    let n = |k: &str| x[k].as_i64().unwrap_or(0);
                    Some((
                        x["sku"].as_str()?.to_string(),
                        Level {
                            total: n("total"),
                            available: n("available"),
                            reserved: n("reserved"),
                            committed: n("committed"),
                        },
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Orders by state from `/admin/state`.
pub fn order_counts(state: &Value) -> BTreeMap<String, i64> {
    state["orders"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                .collect()
        })
        .unwrap_or_default()
}

pub fn not_final(counts: &BTreeMap<String, i64>) -> Vec<String> {
    counts
        .iter()
        .filter(|(s, n)| **n > 0 && !FINAL_STATES.contains(&s.as_str()))
        .map(|(s, n)| format!("{n} orders still `{s}`"))
        .collect()
}

/// Stock conservation and no oversell, per SKU.
pub fn stock_violations(levels: &BTreeMap<String, Level>) -> Vec<String> {
    let mut v = Vec::new();
    for (sku, l) in levels {
        if l.available + l.reserved + l.committed != l.total {
            v.push(format!(
                "{sku}: available {} + reserved {} + committed {} ≠ total {}",
                l.available, l.reserved, l.committed, l.total
            ));
        }
        if l.committed > l.total {
            v.push(format!(
                "{sku}: oversold, committed {} > total {}",
                l.committed, l.total
            ));
        }
        if l.available < 0 || l.reserved < 0 || l.committed < 0 {
            v.push(format!("{sku}: a negative count {l:?}"));
        }
    }
    v
}

/// Units the gateway committed during the run against units in orders the
/// shoppers saw confirmed, per SKU.
pub fn confirmed_violations(
    before: &BTreeMap<String, Level>,
    after: &BTreeMap<String, Level>,
    orders: &[OrderSeen],
) -> Vec<String> {
    let mut confirmed: BTreeMap<&str, i64> = BTreeMap::new();
    for o in orders.iter().filter(|o| o.state == "confirmed") {
        *confirmed.entry(o.sku.as_str()).or_default() += i64::from(o.quantity);
    }
    after
        .iter()
        .filter_map(|(sku, l)| {
            let start = before.get(sku).map_or(0, |b| b.committed);
            let units = confirmed.get(sku.as_str()).copied().unwrap_or(0);
            (l.committed - start != units).then(|| {
                format!(
                    "{sku}: {} units committed during the run, {units} in confirmed orders",
                    l.committed - start
                )
            })
        })
        .collect()
}

/// The names of the stock and order books, in the order [`check`] runs
/// them (the paysim ledger and `sluice audit` apart): one list for the
/// rooms-only rehearsal that skips them and the tests that want them.
pub const ORDER_BOOKS: [&str; 7] = [REPLAYED, STOCK, STUCK, PRESENT, FINAL, CONFIRMED, ONE_ORDER];
const STOCK: &str = "stock conserved, no oversell";
const STUCK: &str = "no order stuck";
const PRESENT: &str = "every acknowledged order present";
const FINAL: &str = "every accepted order final";
const CONFIRMED: &str = "confirmed units = committed units";
const ONE_ORDER: &str = "one order per Idempotency-Key";
/// The store's own audit of a data dir.
pub const AUDIT: &str = "sluice audit";

/// Runs every check; `before` is `/admin/state` from the start of the run.
pub async fn check(
    target: &Target,
    rec: &Arc<Recorder>,
    http: &reqwest::Client,
    before: &Value,
    settle: Duration,
    audit_data_dir: bool,
) -> (Vec<Check>, BTreeMap<String, Level>) {
    let mut checks = Vec::new();
    let deadline = Instant::now() + settle;

    // First the checkouts whose answer was lost: replayed with their key,
    // so an order they made is known before the stock is read.
    checks.push(replay_unanswered(target, rec, http, deadline).await);

    // Wait (bounded) for the reconciler to bring every order to an end.
    let mut state = target.admin_state().await.ok();
    while Instant::now() < deadline {
        if state
            .as_ref()
            .is_some_and(|s| not_final(&order_counts(s)).is_empty())
        {
            break;
        }
        tokio::time::sleep(SETTLE_POLL_EVERY).await;
        state = target.admin_state().await.ok();
    }
    let Some(state) = state else {
        checks.push(Check::new(
            "admin state readable",
            vec!["GET /admin/state failed at the end of the run".into()],
            String::new(),
        ));
        return (checks, BTreeMap::new());
    };
    let after = levels(&state);
    checks.push(Check::new(
        STOCK,
        stock_violations(&after),
        "available + reserved + committed = total and committed ≤ total, per SKU".into(),
    ));
    checks.push(Check::new(
        STUCK,
        not_final(&order_counts(&state)),
        format!("every order final within {settle:?} of the end"),
    ));

    let orders = reread_orders(target, rec, http, deadline).await;
    let missing: Vec<String> = orders
        .iter()
        .filter(|(_, status, _)| *status != 200)
        .map(|(o, status, _)| {
            format!(
                "order {} acknowledged at {:.1} s: GET /orders answered {status}",
                o.order_id, o.acked_at_s
            )
        })
        .collect();
    checks.push(Check::new(
        PRESENT,
        missing,
        format!("{} orders re-read after the run", orders.len()),
    ));
    let open: Vec<String> = orders
        .iter()
        .filter(|(_, status, st)| *status == 200 && !FINAL_STATES.contains(&st.as_str()))
        .map(|(o, _, st)| format!("order {} is still `{st}`", o.order_id))
        .collect();
    checks.push(Check::new(
        FINAL,
        open,
        "re-read with the pass that made it".into(),
    ));
    let seen: Vec<OrderSeen> = orders
        .into_iter()
        .map(|(mut o, status, st)| {
            o.present = status == 200;
            if o.present {
                o.state = st;
            }
            o
        })
        .collect();
    checks.push(Check::new(
        CONFIRMED,
        confirmed_violations(&levels(before), &after, &seen),
        "committed during the run vs units in orders shoppers saw confirmed".into(),
    ));
    rec.with(|i| i.orders = seen);

    let anomalies = rec.with(|i| i.anomalies.clone());
    checks.push(Check::new(
        ONE_ORDER,
        anomalies,
        "every replay answered with the same order".into(),
    ));
    checks.push(impatient_check(rec));
    checks.push(if audit_data_dir {
        audit(target).await
    } else {
        Check::skipped(
            AUDIT,
            "a fleet's orders live in PostgreSQL, not in one gateway's data_dir",
        )
    });
    checks.push(ledger_check(target, &rec.with(|i| i.orders.clone())).await);
    (checks, after)
}

/// Impatient refreshes (a poll 150 ms after the join's answer) served
/// instead of `429`. Only one that surely reached the gateway before its
/// time is a miss; one whose join or own answer was so slow that it may
/// have been on time by the gateway's clock is counted apart.
pub fn impatient_check(rec: &Recorder) -> Check {
    let (served, late, held) = rec.with(|i| (i.impatient_served, i.impatient_late, i.held_back));
    Check::new(
        "impatient refreshes held back",
        if served > 0 {
            vec![format!("{served} early polls were served instead of 429")]
        } else {
            Vec::new()
        },
        format!(
            "a poll before poll_after_s gets 429: {held} held back; {late} served that may have been on time (a slow answer)"
        ),
    )
}

const LEDGER: &str = "one capture per order, each matched (paysim ledger)";

async fn ledger_check(target: &Target, orders: &[OrderSeen]) -> Check {
    match target.paysim_ledger().await {
        None => Check::skipped(
            LEDGER,
            "the in-process simulated provider has no external ledger; `sluice audit` checks captures in the store",
        ),
        Some(Err(e)) => Check::new(LEDGER, vec![format!("{e:#}")], String::new()),
        Some(Ok(payments)) => {
            let states: BTreeMap<&str, &str> = orders
                .iter()
                .map(|o| (o.order_id.as_str(), o.state.as_str()))
                .collect();
            Check::new(
                LEDGER,
                ledger_violations(&payments, &states),
                format!("{} payments in paysim's ledger", payments.len()),
            )
        }
    }
}

/// At most one capture per order, and every captured payment belongs to
/// an order shoppers saw confirmed, or was refunded.
pub fn ledger_violations(payments: &[Value], states: &BTreeMap<&str, &str>) -> Vec<String> {
    let mut v = Vec::new();
    let mut per_order: BTreeMap<&str, u64> = BTreeMap::new();
    for p in payments {
        let order = p["order_id"].as_str().unwrap_or("?");
        let captures = p["captures"].as_u64().unwrap_or(0);
        let refunds = p["refunds"].as_u64().unwrap_or(0);
        *per_order.entry(order).or_default() += captures;
        if captures > 0 && refunds == 0 {
            match states.get(order) {
                Some(&"confirmed") => {}
                Some(state) => v.push(format!(
                    "payment {} captured, not refunded, but order {order} is `{state}`",
                    p["id"]
                )),
                None => v.push(format!(
                    "payment {} captured, not refunded, for order {order} no shopper saw",
                    p["id"]
                )),
            }
        }
    }
    for (order, n) in per_order {
        if n > 1 {
            v.push(format!("order {order} captured {n} times"));
        }
    }
    v
}

/// A rehearsal whose faults did not happen proves nothing: a fault that
/// failed (or was cut short by the end of the run) fails the verdict.
pub fn faults_check(faults: &[(f64, String)]) -> Check {
    let failed: Vec<String> = faults
        .iter()
        .filter(|(_, what)| what.contains("FAILED") || what.contains("not played"))
        .map(|(t, what)| format!("{t:.1} s: {what}"))
        .collect();
    Check::new(
        "faults played as scheduled",
        failed,
        format!("{} fault events", faults.len()),
    )
}

const REPLAYED: &str = "every lost checkout answer recovered by its Idempotency-Key";

/// Replays every checkout whose answer never arrived (each attempt timed
/// out or failed, or the run ended mid-call) with the same key and body, as
/// a client recovering a lost answer does: an order the lost attempt made
/// comes back; one it did not make is made now and counted like any other.
/// A key still without an answer at `deadline` is a violation.
async fn replay_unanswered(
    target: &Target,
    rec: &Arc<Recorder>,
    http: &reqwest::Client,
    deadline: Instant,
) -> Check {
    let open: Vec<(String, Unanswered)> = rec.with(|i| {
        i.unanswered
            .iter()
            .map(|(k, u)| (k.clone(), u.clone()))
            .collect()
    });
    let sem = Arc::new(tokio::sync::Semaphore::new(ORDER_READS_CONCURRENT_MAX));
    let mut tasks = tokio::task::JoinSet::new();
    for (key, u) in open.iter().cloned() {
        let (sem, http, rec) = (sem.clone(), http.clone(), rec.clone());
        let url = format!("{}/checkout", target.public);
        tasks.spawn(async move {
            let Ok(_permit) = sem.acquire().await else {
                return Some(format!("Idempotency-Key {key}: not replayed"));
            };
            loop {
                let req = http
                    .post(&url)
                    .bearer_auth(&u.pass)
                    .header("idempotency-key", &key)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(u.body.clone());
                let r = send(&rec, "checkout (books)", req).await;
                match (r.status, r.str("order_id"), r.str("state")) {
                    (200 | 201, Some(id), Some(state)) => {
                        rec.order(
                            &key,
                            OrderSeen {
                                order_id: id.to_string(),
                                sku: u.sku.clone(),
                                quantity: u.quantity,
                                state: state.to_string(),
                                acked_at_s: rec.now_s(),
                                gateway: 0,
                                pass: u.pass.clone(),
                                present: true,
                            },
                        );
                        return None;
                    }
                    (0 | 409 | 429 | 500..=599, ..) if Instant::now() < deadline => {
                        tokio::time::sleep(SETTLE_POLL_EVERY).await;
                    }
                    (0 | 409 | 429 | 500..=599, ..) => {
                        return Some(format!(
                            "Idempotency-Key {key}: still answered {} at the end of the settle time",
                            r.status
                        ));
                    }
                    // Refused (sold out, a pass no longer good for a new
                    // order): the key made no order.
                    _ => return None,
                }
            }
        });
    }
    let mut lost = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(Some(v)) = r {
            lost.push(v);
        }
    }
    lost.sort();
    let found = rec.with(|i| open.iter().filter(|(k, _)| i.keys.contains_key(k)).count());
    Check::new(
        REPLAYED,
        lost,
        format!(
            "{} checkouts without a final answer replayed with their key; {found} orders among them",
            open.len()
        ),
    )
}

/// Re-reads every acknowledged order with its pass, until it is final or
/// `deadline`; (order, last status, last state).
async fn reread_orders(
    target: &Target,
    rec: &Arc<Recorder>,
    http: &reqwest::Client,
    deadline: Instant,
) -> Vec<(OrderSeen, u16, String)> {
    let orders = rec.with(|i| i.orders.clone());
    let sem = Arc::new(tokio::sync::Semaphore::new(ORDER_READS_CONCURRENT_MAX));
    let mut tasks = tokio::task::JoinSet::new();
    for (n, o) in orders.into_iter().enumerate() {
        let (sem, http, rec) = (sem.clone(), http.clone(), rec.clone());
        let url = format!("{}/orders/{}", target.public, o.order_id);
        tasks.spawn(async move {
            let Ok(_permit) = sem.acquire().await else {
                return (n, o, 0, String::new());
            };
            loop {
                let r = send(&rec, "order (books)", http.get(&url).bearer_auth(&o.pass)).await;
                let state = r.str("state").unwrap_or_default().to_string();
                let done = r.status == 200 && FINAL_STATES.contains(&state.as_str());
                if done || Instant::now() >= deadline {
                    return (n, o, r.status, state);
                }
                tokio::time::sleep(SETTLE_POLL_EVERY).await;
            }
        });
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(x) = r {
            out.push(x);
        }
    }
    out.sort_by_key(|x| x.0);
    out.into_iter().map(|(_, o, s, st)| (o, s, st)).collect()
}

/// `sluice audit --data-dir DIR`: exit 0 clean, 1 with a line per violation.
pub async fn audit(target: &Target) -> Check {
    const NAME: &str = AUDIT;
    let (Some(sluice), Some(dir)) = (&target.sluice, &target.data_dir) else {
        return Check::skipped(NAME, "needs --data-dir and the sluice binary");
    };
    let out = tokio::process::Command::new(sluice)
        .arg("audit")
        .arg("--data-dir")
        .arg(dir)
        .output()
        .await;
    match out {
        Ok(out) if out.status.success() => Check::new(NAME, Vec::new(), "exit 0".into()),
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.is_empty() {
                lines.push(format!("exit {}", out.status));
            }
            Check::new(NAME, lines, format!("exit {}", out.status))
        }
        Err(e) => Check::new(NAME, vec![format!("could not run: {e}")], String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(total: i64, available: i64, reserved: i64, committed: i64) -> Level {
        Level {
            total,
            available,
            reserved,
            committed,
        }
    }

    #[test]
    fn stock_that_does_not_add_up_or_is_oversold_is_listed() {
        let mut l = BTreeMap::new();
        l.insert("a".to_string(), level(10, 5, 0, 5));
        assert!(stock_violations(&l).is_empty());
        l.insert("b".to_string(), level(10, 5, 1, 5));
        l.insert("c".to_string(), level(10, -1, 0, 11));
        let v = stock_violations(&l);
        assert!(v.iter().any(|x| x.starts_with("b: available")), "{v:?}");
        assert!(v.iter().any(|x| x.contains("oversold")), "{v:?}");
    }

    #[test]
    fn committed_units_must_match_confirmed_orders() {
        let before: BTreeMap<_, _> = [("a".to_string(), level(10, 10, 0, 0))].into();
        let after: BTreeMap<_, _> = [("a".to_string(), level(10, 7, 0, 3))].into();
        let order = |q: u32, state: &str| OrderSeen {
            order_id: "o".into(),
            sku: "a".into(),
            quantity: q,
            state: state.into(),
            acked_at_s: 0.0,
            gateway: 0,
            pass: String::new(),
            present: true,
        };
        assert!(confirmed_violations(
            &before,
            &after,
            &[
                order(1, "confirmed"),
                order(2, "confirmed"),
                order(4, "declined")
            ]
        )
        .is_empty());
        assert_eq!(
            confirmed_violations(&before, &after, &[order(1, "confirmed")]).len(),
            1
        );
    }

    #[test]
    fn the_ledger_allows_one_capture_per_order_matched_to_a_confirmed_order() {
        let states: BTreeMap<&str, &str> = [("o1", "confirmed"), ("o2", "declined")].into();
        let pay = |id: &str, order: &str, captures: u64, refunds: u64| serde_json::json!({"id": id, "order_id": order, "captures": captures, "refunds": refunds});
        assert!(
            ledger_violations(&[pay("p1", "o1", 1, 0), pay("p2", "o2", 0, 0)], &states).is_empty()
        );
        assert!(
            ledger_violations(&[pay("p2", "o2", 1, 1)], &states).is_empty(),
            "refunded"
        );
        let v = ledger_violations(
            &[
                pay("p1", "o1", 1, 0),
                pay("p3", "o1", 1, 0),
                pay("p2", "o2", 1, 0),
                pay("p4", "o9", 1, 0),
            ],
            &states,
        );
        assert_eq!(v.len(), 3, "{v:?}");
    }

    #[test]
    fn orders_not_final_are_stuck() {
        let s = serde_json::json!({"orders": {"confirmed": 3, "authorizing": 1, "reserved": 0}});
        assert_eq!(
            not_final(&order_counts(&s)),
            vec!["1 orders still `authorizing`"]
        );
    }
}
