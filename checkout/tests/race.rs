//! Concurrency through the public API: racing duplicates of one key, and a
//! crowd on the last units, both through the service and the group-commit
//! writer.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::{key, request, Harness, T0_MS, TTL_MS};
use sluice_checkout::{CheckoutError, Created, OrderState, ReserveOutcome, ReserveRequest};

const RACERS: usize = 32;

#[test]
fn racing_duplicates_of_one_key_make_exactly_one_order() {
    let h = Arc::new(Harness::new(&[("sku-a", 100)]));
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|_| {
            let h = Arc::clone(&h);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                h.service.checkout(
                    "sub-1",
                    &key("same-key-123"),
                    &request("sku-a", 1, "pm_ok"),
                    T0_MS,
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|t| t.join().unwrap()).collect();
    let created: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Ok((order, Created::Created)) => Some(order.order_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "{results:?}");
    for result in &results {
        match result {
            Ok((order, _)) => assert_eq!(order.order_id, created[0]),
            Err(CheckoutError::Conflict) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let counts = h.store.order_counts().unwrap();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 1);
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.committed), (99, 1));
    assert_eq!(h.provider.sim.total_captures(), 1);
}

#[test]
fn a_thousand_buyers_for_ten_units_get_exactly_ten_reservations() {
    const BUYERS: usize = 1000;
    const THREADS: usize = 8;
    let h = Arc::new(Harness::new(&[("hot", 10)]));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let h = Arc::clone(&h);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut states = Vec::new();
                for b in (t..BUYERS).step_by(THREADS) {
                    let (order, _) = h
                        .service
                        .begin(
                            &format!("buyer-{b}"),
                            &key(&format!("key-{b:08}")),
                            &request("hot", 1, "pm_ok"),
                            T0_MS,
                        )
                        .unwrap();
                    states.push(order.state);
                }
                states
            })
        })
        .collect();
    let states: Vec<OrderState> = handles
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(states.len(), BUYERS);
    let reserved = states
        .iter()
        .filter(|s| **s == OrderState::Reserved)
        .count();
    let rejected = states
        .iter()
        .filter(|s| **s == OrderState::Rejected)
        .count();
    assert_eq!((reserved, rejected), (10, 990));
    let stock = h.store.stock("hot").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (0, 10, 0)
    );
}

#[test]
fn a_thousand_buyers_through_the_group_commit_writer() {
    const BUYERS: usize = 1000;
    const THREADS: usize = 8;
    let h = Harness::new(&[("hot", 10)]);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&h.store);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                // Submit everything first (many requests in flight), then wait.
                let pending: Vec<_> = (t..BUYERS)
                    .step_by(THREADS)
                    .map(|b| {
                        store
                            .submit_reservation(ReserveRequest {
                                order_id: format!("hold-{b}"),
                                sku: "hot".into(),
                                quantity: 1,
                                now_ms: T0_MS,
                                expires_at_ms: T0_MS + TTL_MS,
                            })
                            .unwrap()
                    })
                    .collect();
                pending
                    .into_iter()
                    .map(|p| p.wait().unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<ReserveOutcome> = handles
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let reserved = outcomes
        .iter()
        .filter(|o| matches!(o, ReserveOutcome::Reserved { .. }))
        .count();
    assert_eq!(reserved, 10);
    assert_eq!(outcomes.len() - reserved, 990);
    let stock = h.store.stock("hot").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (0, 10, 0)
    );
    assert!(sluice_checkout::audit(h.dir.path(), T0_MS)
        .unwrap()
        .is_empty());
}

#[test]
fn racing_cancels_of_a_paid_order_refund_once() {
    let h = Arc::new(Harness::new(&[("sku-a", 10)]));
    let (order, _) = h
        .service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 3, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|_| {
            let (h, barrier, id) = (Arc::clone(&h), Arc::clone(&barrier), order.order_id.clone());
            thread::spawn(move || {
                barrier.wait();
                h.service.cancel("sub-1", &id, T0_MS + 1)
            })
        })
        .collect();
    for handle in handles {
        let state = handle.join().unwrap().unwrap().state;
        assert!(
            matches!(state, OrderState::Refunding | OrderState::Refunded),
            "{state}"
        );
    }
    let last = h.service.get_order("sub-1", &order.order_id).unwrap();
    assert_eq!(last.state, OrderState::Refunded);
    let stock = h.store.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.committed), (10, 0));
    let refunds: i64 = rusqlite::Connection::open(h.store.db_path())
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM payment_ops WHERE op = 'refund'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(refunds, 1);
    assert!(sluice_checkout::audit(h.dir.path(), T0_MS + 1)
        .unwrap()
        .is_empty());
}
