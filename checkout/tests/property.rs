//! A seeded simulation: random interleavings of checkout (begin), pay,
//! cancel, replay, clock moves and reconciler passes, with the invariants
//! checked after every step against the database itself:
//!
//! - conservation: `available + reserved + committed = total`, and
//!   `reserved` / `committed` equal the sums of the holds;
//! - each order's hold matches its state, and a hold only ever moves
//!   `held → committed | released` and `committed → returned`: so no unit is
//!   committed twice and no released hold comes back;
//! - no hold is released while its payment is pending, authorized or
//!   captured;
//! - at most one capture per payment.
//!
//! A failure names its seed and step; rerun with that seed to replay it.

mod common;

use std::collections::HashMap;

use common::{key, request, Harness, PM_LOST, T0_MS, TTL_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use sluice_checkout::{
    audit, reconcile_once, CheckoutError, CheckoutRequest, Clock, Created, ManualClock, OrderState,
    PaymentState,
};

const SEEDS: u64 = 32;
const STEPS: usize = 120;
const SKUS: [(&str, u32); 2] = [("sku-a", 4), ("sku-b", 2)];
const METHODS: [&str; 3] = ["pm_ok", "pm_decline", PM_LOST];
const STUCK_AFTER_MS: i64 = 120_000;

struct Placed {
    subject: String,
    key: String,
    body: CheckoutRequest,
    order_id: String,
}

#[test]
fn random_interleavings_keep_every_invariant() {
    let mut seen: HashMap<OrderState, u64> = HashMap::new();
    for seed in 0..SEEDS {
        for (state, count) in run(seed) {
            *seen.entry(state).or_default() += count;
        }
    }
    // The simulation is only worth something if it reached every outcome.
    for state in [
        OrderState::Authorizing,
        OrderState::Confirmed,
        OrderState::Declined,
        OrderState::Cancelled,
        OrderState::Expired,
        OrderState::Refunded,
        OrderState::Rejected,
    ] {
        assert!(
            seen.get(&state).copied().unwrap_or(0) > 0,
            "never reached {state}: {seen:?}"
        );
    }
}

/// One seeded run; returns the orders per state at its end.
fn run(seed: u64) -> Vec<(OrderState, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let h = Harness::new(&SKUS);
    let clock = ManualClock::new(T0_MS);
    let mut placed: Vec<Placed> = Vec::new();
    let mut holds: HashMap<String, String> = HashMap::new();
    for step in 0..STEPS {
        let now = clock.now_ms();
        let ctx = format!("seed {seed} step {step}");
        match rng.random_range(0..8) {
            0..=2 => {
                let n = placed.len();
                let subject = format!("sub-{}", rng.random_range(0..4));
                let key_raw = format!("key-{seed}-{n:05}");
                let (sku, _) = SKUS[rng.random_range(0..SKUS.len())];
                let body = request(
                    sku,
                    rng.random_range(1..=2),
                    METHODS[rng.random_range(0..3)],
                );
                let (order, created) = h
                    .service
                    .begin(&subject, &key(&key_raw), &body, now)
                    .unwrap();
                assert_eq!(created, Created::Created, "{ctx}");
                placed.push(Placed {
                    subject,
                    key: key_raw,
                    body,
                    order_id: order.order_id,
                });
            }
            3 if !placed.is_empty() => {
                let p = &placed[rng.random_range(0..placed.len())];
                h.service.pay(&p.order_id, now).unwrap();
            }
            4 if !placed.is_empty() => {
                let p = &placed[rng.random_range(0..placed.len())];
                h.service.cancel(&p.subject, &p.order_id, now).unwrap();
            }
            5 if !placed.is_empty() => {
                let p = &placed[rng.random_range(0..placed.len())];
                match h.service.checkout(&p.subject, &key(&p.key), &p.body, now) {
                    Ok((order, created)) => {
                        assert_eq!(created, Created::Replay, "{ctx}");
                        assert_eq!(order.order_id, p.order_id, "{ctx}");
                    }
                    Err(CheckoutError::Conflict) => {}
                    Err(e) => panic!("{ctx}: replay failed: {e}"),
                }
            }
            6 => {
                reconcile_once(&h.store, now, STUCK_AFTER_MS, 50).unwrap();
            }
            _ => clock.advance_ms(rng.random_range(0..TTL_MS / 2)),
        }
        check(&h, &mut holds, &ctx);
    }
    // Quiesce: past every expiry, one pass must leave a clean audit.
    clock.advance_ms(TTL_MS * 2);
    let outcome = reconcile_once(&h.store, clock.now_ms(), STUCK_AFTER_MS, 1_000).unwrap();
    assert_eq!(outcome.conservation_violations, 0, "seed {seed}");
    check(&h, &mut holds, &format!("seed {seed} end"));
    let violations = audit(h.dir.path(), clock.now_ms()).unwrap();
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    let reserved_left: i64 = h
        .store
        .inventory()
        .unwrap()
        .iter()
        .map(|s| s.reserved)
        .sum();
    let pending_orders = h
        .store
        .order_counts()
        .unwrap()
        .into_iter()
        .find(|(s, _)| *s == OrderState::Authorizing)
        .map(|(_, n)| n)
        .unwrap_or(0);
    // Only orders whose payment answer was lost may still hold stock.
    assert!(reserved_left == 0 || pending_orders > 0, "seed {seed}");
    h.store.order_counts().unwrap()
}

fn hold_for(state: OrderState) -> Option<&'static str> {
    match state {
        OrderState::Reserved | OrderState::Authorizing => Some("held"),
        OrderState::Confirmed | OrderState::Refunding => Some("committed"),
        OrderState::Refunded => Some("returned"),
        OrderState::Declined | OrderState::Cancelled | OrderState::Expired | OrderState::Voided => {
            Some("released")
        }
        OrderState::Rejected => None,
    }
}

