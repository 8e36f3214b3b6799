//! Orders per subject are counted in the transaction that creates the
//! order, so racing keys cannot get past the limit; and the books kept in
//! memory match the tables after every kind of change and a reopen.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::{key, request, Harness, T0_MS};
use sluice_checkout::{CheckoutError, Created, OrderLimits, Store, SubjectOrders};

const RACERS: usize = 20;

#[test]
fn racing_keys_of_one_subject_create_exactly_the_limit() {
    let h = Arc::new(Harness::new(&[("sku-a", 100)]));
    let barrier = Arc::new(Barrier::new(RACERS));
    let limits = OrderLimits {
        orders_per_subject_max: 3,
    };
    let handles: Vec<_> = (0..RACERS)
        .map(|i| {
            let (h, barrier) = (Arc::clone(&h), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                h.service.checkout_within(
                    "drop/sub-1",
                    &key(&format!("racing-key-{i:02}")),
                    &request("sku-a", 1, "pm_ok"),
                    limits,
                    T0_MS,
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|t| t.join().unwrap()).collect();
    let created = results
        .iter()
        .filter(|r| matches!(r, Ok((_, Created::Created))))
        .count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(CheckoutError::PurchaseLimit)))
        .count();
    assert_eq!((created, refused), (3, RACERS - 3), "{results:?}");
    assert_eq!(
        h.service.subject_orders("drop/sub-1").unwrap(),
        SubjectOrders {
            started: 3,
            open: 0
        }
    );
    // A refused key was not kept: with room to spare it starts over.
    let refused_key = results
        .iter()
        .position(|r| r.is_err())
        .map(|i| format!("racing-key-{i:02}"))
        .unwrap();
    let (_, created) = h
        .service
        .checkout_within(
            "drop/sub-1",
            &key(&refused_key),
            &request("sku-a", 1, "pm_ok"),
            OrderLimits {
                orders_per_subject_max: 4,
            },
            T0_MS,
        )
        .unwrap();
    assert_eq!(created, Created::Created);
    // Another subject has its own count; a limit of 0 creates nothing.
    assert!(matches!(
        h.service.checkout_within(
            "drop/sub-2",
            &key("other-key-01"),
            &request("sku-a", 1, "pm_ok"),
            OrderLimits {
                orders_per_subject_max: 0
            },
            T0_MS,
        ),
        Err(CheckoutError::PurchaseLimit)
    ));
}

#[test]
fn the_books_in_memory_match_the_tables() {
    let check = |store: &Store| {
        let books = store.books();
        assert_eq!(books.orders, store.order_counts().unwrap());
        assert_eq!(books.inventory, store.inventory().unwrap());
    };
    let h = Harness::new(&[("sku-a", 5)]);
    check(&h.store);
    for (i, pm) in ["pm_ok", "pm_decline", "pm_ok", "pm_ok"].iter().enumerate() {
        h.service
            .checkout(
                "s",
                &key(&format!("books-key-{i}")),
                &request("sku-a", 2, pm),
                T0_MS,
            )
            .unwrap();
        check(&h.store);
    }
    let held = h
        .service
        .begin(
            "s",
            &key("books-key-held"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap()
        .0;
    check(&h.store);
    h.service.cancel("s", &held.order_id, T0_MS).unwrap();
    check(&h.store);
    let before = h.store.books();
    assert_eq!(before.orders.iter().map(|(_, n)| n).sum::<u64>(), 5);
    // Reopened, the counts are seeded from the orders and agree.
    let common::Harness {
        dir,
        store,
        service,
        ..
    } = h;
    drop(service);
    drop(store);
    let reopened = Store::open(dir.path()).unwrap();
    check(&reopened);
    assert_eq!(*reopened.books(), *before);
}
