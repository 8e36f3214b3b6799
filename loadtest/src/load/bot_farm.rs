//! The verdict of a bot-farm rehearsal (`[farm]`), from what the farm and
//! the honest shoppers did and the orders the books re-read:
//!
//! - **Units by accounts** (with `enqueue.required`): the farm's share of
//!   the units sold is at most its share of the accounts in the sale plus
//!   [`SHARE_SLACK`] (2 points: the farm's accounts all reach the front,
//!   while only the honest shoppers early enough buy).
//! - **One place per account** (with `enqueue.required`): no farm account
//!   held two places.
//! - **Joins priced by the difficulty** (the challenge alone): the farm's
//!   joins that got a place per CPU-second of its threads are within
//!   [`RATE_TOLERANCE`] of what the difficulty predicts, its hash rate
//!   measured in the same run × 2^-bits (the bits the room was configured
//!   with, not the ones its challenges stated); and a replayed solution
//!   never gave a second place.
//! - **Held passes reclaimed**: with `pass_idle_s`, every pass the farm
//!   held longer than `pass_idle_s` + [`IDLE_SLACK_S`] before the end was
//!   ended idle (`sluice_passes_ended_total{reason="idle"}`); with enqueue
//!   tokens, counted from when the farm stopped joining ([`idle_from`]).

use serde::Serialize;

use super::books::Check;
use super::record::{quantile, FarmSeen, OrderSeen};
use super::scenario::Scenario;

/// Points of the units the farm may get above its share of accounts.
pub const SHARE_SLACK: f64 = 0.02;
/// How far the farm's joins per CPU-second may be from the prediction.
pub const RATE_TOLERANCE: f64 = 0.20;
/// Fewest farm places that make the rate check mean something (the count
/// of solutions is a Poisson draw: 100 gives about ±10 % at one sigma).
pub const PLACES_MIN: u64 = 100;
/// A pass idle past `pass_idle_s` is ended by the next release pass (about
/// a second), counted then.
pub const IDLE_SLACK_S: f64 = 3.0;

/// The rehearsal's figures, in `summary.json` as `bot_farm`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FarmReport {
    pub enqueue_required: bool,
    pub difficulty_bits: Vec<u8>,
    pub farm_accounts: u64,
    pub honest_accounts: u64,
    pub farm_account_share: f64,
    pub units_farm: i64,
    pub units_honest: i64,
    pub farm_unit_share: f64,
    pub solvers: u32,
    pub farm_cpu_s: f64,
    pub hashes: u64,
    pub hashes_per_cpu_s: f64,
    pub joins: u64,
    pub places: u64,
    pub joins_placed_per_cpu_s: f64,
    pub predicted_per_cpu_s: f64,
    pub replays: u64,
    pub replay_new_places: u64,
    pub refused: std::collections::BTreeMap<String, u64>,
    pub addresses_used: u64,
    /// Distinct places per farm account (all of them for one `""`
    /// account when the room takes no tokens): the most, and the mean.
    pub places_per_account_max: u64,
    pub places_per_account_mean: f64,
    pub passes: u64,
    pub passes_held: u64,
    pub passes_reclaimed_idle: Option<u64>,
    /// Seconds the honest shoppers' phones spent on a challenge.
    pub honest_solve_s_p50: f64,
    pub honest_solve_s_p95: f64,
}

