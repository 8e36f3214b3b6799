//! The core's key suites run against both back ends in one binary: the
//! embedded SQLite store and PostgreSQL (a throwaway cluster this binary
//! starts on a free loopback port and removes). Every scenario is one
//! function taking a [`Fixture`]; `on_both!` makes a `sqlite::` and a
//! `postgres::` test of each. No environment variable chooses.

mod common;
#[path = "common/pg.rs"]
mod pg;

use std::any::Any;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{key, request, test_payments, PRICE_CENTS, T0_MS, TTL_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_checkout::blocking::{Blocking, Job};
use sluice_checkout::{
    AuthorizeOutcome, CheckoutError, CheckoutService, Created, EventPage, Metrics,
    OperationOutcome, OrderBackend, OrderLimits, OrderState, OutboxEvent, PaymentError,
    PaymentProvider, PaymentState, PgBackend, PgConfig, ProductSeed, SimulatedProvider, Sink,
    SinkError, SqliteBackend, Store, PM_DECLINE, PM_OK,
};
use sluice_loadtest::relay::{Link, Relay};

struct Fixture {
    backend: Arc<dyn OrderBackend>,
    provider: Arc<SimulatedProvider>,
    /// The temp dir or the database cluster, kept alive.
    _keep: Box<dyn Any>,
    /// The PostgreSQL database's URL.
    url: Option<String>,
}

impl Fixture {
    fn sqlite() -> Self {
        let provider = Arc::new(SimulatedProvider::default());
        Self::sqlite_with(provider.clone(), provider)
    }

    fn postgres() -> Self {
        let provider = Arc::new(SimulatedProvider::default());
        Self::postgres_with(provider.clone(), provider)
    }

    /// The back end pays through `payments`, which charges `provider`.
    fn sqlite_with(provider: Arc<SimulatedProvider>, payments: Arc<dyn PaymentProvider>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(Store::open(dir.path()).expect("open store"));
        let service = CheckoutService::with_payments(store, payments, test_payments());
        Self {
            backend: Arc::new(SqliteBackend::new(Arc::new(service))),
            provider,
            _keep: Box::new(dir),
            url: None,
        }
    }

    fn postgres_with(provider: Arc<SimulatedProvider>, payments: Arc<dyn PaymentProvider>) -> Self {
        let cluster = pg::shared();
        let url = cluster.create_database();
        let mut config = PgConfig::new(url.clone());
        config.pool_max = 24;
        let backend = PgBackend::open(&config, payments).expect("open postgres");
        Self {
            backend: Arc::new(backend),
            provider,
            _keep: Box::new(cluster),
            url: Some(url),
        }
    }

    fn seed(&self, products: &[(&str, u32, u32)]) {
        let seeds: Vec<ProductSeed> = products
            .iter()
            .map(|&(sku, total, partitions)| ProductSeed {
                sku: sku.to_owned(),
                total,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions,
            })
            .collect();
        self.backend.seed_products_at(&seeds, T0_MS).expect("seed");
    }

    fn assert_books_balance(&self) {
        let violations = self.backend.check_books(T0_MS).expect("check books");
        assert!(violations.is_empty(), "{violations:?}");
    }

    fn count(&self, state: OrderState) -> u64 {
        let counts = self.backend.order_counts().expect("counts");
        counts.iter().find(|(s, _)| *s == state).map_or(0, |c| c.1)
    }
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(&super::Fixture::sqlite()); } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(&super::Fixture::postgres()); } )*
        }
    };
}

on_both!(
    a_thousand_buyers_for_ten_units_buy_exactly_ten,
    a_thousand_buyers_for_ten_units_in_four_partitions_buy_exactly_ten,
    racing_duplicates_of_one_key_make_exactly_one_order,
    a_key_replays_its_order_and_refuses_another_body,
    checkout_outcomes_and_their_durable_waits,
    the_reconciler_expires_overdue_holds_once,
    the_purchase_limit_refuses_without_burning_the_key,
    the_outbox_relays_every_event_at_least_once,
    cancel_releases_a_hold_and_refunds_a_sale_once,
    retention_forgets_keys_events_and_ended_holds_in_bounded_passes,
    partitions_never_exceed_the_total_over_random_interleavings,
    provider_events_settle_once_whatever_their_order,
    the_payments_reconciler_resolves_an_unanswered_payment,
    adjustments_move_free_units_only,
    racing_keys_of_one_pass_make_no_more_orders_than_its_limit,
    units_released_into_retired_partitions_are_sold_again_after_a_reconcile_pass,
    a_compensation_a_provider_event_stores_is_sent_by_the_next_payments_pass,
    money_for_an_order_the_store_does_not_hold_is_given_back,
);

fn buy_all(f: &Fixture, sku: &str, buyers: usize, threads: usize) {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let backend = Arc::clone(&f.backend);
            let barrier = Arc::clone(&barrier);
            let sku = sku.to_owned();
            thread::spawn(move || {
                barrier.wait();
                let mut outcomes = Vec::new();
                for i in (t..buyers).step_by(threads) {
                    let subject = format!("buyer-{i}");
                    let result = backend.checkout_within(
                        &subject,
                        &key(&format!("key-{i:08}")),
                        &request(&sku, 1, PM_OK),
                        OrderLimits::UNLIMITED,
                        T0_MS,
                    );
                    outcomes.push(result.expect("checkout").0.state);
                }
                outcomes
            })
        })
        .collect();
    let states: Vec<OrderState> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("buyer thread"))
        .collect();
    let confirmed = states
        .iter()
        .filter(|s| **s == OrderState::Confirmed)
        .count();
    let rejected = states
        .iter()
        .filter(|s| **s == OrderState::Rejected)
        .count();
    assert_eq!((confirmed, rejected), (10, buyers - 10), "{states:?}");
}

fn a_thousand_buyers_for_ten_units_buy_exactly_ten(f: &Fixture) {
    f.seed(&[("hot", 10, 1)]);
    buy_all(f, "hot", 1000, 16);
    let stock = f.backend.stock("hot").unwrap();
    assert_eq!(
        (
            stock.total,
            stock.available,
            stock.reserved,
            stock.committed
        ),
        (10, 0, 0, 10)
    );
    assert_eq!(f.count(OrderState::Confirmed), 10);
    assert_eq!(f.provider.total_captures(), 10);
    f.assert_books_balance();
}

fn a_thousand_buyers_for_ten_units_in_four_partitions_buy_exactly_ten(f: &Fixture) {
    f.seed(&[("hot", 10, 4)]);
    let parts = f.backend.partitions("hot").unwrap();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts.iter().map(|p| p.share).sum::<i64>(), 10);
    buy_all(f, "hot", 1000, 16);
    let parts = f.backend.partitions("hot").unwrap();
    assert!(parts.iter().all(|p| p.available == 0), "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.committed).sum::<i64>(), 10);
    assert_eq!(f.provider.total_captures(), 10);
    f.assert_books_balance();
}

fn racing_duplicates_of_one_key_make_exactly_one_order(f: &Fixture) {
    const RACERS: usize = 16;
    f.seed(&[("sku-a", 100, 1)]);
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|_| {
            let backend = Arc::clone(&f.backend);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                backend.checkout_within(
                    "sub-1",
                    &key("same-key-123"),
                    &request("sku-a", 1, PM_OK),
                    OrderLimits::UNLIMITED,
                    T0_MS,
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let created: Vec<String> = results
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
    let total: u64 = f.backend.order_counts().unwrap().iter().map(|c| c.1).sum();
    assert_eq!(total, 1);
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.committed), (99, 1));
    assert_eq!(f.provider.total_captures(), 1);
}

fn a_key_replays_its_order_and_refuses_another_body(f: &Fixture) {
    f.seed(&[("sku-a", 5, 1)]);
    let k = key("replay-key-1");
    let limits = OrderLimits::UNLIMITED;
    let body = request("sku-a", 2, PM_OK);
    let (first, created) = f
        .backend
        .checkout_within("sub", &k, &body, limits, T0_MS)
        .unwrap();
    assert_eq!(
        (created, first.state),
        (Created::Created, OrderState::Confirmed)
    );
    let (again, replay) = f
        .backend
        .checkout_within("sub", &k, &body, limits, T0_MS + 1)
        .unwrap();
    assert_eq!(replay, Created::Replay);
    assert_eq!(again, first);
    let other = request("sku-a", 3, PM_OK);
    let err = f
        .backend
        .checkout_within("sub", &k, &other, limits, T0_MS)
        .unwrap_err();
    assert!(matches!(err, CheckoutError::Mismatch), "{err:?}");
    // The same key of another subject is another key.
    let (theirs, created) = f
        .backend
        .checkout_within("sub-2", &k, &body, limits, T0_MS)
        .unwrap();
    assert_eq!(created, Created::Created);
    assert_ne!(theirs.order_id, first.order_id);
    // An unknown SKU does not burn the key.
    let k2 = key("unknown-sku-key");
    let err = f
        .backend
        .checkout_within("sub", &k2, &request("nope", 1, PM_OK), limits, T0_MS)
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    let (_, created) = f
        .backend
        .checkout_within("sub", &k2, &request("sku-a", 1, PM_OK), limits, T0_MS)
        .unwrap();
    assert_eq!(created, Created::Created);
    f.assert_books_balance();
}