fn check(h: &Harness, holds: &mut HashMap<String, String>, ctx: &str) {
    for level in h.store.inventory().unwrap() {
        assert!(level.is_conserved(), "{ctx}: {level:?}");
    }
    let conn = Connection::open_with_flags(
        h.store.db_path(),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    let mismatched: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM stock s WHERE
               s.reserved != (SELECT COALESCE(SUM(quantity),0) FROM reservations r WHERE r.sku=s.sku AND r.state='held')
            OR s.committed != (SELECT COALESCE(SUM(quantity),0) FROM reservations r WHERE r.sku=s.sku AND r.state='committed')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mismatched, 0, "{ctx}: stock disagrees with holds");
    let mut stmt = conn
        .prepare(
            "SELECT o.order_id, o.state, o.payment_state, o.payment_id, r.state FROM orders o
             LEFT JOIN reservations r ON r.order_id = o.order_id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })
        .unwrap();
    for row in rows {
        let (order_id, state, payment, payment_id, hold) = row.unwrap();
        let state = OrderState::parse(&state).unwrap();
        let payment = PaymentState::parse(&payment).unwrap();
        assert_eq!(
            hold.as_deref(),
            hold_for(state),
            "{ctx}: {order_id} is {state}"
        );
        if payment.holds_money() {
            assert_ne!(
                hold.as_deref(),
                Some("released"),
                "{ctx}: paid stock of {order_id} released"
            );
        }
        if let Some(payment_id) = payment_id {
            assert!(
                h.provider.sim.captures(&payment_id) <= 1,
                "{ctx}: {order_id} captured twice"
            );
        }
        if let Some(hold) = hold {
            let before = holds.insert(order_id.clone(), hold.clone());
            let legal = match (before.as_deref(), hold.as_str()) {
                (None, "held") => true,
                (Some(a), b) if a == b => true,
                (Some("held"), "committed" | "released") => true,
                (Some("committed"), "returned") => true,
                _ => false,
            };
            assert!(
                legal,
                "{ctx}: hold of {order_id} moved {before:?} -> {hold}"
            );
        }
    }
    let double: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM (SELECT order_id FROM payment_ops WHERE op='capture'
             GROUP BY order_id HAVING COUNT(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(double, 0, "{ctx}: an order was captured twice");
}
