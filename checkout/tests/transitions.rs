//! The transition table, pair by pair, and the refusal path through the
//! store (an illegal move is refused and counted).

mod common;

use std::sync::atomic::Ordering;

use common::{key, request, Harness, T0_MS};
use sluice_checkout::{transition_allowed, OrderState};

#[test]
fn every_pair_against_the_table() {
    use OrderState::*;
    let legal = [
        (Reserved, Authorizing),
        (Reserved, Cancelled),
        (Reserved, Expired),
        (Authorizing, Confirmed),
        (Authorizing, Declined),
        (Authorizing, Voided),
        (Confirmed, Refunding),
        (Refunding, Refunded),
    ];
    let mut checked = 0;
    for from in OrderState::ALL {
        for to in OrderState::ALL {
            assert_eq!(
                transition_allowed(from, to),
                legal.contains(&(from, to)),
                "{from} -> {to}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 100);
}

#[test]
fn terminal_states_have_no_way_out() {
    use OrderState::*;
    for state in [Declined, Cancelled, Expired, Refunded, Voided, Rejected] {
        assert!(state.is_terminal(), "{state}");
    }
    for state in [Reserved, Authorizing, Confirmed, Refunding] {
        assert!(!state.is_terminal(), "{state}");
    }
}

#[test]
fn state_names_round_trip_and_events_are_distinct() {
    let mut events: Vec<&str> = OrderState::ALL.iter().map(|s| s.event_type()).collect();
    for state in OrderState::ALL {
        assert_eq!(OrderState::parse(state.as_str()), Some(state));
        assert_eq!(state.event_type(), format!("order.{}", state.as_str()));
    }
    events.sort();
    events.dedup();
    assert_eq!(events.len(), OrderState::ALL.len());
}

#[test]
fn cancelling_a_declined_order_changes_nothing_and_no_event_is_written() {
    let h = Harness::new(&[("sku-a", 5)]);
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_decline"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Declined);
    let pending_before = h.store.outbox_pending().unwrap();
    let again = h
        .service
        .cancel("sub-1", &order.order_id, T0_MS + 1)
        .unwrap();
    assert_eq!(again.state, OrderState::Declined);
    assert_eq!(h.store.outbox_pending().unwrap(), pending_before);
    assert_eq!(h.store.stock("sku-a").unwrap().available, 5);
}

#[test]
fn pay_after_expiry_leaves_the_order_expired_and_stock_released() {
    let h = Harness::new(&[("sku-a", 5)]);
    let (order, _) = h
        .service
        .begin(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(h.store.stock("sku-a").unwrap().reserved, 1);
    let outcome =
        sluice_checkout::reconcile_once(&h.store, T0_MS + common::TTL_MS, 60_000, 100).unwrap();
    assert_eq!(outcome.expired, 1);
    let paid = h
        .service
        .pay(&order.order_id, T0_MS + common::TTL_MS + 1)
        .unwrap();
    assert_eq!(paid.state, OrderState::Expired);
    assert_eq!(h.provider.sim.total_captures(), 0);
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (5, 0, 0)
    );
    assert_eq!(
        h.store
            .metrics()
            .illegal_transitions
            .load(Ordering::Relaxed),
        0
    );
}