fn checkout_outcomes_and_their_durable_waits(f: &Fixture) {
    f.seed(&[("sku-a", 1, 1)]);
    let limits = OrderLimits::UNLIMITED;
    let before = f.backend.durable_writes();
    let (declined, _) = f
        .backend
        .checkout_within(
            "sub",
            &key("declined-1"),
            &request("sku-a", 1, PM_DECLINE),
            limits,
            T0_MS,
        )
        .unwrap();
    assert_eq!(declined.state, OrderState::Declined);
    assert_eq!(declined.payment_state, PaymentState::Declined);
    assert_eq!(f.backend.durable_writes() - before, 2, "declined: 2 waits");
    assert_eq!(f.backend.stock("sku-a").unwrap().available, 1, "released");

    let before = f.backend.durable_writes();
    let (confirmed, _) = f
        .backend
        .checkout_within(
            "sub",
            &key("confirmed-1"),
            &request("sku-a", 1, PM_OK),
            limits,
            T0_MS,
        )
        .unwrap();
    assert_eq!(confirmed.state, OrderState::Confirmed);
    assert_eq!(confirmed.payment_state, PaymentState::Captured);
    assert!(confirmed.payment_id.is_some());
    assert_eq!(f.backend.durable_writes() - before, 3, "confirmed: 3 waits");

    let before = f.backend.durable_writes();
    let (rejected, _) = f
        .backend
        .checkout_within(
            "sub",
            &key("sold-out-1"),
            &request("sku-a", 1, PM_OK),
            limits,
            T0_MS,
        )
        .unwrap();
    assert_eq!(rejected.state, OrderState::Rejected);
    assert_eq!(rejected.reservation_expires_at_ms, None);
    assert_eq!(f.backend.durable_writes() - before, 1, "sold out: 1 wait");

    let seen = f.backend.get_order("sub", &confirmed.order_id).unwrap();
    assert_eq!(seen, confirmed);
    let hidden = f.backend.get_order("someone-else", &confirmed.order_id);
    assert!(matches!(hidden, Err(CheckoutError::NotFound)));
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (0, 0, 1)
    );
    f.assert_books_balance();
}

fn the_reconciler_expires_overdue_holds_once(f: &Fixture) {
    f.seed(&[("sku-a", 3, 1)]);
    let (order, _) = f
        .backend
        .begin_within(
            "sub",
            &key("hold-only-1"),
            &request("sku-a", 2, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Reserved);
    assert_eq!(order.reservation_expires_at_ms, Some(T0_MS + TTL_MS));
    assert_eq!(f.backend.stock("sku-a").unwrap().reserved, 2);
    assert_eq!(f.backend.expire_holds(T0_MS + TTL_MS - 1, 100).unwrap(), 0);
    assert_eq!(f.backend.expire_holds(T0_MS + TTL_MS, 100).unwrap(), 1);
    assert_eq!(f.backend.expire_holds(T0_MS + TTL_MS + 1, 100).unwrap(), 0);
    let order = f.backend.get_order("sub", &order.order_id).unwrap();
    assert_eq!(order.state, OrderState::Expired);
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.reserved), (3, 0));
    f.assert_books_balance();
}

/// Collects what it is given; refuses while `refuse` is set.
#[derive(Default)]
struct CollectSink {
    events: Vec<OutboxEvent>,
    refuse: bool,
}

impl Sink for CollectSink {
    fn publish(&mut self, events: &[OutboxEvent]) -> Result<(), SinkError> {
        if self.refuse {
            return Err(SinkError::Refused("scripted".into()));
        }
        self.events.extend_from_slice(events);
        Ok(())
    }
}

fn relay_all(backend: &dyn OrderBackend, sink: &mut CollectSink, now_ms: i64) -> usize {
    let mut published = 0;
    loop {
        let pass = backend.relay_outbox_once(sink, 2, now_ms).expect("relay");
        published += pass.published;
        if !pass.more_pending {
            return published;
        }
    }
}

fn the_outbox_relays_every_event_at_least_once(f: &Fixture) {
    f.seed(&[("sku-a", 5, 1)]);
    let (order, _) = f
        .backend
        .checkout_within(
            "sub",
            &key("outbox-key-1"),
            &request("sku-a", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let mut refusing = CollectSink {
        refuse: true,
        ..CollectSink::default()
    };
    assert!(f
        .backend
        .relay_outbox_once(&mut refusing, 10, T0_MS)
        .is_err());
    let mut sink = CollectSink::default();
    let published = relay_all(f.backend.as_ref(), &mut sink, T0_MS);
    assert!(published >= 2, "the order's events: {:?}", sink.events);
    assert_eq!(published, sink.events.len());
    let ids: std::collections::HashSet<&str> = sink.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), sink.events.len(), "each event once");
    assert!(sink.events.iter().all(|e| e.order_id == order.order_id));
    assert!(
        sink.events.windows(2).all(|w| w[0].seq < w[1].seq),
        "oldest first"
    );
    let last = sink.events.last().unwrap();
    assert_eq!(last.event_type, OrderState::Confirmed.event_type());
    assert_eq!(last.data["state"], "confirmed");
    assert_eq!(
        relay_all(f.backend.as_ref(), &mut sink, T0_MS),
        0,
        "nothing left"
    );
}

fn cancel_releases_a_hold_and_refunds_a_sale_once(f: &Fixture) {
    f.seed(&[("sku-a", 4, 2)]);
    let limits = OrderLimits::UNLIMITED;
    let (held, _) = f
        .backend
        .begin_within(
            "sub",
            &key("cancel-held-1"),
            &request("sku-a", 1, PM_OK),
            limits,
            T0_MS,
        )
        .unwrap();
    let (sold, _) = f
        .backend
        .checkout_within(
            "sub",
            &key("cancel-sold-1"),
            &request("sku-a", 2, PM_OK),
            limits,
            T0_MS,
        )
        .unwrap();
    assert_eq!(sold.state, OrderState::Confirmed);
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (1, 1, 2)
    );
    let hidden = f.backend.cancel("someone-else", &held.order_id, T0_MS);
    assert!(matches!(hidden, Err(CheckoutError::NotFound)));

    let cancelled = f.backend.cancel("sub", &held.order_id, T0_MS + 1).unwrap();
    assert_eq!(cancelled.state, OrderState::Cancelled);
    let refunded = f.backend.cancel("sub", &sold.order_id, T0_MS + 2).unwrap();
    assert_eq!(refunded.state, OrderState::Refunded);
    assert_eq!(refunded.payment_state, PaymentState::Refunded);
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (4, 0, 0)
    );
    // Again: nothing moves twice.
    assert_eq!(
        f.backend
            .cancel("sub", &held.order_id, T0_MS + 3)
            .unwrap()
            .state,
        OrderState::Cancelled
    );
    assert_eq!(
        f.backend
            .cancel("sub", &sold.order_id, T0_MS + 3)
            .unwrap()
            .state,
        OrderState::Refunded
    );
    assert_eq!(f.backend.stock("sku-a").unwrap().available, 4);
    let payment_id = sold.payment_id.as_deref().unwrap();
    let payment = f
        .provider
        .payments()
        .into_iter()
        .find(|p| p.payment_id == payment_id)
        .expect("the sale's payment");
    assert_eq!(payment.refunds, 1, "{payment:?}");
    f.assert_books_balance();
}

fn retention_forgets_keys_events_and_ended_holds_in_bounded_passes(f: &Fixture) {
    const HOUR_MS: i64 = 3_600_000;
    f.seed(&[("sku-a", 5, 1)]);
    let limits = OrderLimits::UNLIMITED;
    let body = request("sku-a", 1, PM_OK);
    for i in 0..3 {
        let k = key(&format!("kept-key-{i}"));
        f.backend
            .checkout_within("sub", &k, &body, limits, T0_MS)
            .unwrap();
    }
    let declined = request("sku-a", 1, PM_DECLINE);
    f.backend
        .checkout_within("sub", &key("declined-key"), &declined, limits, T0_MS)
        .unwrap();
    relay_all(f.backend.as_ref(), &mut CollectSink::default(), T0_MS);

    let early = f.backend.prune_once(T0_MS + HOUR_MS, 100).unwrap();
    assert_eq!(
        (
            early.idempotency_keys,
            early.outbox_events,
            early.ended_holds
        ),
        (0, 0, 0)
    );
    // Past 25 h the keys go, two per pass at this limit.
    let day = T0_MS + 25 * HOUR_MS + 1;
    let first = f.backend.prune_once(day, 2).unwrap();
    assert_eq!(first.idempotency_keys, 2);
    assert!(first.more_due(2));
    assert_eq!(f.backend.prune_once(day, 2).unwrap().idempotency_keys, 2);
    assert_eq!(f.backend.prune_once(day, 2).unwrap().idempotency_keys, 0);
    // A forgotten key is a new key.
    let (again, created) = f
        .backend
        .checkout_within("sub", &key("kept-key-0"), &body, limits, day)
        .unwrap();
    assert_eq!(
        (created, again.state),
        (Created::Created, OrderState::Confirmed)
    );
    // Past 7 days the published events and the released hold go too.
    let week = T0_MS + 7 * 24 * HOUR_MS + 1;
    let later = f.backend.prune_once(week, 1000).unwrap();
    assert!(later.outbox_events >= 8, "{later:?}");
    assert_eq!(later.ended_holds, 1, "the declined order's hold");
    let stock = f.backend.stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.committed), (1, 4));
    f.assert_books_balance();
}

