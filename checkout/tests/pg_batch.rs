//! The PostgreSQL back end's batched checkouts (group commit for the
//! fleet): many shoppers at once on one hot SKU with few units, on a
//! throwaway cluster. Exactly the stock is sold, no unit twice, each key
//! one order at most, and batches of several checkouts did happen, their
//! units taken by one conditional UPDATE for the batch's sum.

mod common;
#[allow(dead_code)]
#[path = "common/pg.rs"]
mod pg;

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;

use common::{key, request, PRICE_CENTS, T0_MS, TTL_MS};
use sluice_checkout::{
    CheckoutError, Created, OrderBackend, OrderLimits, OrderState, PgBackend, PgConfig,
    ProductSeed, SimulatedProvider, PM_DECLINE, PM_OK,
};

struct Sale {
    backend: Arc<PgBackend>,
    provider: Arc<SimulatedProvider>,
    url: String,
    _cluster: Arc<pg::ThrowawayPg>,
}

fn sale(total: u32) -> Sale {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let backend = PgBackend::open(&PgConfig::new(url.clone()), provider.clone()).expect("open");
    backend
        .seed_products_at(
            &[ProductSeed {
                sku: "hot".into(),
                total,
                price_cents: PRICE_CENTS,
                reservation_ttl_ms: TTL_MS,
                partitions: 1,
            }],
            T0_MS,
        )
        .expect("seed");
    Sale {
        backend: Arc::new(backend),
        provider,
        url,
        _cluster: cluster,
    }
}

/// One shopper's attempt: (buyer, units asked, answer).
type Outcome = (usize, u32, Result<(String, OrderState, Created), String>);

/// `buyers` shoppers on `threads` threads, all released at once; buyer
/// `i` asks `quantity(i)` units with key `key-i`, and every buyer whose
/// index is a multiple of `dup_every` sends its request twice, from two
/// threads.
fn rush(
    s: &Sale,
    buyers: usize,
    threads: usize,
    dup_every: usize,
    quantity: fn(usize) -> u32,
) -> Vec<Outcome> {
    let mut plan: Vec<usize> = (0..buyers).collect();
    plan.extend((0..buyers).filter(|i| i % dup_every == 0));
    let plan = Arc::new(plan);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (backend, barrier, plan) = (s.backend.clone(), barrier.clone(), plan.clone());
            thread::spawn(move || {
                barrier.wait();
                let mut outcomes = Vec::new();
                for &i in plan.iter().skip(t).step_by(threads) {
                    let units = quantity(i);
                    let answer = backend
                        .checkout_within(
                            &format!("buyer-{i}"),
                            &key(&format!("key-{i:08}")),
                            &request("hot", units, PM_OK),
                            OrderLimits::UNLIMITED,
                            T0_MS,
                        )
                        .map(|(order, created)| (order.order_id, order.state, created))
                        .map_err(|e| match e {
                            // The duplicate arrived while its twin was under way.
                            CheckoutError::Conflict => "conflict".to_owned(),
                            other => panic!("checkout {i}: {other}"),
                        });
                    outcomes.push((i, units, answer));
                }
                outcomes
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("buyer thread"))
        .collect()
}

/// The most orders any one subject (buyer) has in the store.
fn most_orders_of_one_subject(client: &mut ::postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM orders GROUP BY subject) o",
            &[],
        )
        .unwrap()
        .get(0)
}

/// What every rush must leave: the stock conserved, each confirmed unit
/// sold once, one order per key, as many captures as confirmed orders.
fn assert_books(s: &Sale, outcomes: &[Outcome], total: i64) -> (i64, i64) {
    let mut orders_of: HashMap<usize, Vec<String>> = HashMap::new();
    let mut sold = 0;
    let mut confirmed: u32 = 0;
    for (i, units, answer) in outcomes {
        if let Ok((order_id, state, created)) = answer {
            orders_of.entry(*i).or_default().push(order_id.clone());
            if *state == OrderState::Confirmed && *created == Created::Created {
                sold += i64::from(*units);
                confirmed += 1;
            }
        }
    }
    for (i, ids) in &orders_of {
        assert!(ids.iter().all(|id| *id == ids[0]), "buyer {i}: {ids:?}");
    }
    let stock = s.backend.stock("hot").unwrap();
    assert_eq!(stock.total, total);
    assert_eq!(stock.reserved, 0, "every payment finished");
    assert_eq!(stock.committed, sold, "units sold = units confirmed");
    assert_eq!(stock.available + stock.committed, total);
    assert_eq!(s.provider.total_captures(), confirmed);
    let mut client = ::postgres::Client::connect(&s.url, ::postgres::NoTls).unwrap();
    let most = most_orders_of_one_subject(&mut client);
    assert_eq!(most, 1, "one order per key (one key per buyer)");
    let orders: i64 = client
        .query_one("SELECT COUNT(*) FROM orders", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        orders as usize,
        orders_of.len(),
        "no order nobody was told of"
    );
    let violations = s.backend.check_books(T0_MS).expect("books");
    assert!(violations.is_empty(), "{violations:?}");
    (sold, stock.available)
}