/// The report's figures from the record, the orders re-read by the books
/// and the gateway's count of passes ended idle.
pub fn report(
    scenario: &Scenario,
    f: &FarmSeen,
    orders: &[OrderSeen],
    honest_accounts: u64,
    reclaimed_idle: Option<u64>,
) -> FarmReport {
    let setup = scenario.farm.as_ref();
    let required = scenario
        .gateway
        .enqueue
        .as_ref()
        .is_some_and(|e| e.required);
    // The farm's accounts whether or not the room asks for them: with the
    // challenge alone its share of the units is set against them too.
    let farm_accounts = setup.map_or(0, |s| u64::from(s.accounts));
    let units = |farm: bool| -> i64 {
        orders
            .iter()
            .filter(|o| o.state == "confirmed" && f.orders.contains(&o.order_id) == farm)
            .map(|o| i64::from(o.quantity))
            .sum()
    };
    let (units_farm, units_honest) = (units(true), units(false));
    let places: u64 = f.places.values().map(|s| s.len() as u64).sum();
    // The difficulty the room was configured with, not the one its
    // challenges stated: a gateway that asked for less would let the farm
    // in faster than predicted, and fail.
    let configured_bits = scenario
        .gateway
        .challenge
        .as_ref()
        .map_or(0, |c| c.difficulty_bits);
    let solved: u64 = f.bits.values().sum();
    let expected_hashes = solved as f64 * 2f64.powi(i32::from(configured_bits));
    let hashes_per_cpu_s = ratio(f.hashes as f64, f.solve_cpu_s);
    let mut solve = f.honest_solve_s.clone();
    solve.sort_by(f64::total_cmp);
    FarmReport {
        enqueue_required: required,
        difficulty_bits: f.bits.keys().copied().collect(),
        farm_accounts,
        honest_accounts,
        farm_account_share: ratio(
            farm_accounts as f64,
            (farm_accounts + honest_accounts) as f64,
        ),
        units_farm,
        units_honest,
        farm_unit_share: ratio(units_farm as f64, (units_farm + units_honest) as f64),
        solvers: f.solvers,
        farm_cpu_s: f.cpu_s,
        hashes: f.hashes,
        hashes_per_cpu_s,
        joins: f.joins,
        places,
        joins_placed_per_cpu_s: ratio(places as f64, f.cpu_s),
        predicted_per_cpu_s: hashes_per_cpu_s * ratio(solved as f64, expected_hashes),
        replays: f.replays,
        replay_new_places: f.replay_new_places,
        refused: f.refused.clone(),
        addresses_used: f.addresses_used,
        places_per_account_max: f.places.values().map(|s| s.len() as u64).max().unwrap_or(0),
        places_per_account_mean: ratio(places as f64, f.places.len() as f64),
        passes: f.passes,
        passes_held: f.held_at_s.len() as u64,
        passes_reclaimed_idle: reclaimed_idle,
        honest_solve_s_p50: quantile(&solve, 0.5).unwrap_or(0.0),
        honest_solve_s_p95: quantile(&solve, 0.95).unwrap_or(0.0),
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The farm's checks; `end_s` is when the idle count was read.
pub fn checks(scenario: &Scenario, r: &FarmReport, f: &FarmSeen, end_s: f64) -> Vec<Check> {
    let mut out = Vec::new();
    if r.enqueue_required {
        out.push(units_check(r));
        out.push(one_place_check(r, f));
    } else {
        out.push(rate_check(r));
    }
    out.push(idle_check(scenario, r, f, end_s));
    out
}

fn units_check(r: &FarmReport) -> Check {
    let bar = r.farm_account_share + SHARE_SLACK;
    let mut v = Vec::new();
    if r.farm_unit_share > bar {
        v.push(format!(
            "the farm bought {:.1} % of the units ({} of {}), more than its {:.1} % of the accounts + 2 points",
            r.farm_unit_share * 100.0,
            r.units_farm,
            r.units_farm + r.units_honest,
            r.farm_account_share * 100.0
        ));
    }
    if r.units_honest + r.units_farm == 0 {
        v.push("nothing was sold: the scenario does not test it".into());
    }
    Check::new(
        "farm: units by accounts",
        v,
        format!(
            "farm {} units, honest {} ({:.1} % to the farm; its accounts {} of {}, {:.1} %)",
            r.units_farm,
            r.units_honest,
            r.farm_unit_share * 100.0,
            r.farm_accounts,
            r.farm_accounts + r.honest_accounts,
            r.farm_account_share * 100.0
        ),
    )
}

fn one_place_check(r: &FarmReport, f: &FarmSeen) -> Check {
    let mut v: Vec<String> = f
        .places
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(a, s)| format!("account {a} held {} places: {s:?}", s.len()))
        .collect();
    if f.joins < 2 * r.farm_accounts {
        v.push(format!(
            "the farm joined {} times with {} accounts: too few reuses to test it",
            f.joins, r.farm_accounts
        ));
    }
    Check::new(
        "farm: one place per account",
        v,
        format!(
            "{} joins from {} addresses with {} accounts gave {} places (at most {} per account)",
            r.joins, r.addresses_used, r.farm_accounts, r.places, r.places_per_account_max
        ),
    )
}

fn rate_check(r: &FarmReport) -> Check {
    let mut v = Vec::new();
    let (got, want) = (r.joins_placed_per_cpu_s, r.predicted_per_cpu_s);
    if want <= 0.0 || (got - want).abs() > RATE_TOLERANCE * want {
        v.push(format!(
            "{got:.2} places per CPU-second, {want:.2} predicted (more than {:.0} % apart)",
            RATE_TOLERANCE * 100.0
        ));
    }
    if r.places < PLACES_MIN {
        v.push(format!(
            "{} places: too few to judge the rate (at least {PLACES_MIN})",
            r.places
        ));
    }
    if r.replay_new_places > 0 {
        v.push(format!(
            "{} replayed solutions got a second place",
            r.replay_new_places
        ));
    }
    Check::new(
        "farm: joins priced by the difficulty",
        v,
        format!(
            "{} places in {:.1} CPU-s on {} threads: {got:.2}/CPU-s; predicted {:.0} H/CPU-s × 2^-{:?} = {want:.2}; {} replays, {} new places",
            r.places, r.farm_cpu_s, r.solvers, r.hashes_per_cpu_s, r.difficulty_bits, r.replays, r.replay_new_places
        ),
    )
}

fn idle_check(scenario: &Scenario, r: &FarmReport, f: &FarmSeen, end_s: f64) -> Check {
    const NAME: &str = "farm: held passes reclaimed idle";
    let Some(idle_s) = scenario.gateway.pass_idle_s else {
        return Check::skipped(NAME, "the room has no `pass_idle_s`");
    };
    let due = f
        .held_at_s
        .iter()
        .filter(|&&t| idle_from(scenario, f, t) + f64::from(idle_s) + IDLE_SLACK_S <= end_s)
        .count() as u64;
    let reclaimed = r.passes_reclaimed_idle.unwrap_or(0);
    let mut v = Vec::new();
    if r.passes_reclaimed_idle.is_none() {
        v.push("the gateway's metrics could not be read".into());
    }
    if reclaimed < due {
        v.push(format!(
            "{due} held passes were idle past pass_idle_s ({idle_s} s), {reclaimed} ended idle"
        ));
    }
    if due == 0 {
        v.push("no held pass was idle long enough: the scenario does not test it".into());
    }
    Check::new(
        NAME,
        v,
        format!(
            "{} passes held, {due} idle past {idle_s} s by the end, {reclaimed} ended idle",
            r.passes_held
        ),
    )
}

/// When a pass the farm held at `held_s` began to be idle: then, or, in a
/// room with enqueue tokens, once the farm stopped joining. A join with an
/// account that holds a place is answered as a status call of that place,
/// and a status call is the pass's use: a farm that keeps joining with its
/// accounts keeps their held passes alive (one solved challenge a join).
pub fn idle_from(scenario: &Scenario, f: &FarmSeen, held_s: f64) -> f64 {
    let accounts = scenario
        .gateway
        .enqueue
        .as_ref()
        .is_some_and(|e| e.required);
    if accounts {
        held_s.max(f.stopped_s)
    } else {
        held_s
    }
}

/// `sluice_passes_ended_total{room=ROOM,reason="idle"}` in a Prometheus
/// text page.
pub fn idle_ended(metrics: &str, room: &str) -> Option<u64> {
    if metrics.is_empty() {
        return None;
    }
    let room_label = format!("room=\"{room}\"");
    Some(
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("sluice_passes_ended_total{")
                    && l.contains(&room_label)
                    && l.contains("reason=\"idle\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|n| n as u64)
            .sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_count_is_read_for_the_room() {
        let m = "# TYPE sluice_passes_ended_total counter\nsluice_passes_ended_total{room=\"drop\",reason=\"idle\"} 7\nsluice_passes_ended_total{room=\"drop\",reason=\"origin\"} 2\nsluice_passes_ended_total{room=\"x\",reason=\"idle\"} 5\n";
        assert_eq!(idle_ended(m, "drop"), Some(7));
        assert_eq!(idle_ended("# TYPE a counter\n", "drop"), Some(0));
        assert_eq!(idle_ended("", "drop"), None);
    }

    fn report_with(share: f64, units_farm: i64, units_honest: i64) -> FarmReport {
        FarmReport {
            enqueue_required: true,
            farm_accounts: 10,
            honest_accounts: 990,
            farm_account_share: share,
            units_farm,
            units_honest,
            farm_unit_share: units_farm as f64 / (units_farm + units_honest) as f64,
            ..FarmReport::default()
        }
    }

    #[test]
    fn the_farm_may_have_its_accounts_share_plus_two_points() {
        assert_eq!(units_check(&report_with(0.01, 10, 390)).result, "pass");
        assert_eq!(units_check(&report_with(0.01, 10, 240)).result, "fail");
    }

    #[test]
    fn the_rate_must_be_within_a_fifth_of_the_prediction() {
        let r = |got: f64| FarmReport {
            joins_placed_per_cpu_s: got,
            predicted_per_cpu_s: 10.0,
            places: 500,
            ..FarmReport::default()
        };
        assert_eq!(rate_check(&r(11.9)).result, "pass");
        assert_eq!(rate_check(&r(8.1)).result, "pass");
        assert_eq!(rate_check(&r(12.1)).result, "fail");
        assert_eq!(rate_check(&r(7.9)).result, "fail");
    }
}