fn the_purchase_limit_refuses_without_burning_the_key(f: &Fixture) {
    f.seed(&[("sku-a", 5, 1)]);
    let one = OrderLimits {
        orders_per_subject_max: 1,
    };
    let body = request("sku-a", 1, PM_OK);
    f.backend
        .checkout_within("pass-1", &key("first-key-1"), &body, one, T0_MS)
        .unwrap();
    let err = f
        .backend
        .checkout_within("pass-1", &key("second-key"), &body, one, T0_MS)
        .unwrap_err();
    assert!(matches!(err, CheckoutError::PurchaseLimit), "{err:?}");
    let counted = f.backend.subject_orders("pass-1").unwrap();
    assert_eq!((counted.started, counted.open), (1, 0));
    let two = OrderLimits {
        orders_per_subject_max: 2,
    };
    let (_, created) = f
        .backend
        .checkout_within("pass-1", &key("second-key"), &body, two, T0_MS)
        .unwrap();
    assert_eq!(created, Created::Created, "the refused key was not kept");
}

/// Random interleavings of reserve, commit (paid), release (declined,
/// expired) and rebalance over four partitions: after every step the SKU
/// holds exactly its total, its partitions add up to it, and a reservation
/// is refused only when the whole SKU lacks the units.
fn partitions_never_exceed_the_total_over_random_interleavings(f: &Fixture) {
    const TOTAL: i64 = 24;
    f.seed(&[("p", TOTAL as u32, 4)]);
    let mut rng = StdRng::seed_from_u64(11);
    let mut now = T0_MS;
    let limits = OrderLimits::UNLIMITED;
    for step in 0..120 {
        let before = f.backend.stock("p").unwrap();
        let quantity = rng.random_range(1..=3u32);
        let k = key(&format!("step-key-{step:04}"));
        let subject = format!("s{step}");
        match rng.random_range(0..5) {
            0 | 1 => {
                let (order, _) = f
                    .backend
                    .begin_within(&subject, &k, &request("p", quantity, PM_OK), limits, now)
                    .unwrap();
                let fits = before.available >= i64::from(quantity);
                let held = order.state == OrderState::Reserved;
                assert_eq!(held, fits, "step {step}: {before:?} for {quantity}");
            }
            2 => {
                let (order, _) = f
                    .backend
                    .checkout_within(&subject, &k, &request("p", quantity, PM_OK), limits, now)
                    .unwrap();
                let fits = before.available >= i64::from(quantity);
                assert_eq!(order.state == OrderState::Confirmed, fits, "step {step}");
            }
            3 => {
                f.backend
                    .checkout_within(
                        &subject,
                        &k,
                        &request("p", quantity, PM_DECLINE),
                        limits,
                        now,
                    )
                    .unwrap();
                let after = f.backend.stock("p").unwrap();
                assert_eq!(after.available, before.available, "declined gives back");
            }
            _ => {
                if rng.random_bool(0.5) {
                    now += TTL_MS;
                    f.backend.expire_holds(now, 10_000).unwrap();
                    now += 1;
                    assert_eq!(f.backend.stock("p").unwrap().reserved, 0, "all expired");
                } else {
                    f.backend.rebalance("p", now).unwrap();
                }
            }
        }
        let level = f.backend.stock("p").unwrap();
        assert!(level.is_conserved(), "step {step}: {level:?}");
        assert_eq!(level.total, TOTAL, "step {step}");
        let parts = f.backend.partitions("p").unwrap();
        assert_eq!(
            parts.iter().map(|p| p.available).sum::<i64>(),
            level.available
        );
        assert_eq!(
            parts.iter().map(|p| p.reserved).sum::<i64>(),
            level.reserved
        );
        assert_eq!(
            parts.iter().map(|p| p.committed).sum::<i64>(),
            level.committed
        );
        assert!(parts.iter().all(|p| p.available >= 0 && p.reserved >= 0));
    }
    let level = f.backend.stock("p").unwrap();
    assert!(level.committed > 0, "the walk sold something: {level:?}");
    f.assert_books_balance();
}

/// One pass, a limit of one order, 20 checkouts at once with 20 distinct
/// keys: exactly one order, the others refused without an order (a count
/// outside the creating transaction's lock lets them all through).
fn racing_keys_of_one_pass_make_no_more_orders_than_its_limit(f: &Fixture) {
    const RACERS: usize = 20;
    f.seed(&[("sku-a", 100, 1)]);
    let one = OrderLimits {
        orders_per_subject_max: 1,
    };
    let barrier = Arc::new(Barrier::new(RACERS));
    let handles: Vec<_> = (0..RACERS)
        .map(|i| {
            let backend = Arc::clone(&f.backend);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                backend.checkout_within(
                    "pass-1",
                    &key(&format!("racing-key-{i:04}")),
                    &request("sku-a", 1, PM_OK),
                    one,
                    T0_MS,
                )
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("racer"))
        .collect();
    let created = results
        .iter()
        .filter(|r| matches!(r, Ok((_, Created::Created))))
        .count();
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(CheckoutError::PurchaseLimit)))
        .count();
    assert_eq!((created, refused), (1, RACERS - 1), "{results:?}");
    let counted = f.backend.subject_orders("pass-1").unwrap();
    assert_eq!(counted.started, 1);
    let sum: u64 = f.backend.order_counts().unwrap().iter().map(|c| c.1).sum();
    assert_eq!(sum, 1);
    f.assert_books_balance();
}

/// Every unit held, `partitions` lowered from 4 to 2, the holds
/// cancelled: half the units go back to the two retired partitions, which
/// a checkout never takes from. One reconcile pass moves them to the live
/// ones, and all 8 units sell again.
fn units_released_into_retired_partitions_are_sold_again_after_a_reconcile_pass(f: &Fixture) {
    f.seed(&[("sku-p", 8, 4)]);
    let limits = OrderLimits::UNLIMITED;
    let held: Vec<_> = (0..8)
        .map(|i| {
            let (order, _) = f
                .backend
                .begin_within(
                    &format!("h{i}"),
                    &key(&format!("hold-{i:04}")),
                    &request("sku-p", 1, PM_OK),
                    limits,
                    T0_MS,
                )
                .unwrap();
            assert_eq!(order.state, OrderState::Reserved);
            order
        })
        .collect();
    f.seed(&[("sku-p", 8, 2)]);
    for order in &held {
        let cancelled = f
            .backend
            .cancel(&order.subject, &order.order_id, T0_MS)
            .unwrap();
        assert_eq!(cancelled.state, OrderState::Cancelled);
    }
    let parts = f.backend.partitions("sku-p").unwrap();
    let retired_free: i64 = parts.iter().skip(2).map(|p| p.available).sum();
    assert_eq!(retired_free, 4, "{parts:?}");
    let outcome = f.backend.reconcile_once(T0_MS + 1, 3_600_000, 100).unwrap();
    assert_eq!(outcome.rebalanced, 1, "{outcome:?}");
    let parts = f.backend.partitions("sku-p").unwrap();
    assert!(parts.iter().skip(2).all(|p| p.available == 0), "{parts:?}");
    let sold = (0..10)
        .filter(|i| {
            let (order, _) = f
                .backend
                .checkout_within(
                    &format!("b{i}"),
                    &key(&format!("buy-{i:04}")),
                    &request("sku-p", 1, PM_OK),
                    limits,
                    T0_MS + 2,
                )
                .unwrap();
            order.state == OrderState::Confirmed
        })
        .count();
    assert_eq!(sold, 8);
    let stock = f.backend.stock("sku-p").unwrap();
    assert_eq!((stock.total, stock.available, stock.committed), (8, 0, 8));
    f.assert_books_balance();
}

/// An authorization reported by the provider for an order that never
/// started paying: money with no live order, so a void is stored. Nobody
/// is about to send it, so the very next payments pass does (not one a
/// minute later, once the in-flight bound has run out).
fn a_compensation_a_provider_event_stores_is_sent_by_the_next_payments_pass(f: &Fixture) {
    use sluice_checkout::webhook::{EventData, EventType, WebhookEvent, WebhookOutcome};
    f.seed(&[("sku-o", 2, 1)]);
    let (order, _) = f
        .backend
        .begin_within(
            "o",
            &key("orphan-auth-1"),
            &request("sku-o", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Reserved);
    let event = WebhookEvent {
        id: "evt_orphan_auth".into(),
        event_type: EventType::Authorized,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: "pay_orphan_1".into(),
            order_id: order.order_id.clone(),
            amount_cents: order.amount_cents,
        },
    };
    assert_eq!(
        f.backend.apply_webhook(&event, T0_MS).unwrap(),
        WebhookOutcome::Processed
    );
    let pass = f
        .backend
        .reconcile_payments_once(T0_MS + 1_000, 100)
        .unwrap();
    assert_eq!(pass.attempts_driven, 1, "{pass:?}");
    let voids: u64 = ["ok", "failed"]
        .iter()
        .map(|r| f.backend.metrics().compensations.get(&["void", r]))
        .sum();
    assert_eq!(voids, 1);
}

