//! The checkout flow through the public API: payment outcomes, stock
//! movement, idempotency semantics, visibility and cancel.

mod common;

use std::sync::atomic::Ordering;

use common::{key, request, Harness, PM_LOST, PRICE_CENTS, T0_MS, TTL_MS};
use sluice_checkout::{CheckoutError, Created, OrderState, PaymentState};

fn levels(h: &Harness, sku: &str) -> (i64, i64, i64, i64) {
    let s = h.store.stock(sku).unwrap();
    (s.total, s.available, s.reserved, s.committed)
}

#[test]
fn pm_ok_confirms_and_commits_stock() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, created) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 2, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(created, Created::Created);
    assert_eq!(created.status(), 201);
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(order.payment_state, PaymentState::Captured);
    assert_eq!(order.amount_cents, 2 * PRICE_CENTS);
    assert_eq!(order.reservation_expires_at_ms, Some(T0_MS + TTL_MS));
    assert_eq!(levels(&h, "sku-a"), (10, 8, 0, 2));
    let payment_id = order.payment_id.clone().unwrap();
    assert_eq!(h.provider.sim.captures(&payment_id), 1);
}

#[test]
fn pm_decline_declines_and_releases_stock() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 3, "pm_decline"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Declined);
    assert_eq!(order.payment_state, PaymentState::Declined);
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
}

#[test]
fn out_of_stock_is_rejected_without_touching_stock() {
    let h = Harness::new(&[("sku-a", 1)]);
    let (order, created) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 2, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(created, Created::Created);
    assert_eq!(order.state, OrderState::Rejected);
    assert_eq!(order.reservation_expires_at_ms, None);
    assert_eq!(levels(&h, "sku-a"), (1, 1, 0, 0));
    assert_eq!(h.provider.sim.total_captures(), 0);
}

#[test]
fn same_key_same_body_replays_the_current_order() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    let body = request("sku-a", 1, "pm_ok");
    let (first, _) = h.service.checkout("sub-1", &k, &body, T0_MS).unwrap();
    let (again, created) = h
        .service
        .checkout("sub-1", &k, &body, T0_MS + 5_000)
        .unwrap();
    assert_eq!(created, Created::Replay);
    assert_eq!(created.status(), 200);
    assert_eq!(again, first);
    assert_eq!(levels(&h, "sku-a"), (10, 9, 0, 1));
    assert_eq!(h.provider.sim.total_captures(), 1);
}

#[test]
fn same_key_other_body_is_a_mismatch() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    h.service
        .checkout("sub-1", &k, &request("sku-a", 1, "pm_ok"), T0_MS)
        .unwrap();
    let err = h
        .service
        .checkout("sub-1", &k, &request("sku-a", 2, "pm_ok"), T0_MS)
        .unwrap_err();
    assert!(matches!(err, CheckoutError::Mismatch));
    assert_eq!((err.code(), err.status()), ("idempotency_mismatch", 422));
    assert_eq!(levels(&h, "sku-a"), (10, 9, 0, 1));
}

#[test]
fn same_key_in_flight_is_a_conflict_until_the_lock_goes_stale() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    let body = request("sku-a", 1, "pm_ok");
    // begin() without finishing is a request still in flight.
    let (started, _) = h.service.begin("sub-1", &k, &body, T0_MS).unwrap();
    let err = h
        .service
        .checkout("sub-1", &k, &body, T0_MS + 1_000)
        .unwrap_err();
    assert!(matches!(err, CheckoutError::Conflict));
    assert_eq!((err.code(), err.status()), ("idempotency_conflict", 409));
    // The owner died; after the stale bound a retry sees the order.
    let (replayed, created) = h
        .service
        .checkout("sub-1", &k, &body, T0_MS + 31_000)
        .unwrap();
    assert_eq!(created, Created::Replay);
    assert_eq!(replayed.order_id, started.order_id);
    assert_eq!(levels(&h, "sku-a"), (10, 9, 1, 0));
}

#[test]
fn keys_are_scoped_to_the_subject() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    let body = request("sku-a", 1, "pm_ok");
    let (a, _) = h.service.checkout("sub-1", &k, &body, T0_MS).unwrap();
    let (b, created) = h.service.checkout("sub-2", &k, &body, T0_MS).unwrap();
    assert_eq!(created, Created::Created);
    assert_ne!(a.order_id, b.order_id);
}

#[test]
fn orders_are_visible_only_to_their_subject() {
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
    assert_eq!(
        h.service.get_order("sub-1", &order.order_id).unwrap(),
        order
    );
    let err = h.service.get_order("sub-2", &order.order_id).unwrap_err();
    assert_eq!((err.code(), err.status()), ("not_found", 404));
    assert!(matches!(
        h.service.cancel("sub-2", &order.order_id, T0_MS),
        Err(CheckoutError::NotFound)
    ));
    assert!(matches!(
        h.service.get_order("sub-1", "ord_missing"),
        Err(CheckoutError::NotFound)
    ));
}

