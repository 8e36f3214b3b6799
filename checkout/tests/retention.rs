//! Retention: each kind of row is forgotten only after its retention, at
//! most `limit` rows per kind per pass, and never what the books or a
//! replay still need.

mod common;

use common::{key, request, Harness, T0_MS};
use rusqlite::Connection;
use sluice_checkout::{
    apply_webhook, prune_once, reconcile_once, relay_once, EventData, EventType, JsonLinesSink,
    OrderState, PruneOutcome,
};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;
const STUCK_AFTER_MS: i64 = 120_000;

fn count(h: &Harness, sql: &str) -> i64 {
    Connection::open(h.store.db_path())
        .unwrap()
        .query_row(sql, [], |row| row.get(0))
        .unwrap()
}

fn rows(h: &Harness) -> [i64; 5] {
    [
        count(h, "SELECT COUNT(*) FROM idempotency"),
        count(h, "SELECT COUNT(*) FROM outbox"),
        count(h, "SELECT COUNT(*) FROM webhook_events"),
        count(
            h,
            "SELECT COUNT(*) FROM reservations WHERE state = 'released'",
        ),
        count(
            h,
            "SELECT COUNT(*) FROM reservations WHERE state = 'committed'",
        ),
    ]
}

/// Two declined orders (released holds), one confirmed (a committed hold),
/// their events published, and two (late, stale) provider events about
/// the confirmed one received.
fn history(h: &Harness) {
    let mut confirmed = None;
    for (raw, method) in [
        ("key-00001", "pm_decline"),
        ("key-00002", "pm_decline"),
        ("key-00003", "pm_ok"),
    ] {
        let (order, _) = h
            .service
            .checkout("sub-1", &key(raw), &request("sku-a", 1, method), T0_MS)
            .unwrap();
        confirmed = Some(order);
    }
    let confirmed = confirmed.unwrap();
    assert_eq!(confirmed.state, OrderState::Confirmed);
    let mut sink = JsonLinesSink::open(h.dir.path()).unwrap();
    relay_once(&h.store, &mut sink, 1_000, T0_MS).unwrap();
    for (id, event_type) in [
        ("evt_a", EventType::Authorized),
        ("evt_b", EventType::Captured),
    ] {
        let event = sluice_checkout::WebhookEvent {
            id: id.into(),
            event_type,
            created: T0_MS / 1000,
            data: EventData {
                payment_id: confirmed.payment_id.clone().unwrap(),
                order_id: confirmed.order_id.clone(),
                amount_cents: confirmed.amount_cents,
            },
        };
        apply_webhook(&h.store, &event, T0_MS).unwrap();
    }
}

#[test]
fn nothing_is_forgotten_before_its_retention() {
    let h = Harness::new(&[("sku-a", 10)]);
    history(&h);
    let before = rows(&h);
    assert_eq!(before[0], 3);
    assert!(
        before[1] >= 3 && before[2] == 2 && before[3] == 2 && before[4] == 1,
        "{before:?}"
    );
    let pruned = prune_once(&h.store, T0_MS + 6 * DAY_MS, 100).unwrap();
    assert_eq!(
        pruned.outbox_events + pruned.webhook_events + pruned.ended_holds,
        0
    );
    assert_eq!(pruned.idempotency_keys, 3, "keys go after 25 h");
    assert_eq!(rows(&h)[1..], before[1..]);
}

#[test]
fn past_retention_each_kind_goes_in_bounded_passes() {
    let h = Harness::new(&[("sku-a", 10)]);
    history(&h);
    let outbox = rows(&h)[1];
    let later = T0_MS + 8 * DAY_MS;
    let first = prune_once(&h.store, later, 1).unwrap();
    assert_eq!(
        first,
        PruneOutcome {
            idempotency_keys: 1,
            outbox_events: 1,
            webhook_events: 1,
            ended_holds: 1
        }
    );
    assert!(first.more_due(1));
    let mut passes = 1;
    while prune_once(&h.store, later, 1).unwrap().more_due(1) {
        passes += 1;
        assert!(passes <= outbox, "every pass makes progress");
    }
    // The committed hold stays: conservation sums it.
    assert_eq!(rows(&h), [0, 0, 0, 0, 1]);
    assert!(sluice_checkout::audit(h.dir.path(), later)
        .unwrap()
        .is_empty());
    let level = h.store.stock("sku-a").unwrap();
    assert_eq!((level.available, level.committed), (9, 1));
}

/// An event not yet published is kept whatever its age: the relay has not
/// delivered it.
#[test]
fn unpublished_events_are_kept() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let outbox = rows(&h)[1];
    let pass = reconcile_once(&h.store, T0_MS + 30 * DAY_MS, STUCK_AFTER_MS, 100).unwrap();
    assert_eq!(pass.pruned.outbox_events, 0);
    assert_eq!(pass.keys_purged, 1);
    assert_eq!(rows(&h)[1], outbox);
}
