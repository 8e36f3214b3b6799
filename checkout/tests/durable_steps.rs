//! How many durable waits a checkout costs (`docs/orders.md` states the
//! count): each is one `Store::write` the caller waits on until it is on
//! disk. Counted by the store's `durable_writes` counter around one
//! checkout, so folding steps back apart would fail here.

mod common;

use common::{key, request, Harness, PM_LOST, T0_MS};
use sluice_checkout::{Created, Metrics, OrderState, PaymentState};

/// Durable writes `f` waited on.
fn writes_of(h: &Harness, f: impl FnOnce()) -> u64 {
    let before = Metrics::get(&h.store.metrics().durable_writes);
    f();
    Metrics::get(&h.store.metrics().durable_writes) - before
}

fn checkout(h: &Harness, raw_key: &str, method: &str) -> (OrderState, Created) {
    let (order, created) = h
        .service
        .checkout("sub-1", &key(raw_key), &request("sku-a", 1, method), T0_MS)
        .unwrap();
    (order.state, created)
}

#[test]
fn authorised_and_captured_is_three_durable_waits() {
    let h = Harness::new(&[("sku-a", 5)]);
    let mut state = None;
    let writes = writes_of(&h, || state = Some(checkout(&h, "key-00001", "pm_ok")));
    assert_eq!(state, Some((OrderState::Confirmed, Created::Created)));
    assert_eq!(writes, 3, "claim+reserve+authorizing, authorized, captured");
}

#[test]
fn declined_is_two_and_rejected_is_one() {
    let h = Harness::new(&[("sku-a", 1)]);
    let writes = writes_of(&h, || {
        assert_eq!(
            checkout(&h, "key-00001", "pm_decline").0,
            OrderState::Declined
        );
    });
    assert_eq!(writes, 2);
    checkout(&h, "key-00002", "pm_ok");
    let writes = writes_of(&h, || {
        assert_eq!(checkout(&h, "key-00003", "pm_ok").0, OrderState::Rejected);
    });
    assert_eq!(
        writes, 1,
        "sold out: the order and the key's end in one write"
    );
}

/// The folded writes still end the request: a retry of a finished key
/// replays (`200`) at once, it is not `409` while a lock would go stale.
#[test]
fn every_ending_completes_the_key_in_its_last_write() {
    let h = Harness::new(&[("sku-a", 1)]);
    for (raw, method, want) in [
        ("key-00001", "pm_decline", OrderState::Declined),
        ("key-00002", "pm_ok", OrderState::Confirmed),
        ("key-00003", "pm_ok", OrderState::Rejected),
    ] {
        assert_eq!(checkout(&h, raw, method), (want, Created::Created));
        let writes = writes_of(&h, || {
            assert_eq!(checkout(&h, raw, method), (want, Created::Replay));
        });
        assert_eq!(writes, 1, "a replay only reads the claim ({raw})");
    }
}

/// An answer lost past the retry bound: the order stays `authorizing`
/// for the reconciler, and the write that records the loss also ends the
/// key, so the shopper's retry sees the order instead of `409`.
#[test]
fn a_lost_answer_ends_the_key_with_its_record() {
    let h = Harness::new(&[("sku-a", 2)]);
    let writes = writes_of(&h, || {
        assert_eq!(
            checkout(&h, "key-00001", PM_LOST).0,
            OrderState::Authorizing
        );
    });
    assert_eq!(
        writes, 2,
        "claim+reserve+authorizing, then the unresolved record"
    );
    let (order, created) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, PM_LOST),
            T0_MS + 1,
        )
        .unwrap();
    assert_eq!(created, Created::Replay);
    assert_eq!(order.payment_state, PaymentState::Pending);
}