#[test]
fn a_rush_on_one_hot_sku_sells_exactly_the_stock_in_summed_batches() {
    let s = sale(120);
    let outcomes = rush(&s, 300, 32, 10, |_| 1);
    let (sold, left) = assert_books(&s, &outcomes, 120);
    assert_eq!(
        (sold, left),
        (120, 0),
        "300 buyers of one unit each for 120"
    );
    let stats = s.backend.batch_stats();
    eprintln!("{stats:?}");
    assert!(stats.largest > 1, "no batch held two jobs: {stats:?}");
    assert!(
        stats.summed_takes >= 1 && stats.summed_holds >= 2,
        "no conditional UPDATE took a batch's sum: {stats:?}"
    );
    assert!(stats.batches < stats.jobs, "{stats:?}");
}

#[test]
fn a_batch_whose_sum_does_not_fit_sells_exactly_the_units_left() {
    let s = sale(10);
    // 1 to 3 units each: sums soon exceed what is left, and the batch
    // takes hold by hold in arrival order.
    let outcomes = rush(&s, 60, 24, 7, |i| 1 + (i % 3) as u32);
    let (sold, left) = assert_books(&s, &outcomes, 10);
    assert!(sold <= 10 && sold + left == 10);
    let one_unit_refused = outcomes
        .iter()
        .any(|(_, units, a)| *units == 1 && matches!(a, Ok((_, OrderState::Rejected, _))));
    if one_unit_refused {
        assert_eq!(
            left, 0,
            "a one-unit buyer was refused while units were left"
        );
    }
    assert!(
        left < 3,
        "a three-unit buyer could have had them: {left} left"
    );
}

/// Two gateways' back ends on one database, one SKU on 8 partitions (and,
/// below, on 1) with fewer units than buyers, one order per buyer: each buyer sends three
/// keys, from three threads, to both back ends, asking 1 to 3 units, a
/// fifth of them with a card that is declined. The batches of the two back
/// ends run at once: claims of the same subjects, summed takes that do not
/// fit one partition, hold-by-hold takes across partitions, declines
/// moving units back. None may wait on another in a cycle (no batch is a
/// deadlock victim run again), none fails, and the books hold per
/// partition: exactly the units taken are reserved or sold, one order per
/// buyer at most.
#[test]
fn two_back_ends_on_one_database_share_partitions_and_limits_without_deadlocks() {
    two_back_ends_share_one_sku(8);
}

/// The same on one partition, where a take waits for the row at once and
/// with no savepoint: a take whose re-check fails after the wait keeps the
/// row's lock into the locking of all partitions, which must still never
/// make a cycle.
#[test]
fn two_back_ends_on_one_partition_share_it_without_deadlocks() {
    two_back_ends_share_one_sku(1);
}

