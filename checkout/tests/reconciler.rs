//! The reconciler pass and the offline audit, driven with an injected clock.

mod common;

use std::sync::atomic::Ordering;

use common::{key, request, Harness, PM_LOST, T0_MS, TTL_MS};
use rusqlite::Connection;
use sluice_checkout::{audit, reconcile_once, Created, OrderState, Violation};

const STUCK_AFTER_MS: i64 = 60_000;

fn raw(h: &Harness) -> Connection {
    Connection::open(h.store.db_path()).unwrap()
}

#[test]
fn holds_expire_at_their_deadline_and_not_before() {
    let h = Harness::new(&[("sku-a", 5)]);
    let (order, _) = h
        .service
        .begin(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 2, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let early = reconcile_once(&h.store, T0_MS + TTL_MS - 1, TTL_MS * 10, 100).unwrap();
    assert_eq!(early.expired, 0);
    assert_eq!(h.store.stock("sku-a").unwrap().reserved, 2);
    let due = reconcile_once(&h.store, T0_MS + TTL_MS, TTL_MS * 10, 100).unwrap();
    assert_eq!(due.expired, 1);
    let expired = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(expired.state, OrderState::Expired);
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.reserved), (5, 0));
    // Idempotent: the next pass finds nothing.
    let again = reconcile_once(&h.store, T0_MS + TTL_MS + 1, TTL_MS * 10, 100).unwrap();
    assert_eq!(again.expired, 0);
    let last_event: String = raw(&h)
        .query_row(
            "SELECT type FROM outbox ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(last_event, "order.expired");
}