/// A provider's authorization for an order this store never held: money
/// with no order, so it is processed as an orphan and voided by the next
/// payments pass, on both back ends alike.
fn money_for_an_order_the_store_does_not_hold_is_given_back(f: &Fixture) {
    use sluice_checkout::webhook::{EventData, EventType, WebhookEvent, WebhookOutcome};
    let event = WebhookEvent {
        id: "evt_unknown_order".into(),
        event_type: EventType::Authorized,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: "pay_unknown_1".into(),
            order_id: "ord_never_held".into(),
            amount_cents: 1_000,
        },
    };
    assert_eq!(
        f.backend.apply_webhook(&event, T0_MS).unwrap(),
        WebhookOutcome::Processed
    );
    assert_eq!(Metrics::get(&f.backend.metrics().orphan_charges), 1);
    assert_eq!(
        f.backend.apply_webhook(&event, T0_MS).unwrap(),
        WebhookOutcome::Duplicate
    );
    let pass = f
        .backend
        .reconcile_payments_once(T0_MS + 1_000, 100)
        .unwrap();
    assert_eq!(pass.attempts_driven, 1, "{pass:?}");
    let voids: u64 = ["ok", "failed"]
        .iter()
        .map(|r| f.backend.metrics().compensations.get(&["void", r]))
        .sum();
    assert_eq!(voids, 1);
    assert!(matches!(
        f.backend.get_order("anyone", "ord_never_held"),
        Err(CheckoutError::NotFound)
    ));
}

// PostgreSQL only: migrations and an unreachable server.

/// Four gateways' first starts at once on an empty database, on ten
/// fresh databases (the collision of racing `CREATE TABLE IF NOT EXISTS`
/// is a narrow window): every one opens, at the binary's version.
#[test]
fn postgres_concurrent_first_starts_on_an_empty_database_all_open() {
    const GATEWAYS: usize = 4;
    const ROUNDS: usize = 10;
    let cluster = pg::shared();
    for _ in 0..ROUNDS {
        let url = cluster.create_database();
        let barrier = Arc::new(Barrier::new(GATEWAYS));
        let handles: Vec<_> = (0..GATEWAYS)
            .map(|_| {
                let (url, barrier) = (url.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    let provider = Arc::new(SimulatedProvider::default());
                    barrier.wait();
                    PgBackend::open(&PgConfig::new(url), provider).map(|b| b.schema_version())
                })
            })
            .collect();
        for h in handles {
            let version = h.join().expect("opener").expect("open").expect("version");
            assert_eq!(version, sluice_checkout::backend::postgres::SCHEMA_VERSION);
        }
    }
}

/// Sessions of `client`'s database waiting for a lock.
fn lock_waiters(client: &mut ::postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .unwrap()
        .get(0)
}