#[test]
fn cancel_reserved_releases_once() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .begin(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 4, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(levels(&h, "sku-a"), (10, 6, 4, 0));
    let cancelled = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(cancelled.state, OrderState::Cancelled);
    let again = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 2)
        .unwrap();
    assert_eq!(again.state, OrderState::Cancelled);
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
    // Paying a cancelled order does nothing.
    let paid = h.service.pay(&order.order_id, T0_MS + 3).unwrap();
    assert_eq!(paid.state, OrderState::Cancelled);
    assert_eq!(h.provider.sim.total_captures(), 0);
}

#[test]
fn cancel_confirmed_refunds_and_returns_units() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 2, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    h.provider.fail_refund.store(true, Ordering::SeqCst);
    let stuck = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(stuck.state, OrderState::Refunding);
    assert_eq!(levels(&h, "sku-a"), (10, 8, 0, 2));
    h.provider.fail_refund.store(false, Ordering::SeqCst);
    let refunded = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 2)
        .unwrap();
    assert_eq!(refunded.state, OrderState::Refunded);
    assert_eq!(refunded.payment_state, PaymentState::Refunded);
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
    let again = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 3)
        .unwrap();
    assert_eq!(again.state, OrderState::Refunded);
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
}

#[test]
fn failed_capture_is_voided_and_released() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.provider.fail_capture.store(true, Ordering::SeqCst);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Voided);
    assert_eq!(order.payment_state, PaymentState::Voided);
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
}

#[test]
fn lost_authorization_answer_keeps_the_hold_past_expiry() {
    let h = Harness::new(&[("sku-a", 10)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    assert_eq!(order.payment_state, PaymentState::Pending);
    let outcome =
        sluice_checkout::reconcile_once(&h.store, T0_MS + 10 * TTL_MS, 60_000, 100).unwrap();
    assert_eq!(outcome.expired, 0);
    assert_eq!(outcome.kept_for_payment, 1);
    assert_eq!(outcome.stuck, vec![(OrderState::Authorizing, 1)]);
    assert_eq!(levels(&h, "sku-a"), (10, 9, 1, 0));
}

#[test]
fn bad_requests_are_refused_before_anything_is_stored() {
    let h = Harness::new(&[("sku-a", 10)]);
    let k = key("key-00001");
    for body in [
        request("sku-a", 0, "pm_ok"),
        request("sku-a", 101, "pm_ok"),
        request("", 1, "pm_ok"),
        request("sku-a", 1, ""),
        request("sku a", 1, "pm_ok"),
    ] {
        let err = h.service.checkout("sub-1", &k, &body, T0_MS).unwrap_err();
        assert_eq!(err.code(), "bad_request", "{body:?}");
    }
    let err = h
        .service
        .checkout("sub-1", &k, &request("no-such-sku", 1, "pm_ok"), T0_MS)
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
    // None of the refused requests claimed the key.
    let (order, created) = h
        .service
        .checkout("sub-1", &k, &request("sku-a", 1, "pm_ok"), T0_MS)
        .unwrap();
    assert_eq!(
        (created, order.state),
        (Created::Created, OrderState::Confirmed)
    );
}

#[test]
fn seed_only_the_first_time_then_adjust_with_a_reason() {
    let h = Harness::new(&[("sku-a", 10)]);
    assert_eq!(
        h.store
            .seed_products(&common::seeds(&[("sku-a", 99), ("sku-b", 3)]))
            .unwrap(),
        1
    );
    assert_eq!(levels(&h, "sku-a"), (10, 10, 0, 0));
    assert_eq!(levels(&h, "sku-b"), (3, 3, 0, 0));
    h.service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 4, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let level = h
        .store
        .adjust("sku-a", 5, "restock from warehouse", T0_MS)
        .unwrap();
    assert_eq!((level.total, level.available, level.committed), (15, 11, 4));
    assert!(h.store.adjust("sku-a", -12, "shrinkage", T0_MS).is_err());
    let level = h.store.adjust("sku-a", -11, "shrinkage", T0_MS).unwrap();
    assert_eq!((level.total, level.available, level.committed), (4, 0, 4));
    assert!(h.store.adjust("sku-a", 1, "  ", T0_MS).is_err());
    assert!(h.store.adjust("nope", 1, "restock", T0_MS).is_err());
}

#[test]
fn the_order_view_carries_the_contract_fields() {
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
    let json = serde_json::to_value(order.view()).unwrap();
    assert_eq!(json["order_id"], order.order_id.as_str());
    assert_eq!(json["sku"], "sku-a");
    assert_eq!(json["quantity"], 1);
    assert_eq!(json["state"], "confirmed");
    assert_eq!(json["created_at"], T0_MS / 1000);
    assert_eq!(json["reservation_expires_at"], (T0_MS + TTL_MS) / 1000);
    assert_eq!(json["payment"]["state"], "captured");
    assert!(
        json.get("subject").is_none(),
        "the view must not name the pass"
    );
}