#[test]
fn a_pass_is_bounded_by_its_limit() {
    let h = Harness::new(&[("sku-a", 10)]);
    for i in 0..5 {
        h.service
            .begin(
                "sub-1",
                &key(&format!("key-{i:05}")),
                &request("sku-a", 1, "pm_ok"),
                T0_MS,
            )
            .unwrap();
    }
    let first = reconcile_once(&h.store, T0_MS + TTL_MS, STUCK_AFTER_MS, 2).unwrap();
    assert_eq!(first.expired, 2);
    let second = reconcile_once(&h.store, T0_MS + TTL_MS, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(second.expired, 3);
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
}

#[test]
fn paid_or_pending_holds_are_never_expired() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (lost, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS,
        )
        .unwrap();
    assert_eq!(lost.state, OrderState::Authorizing);
    let outcome = reconcile_once(&h.store, T0_MS + 100 * TTL_MS, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!((outcome.expired, outcome.kept_for_payment), (0, 1));
    assert_eq!(outcome.stuck, vec![(OrderState::Authorizing, 1)]);
    assert_eq!(h.store.stock("sku-a").unwrap().reserved, 1);
    assert!(audit(h.dir.path(), T0_MS + 100 * TTL_MS)
        .unwrap()
        .is_empty());
}

#[test]
fn orders_resting_too_long_are_reported_stuck() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.service
        .begin(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let fresh = reconcile_once(&h.store, T0_MS + STUCK_AFTER_MS - 1, STUCK_AFTER_MS, 100).unwrap();
    assert!(fresh.stuck.is_empty());
    let stale = reconcile_once(&h.store, T0_MS + STUCK_AFTER_MS, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(stale.stuck, vec![(OrderState::Reserved, 1)]);
}

#[test]
fn conservation_is_rechecked_and_violations_counted() {
    let h = Harness::new(&[("sku-a", 10)]);
    assert_eq!(
        reconcile_once(&h.store, T0_MS, STUCK_AFTER_MS, 100)
            .unwrap()
            .conservation_violations,
        0
    );
    // Sum still adds up (the CHECKs allow it) but no hold backs the unit:
    // wrong for the SKU and for its partition.
    raw(&h)
        .execute(
            "UPDATE stock_partitions SET available = available - 1, reserved = reserved + 1",
            [],
        )
        .unwrap();
    let outcome = reconcile_once(&h.store, T0_MS, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(outcome.conservation_violations, 2);
    assert_eq!(
        h.store
            .metrics()
            .invariant_violations
            .load(Ordering::Relaxed),
        2
    );
    let violations = audit(h.dir.path(), T0_MS).unwrap();
    assert_eq!(
        violations,
        vec![
            Violation::HoldsDisagree {
                sku: "sku-a".into(),
                column: "reserved",
                stock: 1,
                holds: 0
            },
            Violation::PartitionsDisagree {
                sku: "sku-a".into(),
                detail: "partition 0 reserved is 1 but its holds sum to 0".into(),
            }
        ]
    );
}

#[test]
fn the_check_constraint_refuses_a_broken_sum() {
    let h = Harness::new(&[("sku-a", 10)]);
    let err = raw(&h).execute("UPDATE stock SET available = available - 1", []);
    assert!(err.is_err());
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
    let err = raw(&h).execute("UPDATE stock_partitions SET available = available - 1", []);
    assert!(err.is_err(), "each partition has its own CHECK");
    assert_eq!(h.store.stock("sku-a").unwrap().available, 10);
}

#[test]
fn keys_are_kept_a_day_then_purged() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    let body = request("sku-a", 1, "pm_ok");
    let (order, _) = h.service.checkout("sub-1", &k, &body, T0_MS).unwrap();
    let day_ms = 24 * 60 * 60 * 1000;
    let kept = reconcile_once(&h.store, T0_MS + day_ms, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(kept.keys_purged, 0);
    let (replayed, created) = h
        .service
        .checkout("sub-1", &k, &body, T0_MS + day_ms)
        .unwrap();
    assert_eq!(
        (created, replayed.order_id),
        (Created::Replay, order.order_id)
    );
    let purged = reconcile_once(&h.store, T0_MS + 2 * day_ms, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(purged.keys_purged, 1);
}

#[test]
fn audit_reports_each_kind_of_violation() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (paid, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let (held, _) = h
        .service
        .begin(
            "sub-1",
            &key("key-00002"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
    // A hold left past its expiry (no reconciler ran) is a leak.
    let late = T0_MS + TTL_MS + 61_000;
    assert_eq!(
        audit(h.dir.path(), late).unwrap(),
        vec![Violation::ExpiredHoldCounted {
            order_id: held.order_id.clone(),
            expired_for_ms: 61_000
        }]
    );
    let conn = raw(&h);
    conn.execute(
        "INSERT INTO payment_ops (order_id, op, payment_id, amount_cents, at_ms)
         SELECT order_id, op, payment_id, amount_cents, at_ms FROM payment_ops WHERE op = 'capture'",
        [],
    )
    .unwrap();
    conn.execute(
        "UPDATE orders SET state = 'declined' WHERE order_id = ?1",
        [&paid.order_id],
    )
    .unwrap();
    let violations = audit(h.dir.path(), T0_MS).unwrap();
    assert!(violations.contains(&Violation::MultipleCaptures {
        order_id: paid.order_id.clone(),
        captures: 2
    }));
    assert!(violations.contains(&Violation::PaidOrderNotConfirmed {
        order_id: paid.order_id.clone(),
        state: "declined".into()
    }));
    // Money taken for a declined order with nothing to give it back.
    assert!(violations.contains(&Violation::UncompensatedCharge {
        order_id: paid.order_id.clone(),
        state: "declined".into(),
        payment_state: "captured".into(),
    }));
    assert_eq!(violations.len(), 3);
    for v in &violations {
        assert!(v.to_string().contains(&paid.order_id));
    }
}

#[test]
fn audit_reads_a_running_store_and_refuses_a_missing_one() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    // The store is open (WAL and shm files present) while the audit reads.
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
    h.service
        .checkout(
            "sub-1",
            &key("key-00002"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(h.store.stock("sku-a").unwrap().committed, 2);
    let empty = tempfile::tempdir().unwrap();
    assert!(audit(empty.path(), T0_MS).is_err());
    assert!(!empty.path().join("checkout.db").exists());
}