fn wait_for_lock_waiters(client: &mut ::postgres::Client, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock_waiters(client) < n {
        assert!(Instant::now() < deadline, "{n} lock waiters never came");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A cancel of an `authorizing` order racing the capture's settlement:
/// the settlement holds the order when the cancel comes, then confirms
/// it. The cancel must act on `confirmed` (a refund), not record a cancel
/// no settlement will read and answer the stale `authorizing`.
#[test]
fn postgres_a_cancel_racing_the_capture_refunds_rather_than_being_lost() {
    use sluice_checkout::webhook::{EventData, EventType, WebhookEvent};
    use sluice_checkout::Faults;
    let f = Fixture::postgres();
    f.seed(&[("sku-c", 2, 1)]);
    f.provider.set_faults(Faults {
        timeout_per_mille: 1000,
        ..Faults::default()
    });
    let (order, _) = f
        .backend
        .checkout_within(
            "c",
            &key("cancel-race-1"),
            &request("sku-c", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    f.provider.set_faults(Faults::default());

    let url = f.url.clone().expect("a PostgreSQL fixture");
    let mut watcher = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    // A settlement under way: the order row locked.
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut held = holder.transaction().unwrap();
    held.execute(
        "SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE",
        &[&order.order_id],
    )
    .unwrap();
    // The capture's answer arrives and waits for the order first ...
    let captured = WebhookEvent {
        id: "evt_race_capture".into(),
        event_type: EventType::Captured,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: "pay_race_1".into(),
            order_id: order.order_id.clone(),
            amount_cents: order.amount_cents,
        },
    };
    let webhook = {
        let backend = Arc::clone(&f.backend);
        thread::spawn(move || backend.apply_webhook(&captured, T0_MS + 1))
    };
    wait_for_lock_waiters(&mut watcher, 1);
    // ... then the shopper's cancel.
    let cancel = {
        let (backend, id) = (Arc::clone(&f.backend), order.order_id.clone());
        thread::spawn(move || backend.cancel("c", &id, T0_MS + 2))
    };
    wait_for_lock_waiters(&mut watcher, 2);
    held.rollback().unwrap();
    webhook.join().unwrap().expect("the capture settles");
    let answered = cancel.join().unwrap().expect("the cancel is answered");
    let now = f.backend.get_order("c", &order.order_id).unwrap();
    assert!(
        matches!(answered.state, OrderState::Refunding | OrderState::Refunded),
        "the cancel answered {:?}; the order is {:?}",
        answered.state,
        now.state
    );
    assert_eq!(now.state, answered.state, "the answer is the order's state");
    f.assert_books_balance();
}

/// The expiry pass skips an overdue hold whose order another transaction
/// holds (a cancel or a payment, which lock the order and then the hold)
/// instead of holding the hold while it waits for the order: the opposite
/// order would deadlock.
#[test]
fn postgres_the_expiry_pass_skips_a_hold_whose_order_is_locked() {
    let f = Fixture::postgres();
    f.seed(&[("sku-e", 2, 1)]);
    let (order, _) = f
        .backend
        .begin_within(
            "e",
            &key("expiry-lock-1"),
            &request("sku-e", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    let url = f.url.clone().expect("a PostgreSQL fixture");
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut held = holder.transaction().unwrap();
    held.execute(
        "SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE",
        &[&order.order_id],
    )
    .unwrap();
    let backend = Arc::clone(&f.backend);
    let (expired, _) = answered_within(Duration::from_secs(5), move || {
        backend.expire_holds(T0_MS + TTL_MS, 100)
    })
    .expect("the pass does not wait for a locked order");
    assert_eq!(expired.unwrap(), 0);
    held.rollback().unwrap();
    assert_eq!(f.backend.expire_holds(T0_MS + TTL_MS, 100).unwrap(), 1);
    f.assert_books_balance();
}

/// A gateway (re)started during a sale seeds its products again while
/// transactions hold its product's row `FOR KEY SHARE` (before migration
/// 5 every checkout in flight did, through its order's foreign key; a
/// rebalance, an adjustment or a partition's insert still does), so a
/// seed that locked the row `FOR UPDATE` waited for them all and failed
/// on the lock timeout: the gateway did not start (fleet-gateway-dies,
/// issue 15).
#[test]
fn postgres_seeding_again_does_not_wait_for_checkouts_in_flight() {
    let f = Fixture::postgres();
    f.seed(&[("sku-s", 2, 1)]);
    let url = f.url.clone().expect("a PostgreSQL fixture");
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut in_flight = holder.transaction().unwrap();
    in_flight
        .execute(
            "SELECT 1 FROM products WHERE sku = 'sku-s' FOR KEY SHARE",
            &[],
        )
        .unwrap();
    let backend = Arc::clone(&f.backend);
    let seeds = vec![ProductSeed {
        sku: "sku-s".into(),
        total: 2,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 1,
    }];
    let (seeded, _) = answered_within(Duration::from_secs(10), move || {
        backend.seed_products_at(&seeds, T0_MS)
    })
    .expect("the seed answers (the server's lock_timeout is 2 s)");
    assert_eq!(seeded.expect("seeded next to a checkout in flight"), 0);
    in_flight.rollback().unwrap();
    f.assert_books_balance();
}

/// A payment's answer locks the order before its attempt, as a webhook
/// does (order, then attempt): while it waits for an order another
/// transaction holds, the attempt row is still free, so a webhook holding
/// the order and coming for the attempt cannot deadlock with it.
#[test]
fn postgres_a_payment_answer_waits_for_the_order_before_locking_its_attempt() {
    use sluice_checkout::Faults;
    let f = Fixture::postgres();
    f.seed(&[("sku-l", 2, 1)]);
    let (order, _) = f
        .backend
        .checkout_within(
            "l",
            &key("lock-order-1"),
            &request("sku-l", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    // The refund's provider call takes long enough to lock the order in
    // between its stored attempt and its answer.
    f.provider.set_faults(Faults {
        latency_ms: 1_500,
        ..Faults::default()
    });
    let cancel = {
        let (backend, id) = (Arc::clone(&f.backend), order.order_id.clone());
        thread::spawn(move || backend.cancel("l", &id, T0_MS + 1))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while f.backend.get_order("l", &order.order_id).unwrap().state != OrderState::Refunding {
        assert!(Instant::now() < deadline, "the refund was never stored");
        thread::sleep(Duration::from_millis(10));
    }
    let url = f.url.clone().expect("a PostgreSQL fixture");
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut held = holder.transaction().unwrap();
    held.execute(
        "SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE",
        &[&order.order_id],
    )
    .unwrap();
    let mut watcher = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    wait_for_lock_waiters(&mut watcher, 1);
    let mut probe = watcher.transaction().unwrap();
    let free = probe.query(
        "SELECT 1 FROM payment_attempts WHERE order_id = $1 AND operation = 'refund'
         FOR UPDATE NOWAIT",
        &[&order.order_id],
    );
    assert!(
        free.is_ok(),
        "the answer holds the attempt while waiting for the order: {free:?}"
    );
    probe.rollback().unwrap();
    held.rollback().unwrap();
    let refunded = cancel.join().unwrap().unwrap();
    assert_eq!(refunded.state, OrderState::Refunded);
    f.assert_books_balance();
}

/// Every connection of the main pool busy (two checkouts waiting for a
/// lock on a pool of two): the readiness write still gets through, on its
/// own connection, instead of failing readiness for a busy sale.
#[test]
fn postgres_the_readiness_write_does_not_wait_for_a_busy_pool() {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let mut config = PgConfig::new(url.clone());
    config.pool_max = 2;
    config.connect_timeout = Duration::from_millis(500);
    config.timeouts.lock = Duration::from_secs(10);
    let backend = Arc::new(PgBackend::open(&config, provider).unwrap());
    backend
        .seed_products_at(
            &[ProductSeed {
                sku: "sku-a".into(),
                total: 5,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 1,
            }],
            T0_MS,
        )
        .unwrap();
    backend.probe_write(T0_MS).unwrap();
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut held = holder.transaction().unwrap();
    held.batch_execute("LOCK TABLE products IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    // The pool's two connections, each waiting on the lock: the batch of
    // checkouts (one connection for the whole batch) and an adjustment.
    let checkout = {
        let backend = Arc::clone(&backend);
        thread::spawn(move || {
            backend.checkout_within(
                "sub",
                &key("busy-pool-0"),
                &request("sku-a", 1, PM_OK),
                OrderLimits::UNLIMITED,
                T0_MS,
            )
        })
    };
    let adjust = {
        let backend = Arc::clone(&backend);
        thread::spawn(move || backend.adjust("sku-a", 1, "restock", T0_MS))
    };
    let mut watcher = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    wait_for_lock_waiters(&mut watcher, 2);
    let started = Instant::now();
    let probed = backend.probe_write(T0_MS + 1);
    assert!(probed.is_ok(), "{probed:?} after {:?}", started.elapsed());
    held.rollback().unwrap();
    let order = checkout.join().unwrap().unwrap().0;
    assert_eq!(order.state, OrderState::Confirmed);
    assert_eq!(adjust.join().unwrap().unwrap().total, 6);
}

/// The URL of `url`'s database through a relay to its server.
fn through_relay(url: &str) -> (Relay, String) {
    let port: u16 = url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a loopback URL with a port");
    let relay = Relay::start(([127, 0, 0, 1], port).into()).expect("relay");
    let relayed = url.replacen(&format!("127.0.0.1:{port}"), &relay.addr().to_string(), 1);
    (relay, relayed)
}

/// Runs `call` on a thread of its own and waits `within` for its answer.
fn answered_within<T: Send + 'static>(
    within: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, Duration)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(within).ok().map(|t| (t, started.elapsed()))
}

#[test]
fn postgres_blackholed_link_answers_store_unavailable_quickly_and_recovers() {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let (relay, relayed) = through_relay(&url);
    let provider = Arc::new(SimulatedProvider::default());
    let backend = Arc::new(PgBackend::open(&PgConfig::new(relayed), provider).unwrap());
    backend
        .seed_products_at(
            &[ProductSeed {
                sku: "sku-a".into(),
                total: 5,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 1,
            }],
            T0_MS,
        )
        .unwrap();
    let checkout = |name: &'static str| {
        let backend = Arc::clone(&backend);
        move || {
            backend.checkout_within(
                "sub",
                &key(name),
                &request("sku-a", 1, PM_OK),
                OrderLimits::UNLIMITED,
                T0_MS,
            )
        }
    };
    // Idle connections in the pool, as in a sale's pause.
    let (before, _) = checkout("before-partition")().unwrap();
    assert_eq!(before.state, OrderState::Confirmed);

    relay.set(Link::Blackholed);
    for name in ["during-partition-1", "during-partition-2"] {
        let (result, took) = answered_within(Duration::from_secs(10), checkout(name))
            .expect("a checkout during a partition is answered, not left hanging");
        let err = result.expect_err("nothing reaches the database");
        assert_eq!(err.code(), "store_unavailable", "{err:?}");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
    }

    relay.set(Link::Up);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let (result, _) = answered_within(Duration::from_secs(10), checkout("after-partition"))
            .expect("answered once the link is up");
        match result {
            Ok((order, _)) => break order,
            Err(e) if e.code() == "store_unavailable" && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("service did not resume: {e:?}"),
        }
    };
    assert_eq!(after.state, OrderState::Confirmed);
    assert_eq!(backend.stock("sku-a").unwrap().committed, 2);
}

#[test]
fn postgres_a_lock_held_past_lock_timeout_answers_store_unavailable() {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let mut config = PgConfig::new(url.clone());
    config.timeouts.lock = Duration::from_millis(300);
    let backend = Arc::new(PgBackend::open(&config, provider).unwrap());
    backend
        .seed_products_at(
            &[ProductSeed {
                sku: "sku-a".into(),
                total: 5,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 1,
            }],
            T0_MS,
        )
        .unwrap();
    let mut holder = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute("LOCK TABLE products IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let waiting = Arc::clone(&backend);
    let (result, took) = answered_within(Duration::from_secs(10), move || {
        waiting.checkout_within(
            "sub",
            &key("behind-a-lock"),
            &request("sku-a", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
    })
    .expect("answered while the lock is still held");
    let err = result.expect_err("the lock is never granted");
    assert_eq!(
        (err.code(), err.status()),
        ("store_unavailable", 503),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    tx.rollback().unwrap();
    let (order, created) = backend
        .checkout_within(
            "sub",
            &key("behind-a-lock"),
            &request("sku-a", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(
        (order.state, created),
        (OrderState::Confirmed, Created::Created)
    );
}

#[test]
fn postgres_migrations_are_recorded_and_applied_once() {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let first = PgBackend::open(&PgConfig::new(url.clone()), provider.clone()).unwrap();
    assert_eq!(
        first.schema_version().unwrap(),
        sluice_checkout::backend::postgres::SCHEMA_VERSION
    );
    // A second gateway on the same database finds it migrated.
    let second = PgBackend::open(&PgConfig::new(url.clone()), provider.clone()).unwrap();
    assert_eq!(
        second.schema_version().unwrap(),
        first.schema_version().unwrap()
    );
    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let rows: i64 = client
        .query_one("SELECT COUNT(*) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        rows,
        i64::from(sluice_checkout::backend::postgres::SCHEMA_VERSION)
    );
    // A database from a newer binary is refused.
    client
        .execute("INSERT INTO schema_migrations (version) VALUES (999)", &[])
        .unwrap();
    let err = PgBackend::open(&PgConfig::new(url), provider)
        .err()
        .expect("a newer schema is refused");
    assert!(err.to_string().contains("newer"), "{err}");
}

/// Migration 5 dropped the hot path's immediate foreign keys (an order's
/// product, a hold's order and partition); the audit checks those
/// references instead, each dangling one a line of its own.
#[test]
fn postgres_the_audit_checks_the_references_the_schema_no_longer_does() {
    let f = Fixture::postgres();
    f.seed(&[("sku-a", 4, 1)]);
    let body = request("sku-a", 1, PM_OK);
    f.backend
        .begin_within(
            "sub",
            &key("references-1"),
            &body,
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    f.assert_books_balance();
    let url = f.url.clone().expect("a PostgreSQL fixture");
    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    // Written behind the store's back; the schema lets each through now.
    // Released holds and a rejected order: the counts still add up, only
    // the references are wrong.
    client
        .batch_execute(
            "INSERT INTO orders (order_id, subject, sku, quantity, payment_method,
                 amount_cents, state, payment_state, created_at_ms, updated_at_ms)
             VALUES ('o-gone', 'sub', 'gone', 1, 'pm_ok', 100, 'rejected', 'none', 0, 0);
             INSERT INTO reservations (order_id, sku, part, quantity, state,
                 created_at_ms, expires_at_ms, settled_at_ms)
             VALUES ('ghost-1', 'sku-a', 0, 1, 'released', 0, 1, 1),
                    ('ghost-2', 'sku-a', 7, 1, 'released', 0, 1, 1);",
        )
        .unwrap();
    let mut violations = f.backend.check_books(T0_MS).unwrap();
    violations.sort();
    assert_eq!(
        violations,
        vec![
            "a hold names order ghost-1, which does not exist".to_owned(),
            "a hold names order ghost-2, which does not exist".to_owned(),
            "order o-gone is for gone, which is not a product".to_owned(),
            "the hold of order ghost-2 is on sku-a partition 7, which does not exist".to_owned(),
        ]
    );
}

/// The per-second counts of stuck orders and refused compensations can
/// be answered through their partial indexes (with sequential scans
/// priced out, the plan names the index), not only by a scan of every
/// order and attempt.
#[test]
fn postgres_the_per_second_counts_have_indexes_to_go_through() {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let _backend = PgBackend::open(&PgConfig::new(url.clone()), provider).unwrap();
    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    client.batch_execute("SET enable_seqscan = off").unwrap();
    let plan = |client: &mut ::postgres::Client, sql: &str| -> String {
        client
            .query(&format!("EXPLAIN {sql}"), &[])
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let stuck = plan(
        &mut client,
        "SELECT state, COUNT(*) FROM orders
         WHERE state IN ('reserved', 'authorizing', 'refunding') AND updated_at_ms < 5
         GROUP BY state",
    );
    assert!(stuck.contains("orders_in_flight"), "{stuck}");
    let refused = plan(
        &mut client,
        "SELECT COUNT(*) FROM payment_attempts
         WHERE operation IN ('void', 'refund') AND outcome = 'failed'",
    );
    assert!(
        refused.contains("payment_attempts_failed_compensations"),
        "{refused}"
    );
}

#[test]
fn postgres_stopped_answers_store_unavailable_and_service_resumes() {
    let cluster = pg::own();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let mut config = PgConfig::new(url);
    config.connect_timeout = Duration::from_millis(500);
    let backend = PgBackend::open(&config, provider.clone()).unwrap();
    let seed = ProductSeed {
        sku: "sku-a".into(),
        total: 5,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 2,
    };
    backend.seed_products_at(&[seed], T0_MS).unwrap();
    let limits = OrderLimits::UNLIMITED;
    let body = request("sku-a", 1, PM_OK);
    let (before, _) = backend
        .checkout_within("sub", &key("before-outage"), &body, limits, T0_MS)
        .unwrap();
    assert_eq!(before.state, OrderState::Confirmed);

    cluster.pg_ctl_stop();
    let err = backend
        .checkout_within("sub", &key("during-outage"), &body, limits, T0_MS)
        .unwrap_err();
    assert_eq!(
        (err.code(), err.status()),
        ("store_unavailable", 503),
        "{err:?}"
    );
    assert!(matches!(
        backend.stock("sku-a"),
        Err(sluice_checkout::StoreError::Unavailable(_))
    ));

    cluster.pg_ctl_start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (during, created) = loop {
        match backend.checkout_within("sub", &key("during-outage"), &body, limits, T0_MS) {
            Ok(done) => break done,
            Err(e) if e.code() == "store_unavailable" && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("service did not resume: {e:?}"),
        }
    };
    assert_eq!(
        created,
        Created::Created,
        "nothing was kept of the refused try"
    );
    assert_eq!(during.state, OrderState::Confirmed);
    // Nothing acknowledged was lost, nothing doubled.
    assert_eq!(backend.get_order("sub", &before.order_id).unwrap(), before);
    let stock = backend.stock("sku-a").unwrap();
    assert_eq!((stock.total, stock.committed, stock.available), (5, 2, 3));
    assert_eq!(provider.total_captures(), 2);
    let violations = backend.check_books(T0_MS).unwrap();
    assert!(violations.is_empty(), "{violations:?}");
}

/// Three back ends (three gateways' pools) on one database: one stock
/// authority for the fleet.
/// The back ends, their provider, the cluster (kept alive) and the URL.
type Fleet = (
    Vec<Arc<dyn OrderBackend>>,
    Arc<SimulatedProvider>,
    Arc<pg::ThrowawayPg>,
    String,
);

fn fleet_of_three() -> Fleet {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let fleet: Vec<Arc<dyn OrderBackend>> = (0..3)
        .map(|_| {
            let mut config = PgConfig::new(url.clone());
            config.pool_max = 8;
            let backend: Arc<dyn OrderBackend> =
                Arc::new(PgBackend::open(&config, provider.clone()).expect("open"));
            backend
        })
        .collect();
    (fleet, provider, cluster, url)
}

#[test]
fn postgres_fleet_of_three_sells_ten_units_to_a_thousand_buyers_exactly_once() {
    let (fleet, provider, _cluster, _) = fleet_of_three();
    let seed = ProductSeed {
        sku: "hot".into(),
        total: 10,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 8,
    };
    // Every gateway seeds at start; only the first seed sets the stock.
    for backend in &fleet {
        backend
            .seed_products_at(std::slice::from_ref(&seed), T0_MS)
            .unwrap();
    }
    const BUYERS: usize = 1000;
    const THREADS: usize = 15;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let backend = Arc::clone(&fleet[t % fleet.len()]);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                (t..BUYERS)
                    .step_by(THREADS)
                    .map(|i| {
                        backend
                            .checkout_within(
                                &format!("buyer-{i}"),
                                &key(&format!("key-{i:08}")),
                                &request("hot", 1, PM_OK),
                                OrderLimits::UNLIMITED,
                                T0_MS,
                            )
                            .expect("checkout")
                            .0
                            .state
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let states: Vec<OrderState> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let sold = states
        .iter()
        .filter(|s| **s == OrderState::Confirmed)
        .count();
    assert_eq!(sold, 10);
    assert_eq!(states.len(), BUYERS);
    for backend in &fleet {
        let stock = backend.stock("hot").unwrap();
        assert_eq!((stock.total, stock.committed, stock.available), (10, 10, 0));
        assert!(backend.check_books(T0_MS).unwrap().is_empty());
    }
    assert_eq!(provider.total_captures(), 10);
}

#[test]
fn postgres_fleet_expiry_passes_run_each_hold_out_once() {
    let (fleet, _provider, _cluster, _) = fleet_of_three();
    let seed = ProductSeed {
        sku: "sku-a".into(),
        total: 300,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 4,
    };
    fleet[0].seed_products_at(&[seed], T0_MS).unwrap();
    for i in 0..300 {
        let backend = &fleet[i % fleet.len()];
        let (order, _) = backend
            .begin_within(
                &format!("s{i}"),
                &key(&format!("hold-key-{i:04}")),
                &request("sku-a", 1, PM_OK),
                OrderLimits::UNLIMITED,
                T0_MS,
            )
            .unwrap();
        assert_eq!(order.state, OrderState::Reserved);
    }
    // The three gateways' reconcilers run at once, in small passes.
    let barrier = Arc::new(Barrier::new(fleet.len()));
    let handles: Vec<_> = fleet
        .iter()
        .map(|backend| {
            let backend = Arc::clone(backend);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut expired = 0;
                loop {
                    let n = backend.expire_holds(T0_MS + TTL_MS, 7).unwrap();
                    if n == 0 {
                        return expired;
                    }
                    expired += n;
                }
            })
        })
        .collect();
    let per_gateway: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(per_gateway.iter().sum::<usize>(), 300, "{per_gateway:?}");
    assert_eq!(fleet[0].count_expired(), 300);
    let stock = fleet[1].stock("sku-a").unwrap();
    assert_eq!((stock.available, stock.reserved), (300, 0));
    assert!(fleet[2].check_books(T0_MS).unwrap().is_empty());
}

trait CountExpired {
    fn count_expired(&self) -> u64;
}

impl CountExpired for Arc<dyn OrderBackend> {
    fn count_expired(&self) -> u64 {
        let counts = self.order_counts().unwrap();
        counts
            .iter()
            .find(|(s, _)| *s == OrderState::Expired)
            .map_or(0, |c| c.1)
    }
}

#[test]
fn postgres_fleet_relays_each_event_once_and_takes_over_a_dead_relay() {
    let (fleet, _provider, _cluster, url) = fleet_of_three();
    let seed = ProductSeed {
        sku: "sku-a".into(),
        total: 100,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 2,
    };
    fleet[0].seed_products_at(&[seed], T0_MS).unwrap();
    let checkout = |backend: &Arc<dyn OrderBackend>, i: usize| {
        backend
            .checkout_within(
                &format!("s{i}"),
                &key(&format!("relay-key-{i:04}")),
                &request("sku-a", 1, PM_OK),
                OrderLimits::UNLIMITED,
                T0_MS,
            )
            .unwrap();
    };
    for i in 0..20 {
        checkout(&fleet[i % 3], i);
    }
    let pending = |url: &str| -> i64 {
        let mut client = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
        client
            .query_one(
                "SELECT COUNT(*) FROM outbox WHERE published_at_ms IS NULL",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let expected = usize::try_from(pending(&url)).unwrap();
    assert!(expected >= 40, "{expected}");
    // Three relays at once, small passes: every event published once.
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = fleet
        .iter()
        .map(|backend| {
            let backend = Arc::clone(backend);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut sink = CollectSink::default();
                barrier.wait();
                while backend
                    .relay_outbox_once(&mut sink, 3, T0_MS)
                    .unwrap()
                    .published
                    > 0
                {}
                sink.events
            })
        })
        .collect();
    let mut all: Vec<OutboxEvent> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let mut last = CollectSink::default();
    relay_all(fleet[0].as_ref(), &mut last, T0_MS);
    all.extend(last.events);
    let ids: std::collections::HashSet<String> = all.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        (all.len(), ids.len()),
        (expected, expected),
        "each event exactly once"
    );
    assert_eq!(pending(&url), 0);

    // A relay that dies mid-pass (its sink never returns) keeps its lease;
    // another gateway's relay takes the events once the lease runs out.
    for i in 20..25 {
        checkout(&fleet[0], i);
    }
    struct Dies;
    impl Sink for Dies {
        fn publish(&mut self, _: &[OutboxEvent]) -> Result<(), SinkError> {
            panic!("the gateway died mid-pass");
        }
    }
    let dead = Arc::clone(&fleet[0]);
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = dead.relay_outbox_once(&mut Dies, 1000, T0_MS);
    }));
    assert!(died.is_err());
    let mut taker = CollectSink::default();
    let soon = fleet[1]
        .relay_outbox_once(&mut taker, 1000, T0_MS + 1)
        .unwrap();
    assert_eq!(soon.published, 0, "still leased by the dead relay");
    let lease = sluice_checkout::backend::postgres::OUTBOX_LEASE_MS;
    let later = fleet[1]
        .relay_outbox_once(&mut taker, 1000, T0_MS + lease)
        .unwrap();
    assert!(later.published >= 10, "{later:?}");
    assert_eq!(pending(&url), 0);
}

fn provider_events_settle_once_whatever_their_order(f: &Fixture) {
    use sluice_checkout::webhook::{EventData, EventType, WebhookEvent, WebhookOutcome};
    f.seed(&[("sku-w", 3, 1)]);
    let limits = OrderLimits::UNLIMITED;
    let (order, _) = f
        .backend
        .checkout_within(
            "w",
            &key("webhook-1"),
            &request("sku-w", 1, PM_OK),
            limits,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Confirmed);
    let payment_id = order.payment_id.clone().unwrap();
    let event = |id: &str, event_type: EventType, amount_cents: u64| WebhookEvent {
        id: id.to_owned(),
        event_type,
        created: T0_MS / 1000,
        data: EventData {
            payment_id: payment_id.clone(),
            order_id: order.order_id.clone(),
            amount_cents,
        },
    };
    let amount = order.amount_cents;
    let apply = |e: &WebhookEvent| f.backend.apply_webhook(e, T0_MS + 1_000).unwrap();
    // The provider's own events of this payment, arriving after the
    // answers: already there.
    assert_eq!(
        apply(&event("evt_a", EventType::Authorized, amount)),
        WebhookOutcome::Stale
    );
    assert_eq!(
        apply(&event("evt_c", EventType::Captured, amount)),
        WebhookOutcome::Stale
    );
    // Another amount contradicts the order: refused, nothing changed.
    assert_eq!(
        apply(&event("evt_x", EventType::Refunded, amount + 1)),
        WebhookOutcome::RejectedTransition
    );
    assert_eq!(
        f.backend.get_order("w", &order.order_id).unwrap().state,
        OrderState::Confirmed
    );
    // A refund made at the provider's dashboard: the order follows and its
    // unit is back on sale.
    let refund = event("evt_r", EventType::Refunded, amount);
    assert_eq!(apply(&refund), WebhookOutcome::Processed);
    let refunded = f.backend.get_order("w", &order.order_id).unwrap();
    assert_eq!(
        (refunded.state, refunded.payment_state),
        (OrderState::Refunded, PaymentState::Refunded)
    );
    let stock = f.backend.stock("sku-w").unwrap();
    assert_eq!((stock.available, stock.committed), (3, 0));
    // The same event again (a redelivery, another gateway): nothing moves.
    let writes = f.backend.durable_writes();
    assert_eq!(apply(&refund), WebhookOutcome::Duplicate);
    assert!(f.backend.durable_writes() - writes <= 1);
    assert_eq!(f.backend.stock("sku-w").unwrap().available, 3);
    let counted = &f.backend.metrics().webhook_events;
    assert_eq!(counted.get(&["duplicate"]), 1);
    assert_eq!(counted.get(&["processed"]), 1);
    f.assert_books_balance();
}

fn the_payments_reconciler_resolves_an_unanswered_payment(f: &Fixture) {
    use sluice_checkout::limits::PAYMENT_IN_FLIGHT_MS;
    use sluice_checkout::Faults;
    f.seed(&[("sku-r", 2, 1)]);
    // Every provider call times out: the order is left authorizing, its
    // unit held, nothing decided.
    f.provider.set_faults(Faults {
        timeout_per_mille: 1000,
        ..Faults::default()
    });
    let (order, _) = f
        .backend
        .checkout_within(
            "r",
            &key("reconcile-1"),
            &request("sku-r", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    assert_eq!(order.state, OrderState::Authorizing);
    assert_eq!(f.backend.stock("sku-r").unwrap().reserved, 1);
    // The provider answers again; past the in-flight bound the pass asks
    // it what became of the payment and finishes it.
    f.provider.set_faults(Faults::default());
    let mut now = T0_MS + PAYMENT_IN_FLIGHT_MS + 1;
    let deadline = now + 10 * PAYMENT_IN_FLIGHT_MS;
    loop {
        f.backend.reconcile_payments_once(now, 100).unwrap();
        let state = f.backend.get_order("r", &order.order_id).unwrap().state;
        if state == OrderState::Confirmed {
            break;
        }
        assert!(now < deadline, "still {state:?}");
        now += PAYMENT_IN_FLIGHT_MS + 1;
    }
    let stock = f.backend.stock("sku-r").unwrap();
    assert_eq!(
        (stock.available, stock.reserved, stock.committed),
        (1, 0, 1)
    );
    // Captured once, however many passes looked at it.
    assert_eq!(f.provider.total_captures(), 1);
    f.backend
        .reconcile_payments_once(now + PAYMENT_IN_FLIGHT_MS + 1, 100)
        .unwrap();
    assert_eq!(f.provider.total_captures(), 1);
    f.assert_books_balance();
}

fn adjustments_move_free_units_only(f: &Fixture) {
    use sluice_checkout::StoreError;
    f.seed(&[("sku-j", 5, 2)]);
    let level = f.backend.adjust("sku-j", 3, "restock", T0_MS).unwrap();
    assert_eq!((level.total, level.available), (8, 8));
    f.backend
        .begin_within(
            "j",
            &key("adjust-1"),
            &request("sku-j", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .unwrap();
    // A held unit is not the operator's to take.
    let taken = f.backend.adjust("sku-j", -8, "shrinkage", T0_MS);
    assert!(
        matches!(taken, Err(StoreError::InvalidArgument(_))),
        "{taken:?}"
    );
    let level = f.backend.adjust("sku-j", -7, "shrinkage", T0_MS).unwrap();
    assert_eq!((level.total, level.available, level.reserved), (1, 0, 1));
    for (delta, reason) in [(0, "none"), (1, " ")] {
        let refused = f.backend.adjust("sku-j", delta, reason, T0_MS);
        assert!(
            matches!(refused, Err(StoreError::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    let unknown = f.backend.adjust("sku-none", 1, "restock", T0_MS);
    assert!(
        matches!(unknown, Err(StoreError::UnknownSku(_))),
        "{unknown:?}"
    );
    f.assert_books_balance();
}

#[test]
fn postgres_fleet_payments_passes_drive_each_attempt_once() {
    use sluice_checkout::limits::PAYMENT_IN_FLIGHT_MS;
    use sluice_checkout::Faults;
    let (fleet, provider, _cluster, _) = fleet_of_three();
    let seed = ProductSeed {
        sku: "sku-p".into(),
        total: 100,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions: 2,
    };
    fleet[0].seed_products_at(&[seed], T0_MS).unwrap();
    // The provider answers 5xx to everything (nothing takes effect): 30
    // orders are left authorizing, their attempts pending.
    provider.set_faults(Faults {
        error_5xx_per_mille: 1000,
        ..Faults::default()
    });
    let mut orders = Vec::new();
    for i in 0..30 {
        let (order, _) = fleet[i % 3]
            .checkout_within(
                &format!("p{i}"),
                &key(&format!("pay-key-{i:04}")),
                &request("sku-p", 1, PM_OK),
                OrderLimits::UNLIMITED,
                T0_MS,
            )
            .unwrap();
        assert_eq!(order.state, OrderState::Authorizing);
        orders.push(order);
    }
    provider.set_faults(Faults::default());
    // The three gateways' payments passes run at once, in small passes:
    // each attempt is taken by one of them.
    let now = T0_MS + PAYMENT_IN_FLIGHT_MS + 1;
    let barrier = Arc::new(Barrier::new(fleet.len()));
    let handles: Vec<_> = fleet
        .iter()
        .map(|backend| {
            let backend = Arc::clone(backend);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut driven = 0;
                loop {
                    let outcome = backend.reconcile_payments_once(now, 4).unwrap();
                    if outcome.attempts_driven == 0 {
                        return driven;
                    }
                    assert_eq!(outcome.attempts_driven, outcome.attempts_resolved);
                    driven += outcome.attempts_driven;
                }
            })
        })
        .collect();
    let per_gateway: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(per_gateway.iter().sum::<usize>(), 30, "{per_gateway:?}");
    for (i, order) in orders.iter().enumerate() {
        let order = fleet[(i + 1) % 3]
            .get_order(&format!("p{i}"), &order.order_id)
            .unwrap();
        assert_eq!(order.state, OrderState::Confirmed);
    }
    assert_eq!(provider.total_captures(), 30);
    let stock = fleet[2].stock("sku-p").unwrap();
    assert_eq!((stock.committed, stock.reserved), (30, 0));
    assert!(fleet[1].check_books(now).unwrap().is_empty());
}

/// Runs every store step on one thread of its own, in order.
struct OneStoreThread(std::sync::Mutex<std::sync::mpsc::Sender<Job>>);

impl OneStoreThread {
    fn start() -> Self {
        let (jobs, inbox) = std::sync::mpsc::channel::<Job>();
        thread::spawn(move || inbox.into_iter().for_each(|job| job()));
        Self(std::sync::Mutex::new(jobs))
    }
}

impl Blocking for OneStoreThread {
    fn spawn(&self, job: Job) {
        self.0
            .lock()
            .unwrap()
            .send(job)
            .expect("the store thread runs");
    }
}

/// The simulator, with the answer to every authorization (or, once
/// `refunds` is set, every refund instead) held — the provider has
/// processed it and sent its events — until the test lets it through.
struct HeldCalls {
    sim: Arc<SimulatedProvider>,
    entered: std::sync::atomic::AtomicUsize,
    arrived: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
    refunds: std::sync::atomic::AtomicBool,
}

impl HeldCalls {
    /// Counts the call in and waits until the test lets it through.
    async fn hold(&self) {
        self.entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.arrived.notify_one();
        self.release.acquire().await.expect("open").forget();
    }

    fn holds_refunds(&self) -> bool {
        self.refunds.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until `n` calls are held.
    async fn until_held(&self, n: usize, what: &str) {
        while self.entered.load(std::sync::atomic::Ordering::SeqCst) < n {
            tokio::time::timeout(Duration::from_secs(30), self.arrived.notified())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "only {} of {n} {what} reached the provider",
                        self.entered.load(std::sync::atomic::Ordering::SeqCst)
                    )
                });
        }
    }
}

#[async_trait]
impl PaymentProvider for HeldCalls {
    fn name(&self) -> &str {
        "held"
    }
    async fn authorize(
        &self,
        key: &str,
        order_id: &str,
        amount: u64,
        method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        let answer = self.sim.authorize(key, order_id, amount, method).await;
        if !self.holds_refunds() {
            self.hold().await;
        }
        answer
    }
    async fn capture(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        self.sim.capture(key, payment_id, amount).await
    }
    async fn void(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        self.sim.void(key, payment_id, amount).await
    }
    async fn refund(&self, key: &str, payment_id: &str, amount: u64) -> Result<(), PaymentError> {
        let answer = self.sim.refund(key, payment_id, amount).await;
        if self.holds_refunds() {
            self.hold().await;
        }
        answer
    }
    async fn lookup(&self, key: &str) -> Result<Option<OperationOutcome>, PaymentError> {
        self.sim.lookup(key).await
    }
    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        self.sim.events_since(cursor, limit).await
    }
}

/// A back end paying through [`HeldCalls`], with 100 units of
/// `sku-a`, one store thread and a runtime for its async checkouts.
struct Held {
    f: Fixture,
    sim: Arc<SimulatedProvider>,
    held: Arc<HeldCalls>,
    steps: Arc<OneStoreThread>,
    runtime: tokio::runtime::Runtime,
}

impl Held {
    fn open(open: fn(Arc<SimulatedProvider>, Arc<dyn PaymentProvider>) -> Fixture) -> Self {
        let sim = Arc::new(SimulatedProvider::default());
        let held = Arc::new(HeldCalls {
            sim: sim.clone(),
            entered: Default::default(),
            arrived: tokio::sync::Notify::new(),
            release: tokio::sync::Semaphore::new(0),
            refunds: Default::default(),
        });
        let f = open(sim.clone(), held.clone());
        f.seed(&[("sku-a", 100, 1)]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Self {
            f,
            sim,
            held,
            steps: Arc::new(OneStoreThread::start()),
            runtime,
        }
    }
}

/// Eight async checkouts whose store steps share one thread are all
/// waiting for the provider at once: no checkout holds the thread while
/// its authorization is out. (A checkout run whole on a blocking thread,
/// as before, would let one in at a time.) Let through, all are confirmed
/// with the books balanced.
fn checkouts_waiting_for_the_provider_hold_no_store_thread(
    open: fn(Arc<SimulatedProvider>, Arc<dyn PaymentProvider>) -> Fixture,
) {
    const BUYERS: usize = 8;
    let Held {
        f,
        held,
        steps,
        runtime,
        ..
    } = Held::open(open);
    runtime.block_on(async {
        let checkouts: Vec<_> = (0..BUYERS)
            .map(|i| {
                let (backend, steps) = (Arc::clone(&f.backend), Arc::clone(&steps));
                tokio::spawn(async move {
                    let key = key(&format!("async-{i:04}"));
                    let request = request("sku-a", 1, PM_OK);
                    backend
                        .checkout_on(
                            steps.as_ref(),
                            &format!("buyer-{i}"),
                            &key,
                            &request,
                            OrderLimits::UNLIMITED,
                            T0_MS,
                        )
                        .await
                })
            })
            .collect();
        held.until_held(BUYERS, "checkouts").await;
        // A synchronous read (the `postgres` driver blocks).
        let authorizing = tokio::task::block_in_place(|| f.count(OrderState::Authorizing));
        assert_eq!(authorizing, BUYERS as u64);
        held.release.add_permits(BUYERS);
        for checkout in checkouts {
            let (order, created) = checkout.await.unwrap().unwrap();
            assert_eq!(
                (order.state, created),
                (OrderState::Confirmed, Created::Created)
            );
        }
    });
    assert_eq!(f.count(OrderState::Confirmed), BUYERS as u64);
    assert_eq!(f.provider.total_captures(), BUYERS as u32);
    f.assert_books_balance();
}

/// Eight async cancels of confirmed orders, their store steps on one
/// thread, are all waiting for their refunds at once (a cancel run whole
/// on a blocking thread, as before, would let one in at a time). Let
/// through, every order is `refunded` and its units are back on sale.
fn cancels_waiting_for_a_refund_hold_no_store_thread(
    open: fn(Arc<SimulatedProvider>, Arc<dyn PaymentProvider>) -> Fixture,
) {
    const BUYERS: usize = 8;
    let Held {
        f,
        sim,
        held,
        steps,
        runtime,
    } = Held::open(open);
    held.refunds
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let orders: Vec<sluice_checkout::Order> = (0..BUYERS)
        .map(|i| {
            let (order, _) = f
                .backend
                .checkout_within(
                    &format!("buyer-{i}"),
                    &key(&format!("refund-{i:04}")),
                    &request("sku-a", 1, PM_OK),
                    OrderLimits::UNLIMITED,
                    T0_MS,
                )
                .unwrap();
            assert_eq!(order.state, OrderState::Confirmed);
            order
        })
        .collect();
    let before = f.backend.stock("sku-a").unwrap();
    runtime.block_on(async {
        let cancels: Vec<_> = orders
            .iter()
            .enumerate()
            .map(|(i, order)| {
                let (backend, steps) = (Arc::clone(&f.backend), Arc::clone(&steps));
                let id = order.order_id.clone();
                tokio::spawn(async move {
                    backend
                        .cancel_on(steps.as_ref(), &format!("buyer-{i}"), &id, T0_MS + 1_000)
                        .await
                })
            })
            .collect();
        held.until_held(BUYERS, "refunds").await;
        let refunding = tokio::task::block_in_place(|| f.count(OrderState::Refunding));
        assert_eq!(refunding, BUYERS as u64);
        held.release.add_permits(BUYERS);
        for cancel in cancels {
            let order = cancel.await.unwrap().unwrap();
            assert_eq!(order.state, OrderState::Refunded);
        }
    });
    assert_eq!(f.count(OrderState::Refunded), BUYERS as u64);
    let refunds: u32 = sim.payments().iter().map(|p| p.refunds).sum();
    assert_eq!(refunds, BUYERS as u32);
    let after = f.backend.stock("sku-a").unwrap();
    assert_eq!(after.available, before.available + BUYERS as i64);
    f.assert_books_balance();
}

/// The provider's `authorized` event arrives while the checkout still
/// waits for its answer: the capture it stores is the checkout's to send,
/// not the next payments pass's (which, on a fleet, runs on any gateway:
/// a second send, and with one simulator per gateway, to one that never
/// saw the payment). The checkout, answered, captures once.
fn an_event_ahead_of_the_answer_leaves_the_capture_to_the_checkout(
    open: fn(Arc<SimulatedProvider>, Arc<dyn PaymentProvider>) -> Fixture,
) {
    use sluice_checkout::webhook::WebhookOutcome;
    let Held {
        f,
        sim,
        held,
        steps,
        runtime,
    } = Held::open(open);
    runtime.block_on(async {
        let checkout = {
            let (backend, steps) = (Arc::clone(&f.backend), Arc::clone(&steps));
            tokio::spawn(async move {
                let (key, request) = (key("ahead-0001"), request("sku-a", 1, PM_OK));
                backend
                    .checkout_on(
                        steps.as_ref(),
                        "buyer",
                        &key,
                        &request,
                        OrderLimits::UNLIMITED,
                        T0_MS,
                    )
                    .await
            })
        };
        tokio::time::timeout(Duration::from_secs(30), held.arrived.notified())
            .await
            .expect("the checkout reached the provider");
        // Synchronous calls (the `postgres` driver blocks).
        tokio::task::block_in_place(|| {
            let authorized = sim.events().pop().expect("the provider's event").event;
            assert_eq!(
                f.backend.apply_webhook(&authorized, T0_MS + 1_000).unwrap(),
                WebhookOutcome::Processed
            );
            let pass = f
                .backend
                .reconcile_payments_once(T0_MS + 2_000, 100)
                .unwrap();
            assert_eq!(pass.attempts_driven, 0, "{pass:?}");
            assert_eq!(sim.total_captures(), 0);
        });
        held.release.add_permits(1);
        let (order, _) = checkout.await.unwrap().unwrap();
        assert_eq!(order.state, OrderState::Confirmed);
    });
    assert_eq!(sim.total_captures(), 1);
    f.assert_books_balance();
}

mod async_checkout {
    #[test]
    fn sqlite() {
        super::checkouts_waiting_for_the_provider_hold_no_store_thread(super::Fixture::sqlite_with);
    }
    #[test]
    fn postgres() {
        super::checkouts_waiting_for_the_provider_hold_no_store_thread(
            super::Fixture::postgres_with,
        );
    }
    #[test]
    fn sqlite_cancels() {
        super::cancels_waiting_for_a_refund_hold_no_store_thread(super::Fixture::sqlite_with);
    }
    #[test]
    fn postgres_cancels() {
        super::cancels_waiting_for_a_refund_hold_no_store_thread(super::Fixture::postgres_with);
    }
    #[test]
    fn sqlite_event_ahead_of_the_answer() {
        super::an_event_ahead_of_the_answer_leaves_the_capture_to_the_checkout(
            super::Fixture::sqlite_with,
        );
    }
    #[test]
    fn postgres_event_ahead_of_the_answer() {
        super::an_event_ahead_of_the_answer_leaves_the_capture_to_the_checkout(
            super::Fixture::postgres_with,
        );
    }
}