fn two_back_ends_share_one_sku(partitions: u32) {
    let cluster = pg::shared();
    let url = cluster.create_database();
    let provider = Arc::new(SimulatedProvider::default());
    let seed = [ProductSeed {
        sku: "hot".into(),
        total: 40,
        price_cents: PRICE_CENTS,
        reservation_ttl_ms: TTL_MS,
        partitions,
    }];
    let backends: Vec<Arc<PgBackend>> = (0..2)
        .map(|_| {
            let b = PgBackend::open(&PgConfig::new(url.clone()), provider.clone()).expect("open");
            b.seed_products_at(&seed, T0_MS).expect("seed");
            Arc::new(b)
        })
        .collect();
    let (buyers, keys_each, threads) = (90usize, 3usize, 24usize);
    let limit = OrderLimits {
        orders_per_subject_max: 1,
    };
    // Every buyer's keys, spread so one buyer's keys land on different
    // threads and both back ends at once.
    let plan: Arc<Vec<(usize, usize)>> = Arc::new(
        (0..keys_each)
            .flat_map(|k| (0..buyers).map(move |b| (b, k)))
            .collect(),
    );
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (backends, barrier, plan) = (backends.clone(), barrier.clone(), plan.clone());
            thread::spawn(move || {
                barrier.wait();
                let mut answers = Vec::new();
                for &(b, k) in plan.iter().skip(t).step_by(threads) {
                    let units = 1 + ((b + k) % 3) as u32;
                    let pm = if b % 5 == 0 { PM_DECLINE } else { PM_OK };
                    let answer = backends[(b + k) % 2].checkout_within(
                        &format!("buyer-{b}"),
                        &key(&format!("key-{b:04}-{k}")),
                        &request("hot", units, pm),
                        limit,
                        T0_MS,
                    );
                    answers.push((b, units, answer.map(|(o, _)| o.state)));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("buyer thread"))
        .collect();
    let (mut sold, mut busy) = (0i64, 0);
    for (b, units, answer) in &answers {
        match answer {
            Ok(OrderState::Confirmed) => sold += i64::from(*units),
            Ok(_) | Err(CheckoutError::PurchaseLimit) => {}
            // A lock waited on past PostgreSQL's lock_timeout (a loaded
            // machine): answered 503, the buyer may retry. Not a cycle:
            // those are counted in the batches' deadlock reruns, asserted
            // below.
            Err(CheckoutError::Store(sluice_checkout::StoreError::Unavailable(_))) => busy += 1,
            Err(e) => panic!("buyer {b}: {e}"),
        }
    }
    eprintln!("{busy} checkouts answered unavailable (lock waits past the timeout)");
    let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let most = most_orders_of_one_subject(&mut client);
    assert_eq!(most, 1, "one order per buyer");
    let bad: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM stock_partitions
              WHERE available < 0 OR reserved <> 0 OR committed < 0",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(bad, 0, "every partition settled and non-negative");
    let stock = backends[0].stock("hot").unwrap();
    assert_eq!(
        (stock.total, stock.available + stock.committed),
        (40, 40),
        "{stock:?}"
    );
    assert_eq!(stock.committed, sold, "units sold = units confirmed");
    assert!(sold > 0 && sold <= 40, "{sold}");
    let violations = backends[0].check_books(T0_MS).expect("books");
    assert!(violations.is_empty(), "{violations:?}");
    for b in &backends {
        let stats = b.batch_stats();
        eprintln!("{stats:?}");
        assert_eq!(
            (stats.deadlock_reruns, stats.stale_reruns, stats.split),
            (0, 0, 0),
            "a batch was a deadlock victim, met a stale statement or failed: {stats:?}"
        );
    }
}

/// A key row left without its order (written by a gateway that died
/// before creating it, long enough ago) is taken over by the retry with
/// the same body: the batch's claim reads it, passes the purchase limit,
/// and the key then names the new order. Over the limit it is refused
/// and the key row is left as it was.
#[test]
fn an_abandoned_key_is_taken_over_within_the_limit_and_left_alone_beyond_it() {
    let s = sale(10);
    let mut client = ::postgres::Client::connect(&s.url, ::postgres::NoTls).unwrap();
    let stale_ms = T0_MS - sluice_checkout::limits::IDEMPOTENCY_LOCK_STALE_MS;
    // Each buyer's key, then its order cut loose from it, as if the
    // creation had never happened (the order row stays: it counts
    // towards the limit, so the second buyer's is set at 1).
    for buyer in ["taker", "limited"] {
        let (first, _) = s
            .backend
            .begin_within(
                buyer,
                &key("key-abandoned"),
                &request("hot", 1, PM_OK),
                OrderLimits::UNLIMITED,
                stale_ms,
            )
            .expect("the first attempt");
        client
            .execute(
                "UPDATE idempotency SET order_id = NULL, completed_at_ms = NULL
                  WHERE subject = $1",
                &[&buyer],
            )
            .unwrap();
        assert_eq!(first.state, OrderState::Reserved);
    }
    let (order, created) = s
        .backend
        .begin_within(
            "taker",
            &key("key-abandoned"),
            &request("hot", 1, PM_OK),
            OrderLimits::UNLIMITED,
            T0_MS,
        )
        .expect("taken over");
    assert_eq!(
        (created, order.state),
        (Created::Created, OrderState::Reserved)
    );
    let row = client
        .query_one(
            "SELECT order_id, locked_at_ms FROM idempotency WHERE subject = 'taker'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), Some(order.order_id));
    assert_eq!(row.get::<_, i64>(1), T0_MS);
    let refused = s.backend.begin_within(
        "limited",
        &key("key-abandoned"),
        &request("hot", 1, PM_OK),
        OrderLimits {
            orders_per_subject_max: 1,
        },
        T0_MS,
    );
    assert!(
        matches!(refused, Err(CheckoutError::PurchaseLimit)),
        "{refused:?}"
    );
    let row = client
        .query_one(
            "SELECT order_id, locked_at_ms FROM idempotency WHERE subject = 'limited'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), None);
    assert_eq!(
        row.get::<_, i64>(1),
        stale_ms,
        "the refused takeover wrote nothing"
    );
}
