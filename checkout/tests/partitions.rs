//! Partitioned stock (`partitions = K`): holds spread over K rows, a
//! reservation moves on when its partition is empty, "sold out" only when
//! all are, units move only by logged rebalances, and the total is never
//! exceeded — checked over seeded random interleavings of reserve, release,
//! commit, refund, hot-path holds, expiry, adjust, rebalance and
//! repartition, with a reader watching every commit from another thread.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{key, request, seeds, Harness, T0_MS, TTL_MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};
use sluice_checkout::{
    audit, reconcile_once, Created, Order, OrderState, ProductSeed, ReserveOutcome, ReserveRequest,
};

const SKU: &str = "hot";
const SEEDS: u64 = 12;
const STEPS: usize = 80;

fn partitioned(total: u32, k: u32) -> Harness {
    let h = Harness::new(&[]);
    h.store.seed_products_at(&product(total, k), T0_MS).unwrap();
    h
}

fn product(total: u32, k: u32) -> Vec<ProductSeed> {
    let mut seeds = seeds(&[(SKU, total)]);
    seeds[0].partitions = k;
    seeds
}

/// A checkout of `quantity` units that pays with `pm_ok`.
fn buy(h: &Harness, raw_key: &str, quantity: u32) -> (Order, Created) {
    let body = request(SKU, quantity, "pm_ok");
    h.service
        .checkout("sub", &key(raw_key), &body, T0_MS)
        .unwrap()
}

fn raw(h: &Harness) -> Connection {
    Connection::open_with_flags(h.store.db_path(), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |row| row.get(0)).unwrap()
}

/// Every instant's invariants, as one read sees them: the SKU is the sum
/// of its partitions, nothing negative, held and sold never above the
/// total, each partition's counts backed by its holds.
/// `total_max` is asked after the read: the bound only ever rises, and
/// it is raised before the write that could reach it.
fn check(conn: &Connection, total_max: impl Fn() -> i64, context: &str) {
    conn.execute_batch("BEGIN").unwrap();
    let (total, available, reserved, committed): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT total, available, reserved, committed FROM stock WHERE sku = 'hot'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    let sums: (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT SUM(share), SUM(available), SUM(reserved), SUM(committed)
             FROM stock_partitions WHERE sku = 'hot'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(sums, (total, available, reserved, committed), "{context}");
    assert!(
        available >= 0 && reserved >= 0 && committed >= 0,
        "{context}"
    );
    assert_eq!(available + reserved + committed, total, "{context}");
    let total_max = total_max();
    assert!(total <= total_max, "{context}: total {total} > {total_max}");
    let unbacked = count(
        conn,
        "SELECT COUNT(*) FROM stock_partitions p WHERE
            p.reserved != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                           WHERE r.sku = p.sku AND r.part = p.part AND r.state = 'held')
            OR p.committed != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                               WHERE r.sku = p.sku AND r.part = p.part AND r.state = 'committed')",
    );
    assert_eq!(
        unbacked, 0,
        "{context}: a partition disagrees with its holds"
    );
    conn.execute_batch("COMMIT").unwrap();
}

#[test]
fn a_sku_is_split_into_k_rows_that_sum_to_its_stock() {
    let h = partitioned(10, 4);
    let parts = h.store.partitions(SKU).unwrap();
    let shares: Vec<i64> = parts.iter().map(|p| p.share).collect();
    assert_eq!(shares, vec![3, 3, 2, 2]);
    assert!(parts.iter().all(|p| p.available == p.share));
    let level = h.store.stock(SKU).unwrap();
    assert_eq!((level.total, level.available), (10, 10));
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
}

/// Ten buyers for ten units over four partitions: every one gets a unit
/// (a partition that runs dry sends the next buyer on), the eleventh is
/// rejected, and only then is the SKU sold out.
#[test]
fn sold_out_only_when_every_partition_is_empty() {
    let h = partitioned(10, 4);
    for i in 0..10 {
        let (order, _) = buy(&h, &format!("key-{i:05}"), 1);
        assert_eq!(order.state, OrderState::Confirmed, "buyer {i}");
    }
    let (order, _) = buy(&h, "key-last1", 1);
    assert_eq!(order.state, OrderState::Rejected);
    assert!(h
        .store
        .partitions(SKU)
        .unwrap()
        .iter()
        .all(|p| p.available == 0));
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
}

/// Free units spread thin (one per partition) still make up a larger
/// order: they are gathered into one partition by logged moves.
#[test]
fn an_order_larger_than_any_partition_gathers_units_first() {
    let h = partitioned(4, 4);
    let (order, _) = buy(&h, "key-00001", 3);
    assert_eq!(order.state, OrderState::Confirmed);
    let moved = count(
        &raw(&h),
        "SELECT COALESCE(SUM(units), 0) FROM rebalances WHERE reason = 'gather'",
    );
    assert_eq!(moved, 2, "two units came from two other partitions");
    assert_eq!(h.store.stock(SKU).unwrap().available, 1);
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
}

#[test]
fn rebalance_evens_free_units_and_logs_each_move() {
    let h = partitioned(8, 4);
    for i in 0..2 {
        buy(&h, &format!("key-{i:05}"), 2);
    }
    let before: Vec<i64> = h
        .store
        .partitions(SKU)
        .unwrap()
        .iter()
        .map(|p| p.available)
        .collect();
    assert_eq!(before.iter().sum::<i64>(), 4);
    let moved = h.store.rebalance(SKU, T0_MS).unwrap();
    let after: Vec<i64> = h
        .store
        .partitions(SKU)
        .unwrap()
        .iter()
        .map(|p| p.available)
        .collect();
    assert_eq!(after, vec![1, 1, 1, 1], "from {before:?}");
    let logged = count(
        &raw(&h),
        "SELECT COALESCE(SUM(units), 0) FROM rebalances WHERE reason = 'rebalance'",
    );
    assert_eq!(logged, moved);
    assert!(moved > 0);
    assert_eq!(h.store.rebalance(SKU, T0_MS).unwrap(), 0, "already even");
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
}

/// Fewer partitions: the retired ones take no new hold, keep the holds they
/// have (which settle there), and give up their free units.
#[test]
fn fewer_partitions_retire_rows_without_losing_holds() {
    let h = partitioned(8, 4);
    let placed: Vec<_> = (0..4)
        .map(|i| {
            h.service
                .begin(
                    "sub",
                    &key(&format!("key-{i:05}")),
                    &request(SKU, 1, "pm_ok"),
                    T0_MS,
                )
                .unwrap()
                .0
        })
        .collect();
    h.store.seed_products_at(&product(8, 2), T0_MS).unwrap();
    let parts = h.store.partitions(SKU).unwrap();
    assert_eq!(parts.len(), 4, "retired rows stay while they hold units");
    assert!(parts[2..].iter().all(|p| p.available == 0));
    assert_eq!(parts[..2].iter().map(|p| p.available).sum::<i64>(), 4);
    for order in &placed {
        h.service.pay(&order.order_id, T0_MS).unwrap();
    }
    let level = h.store.stock(SKU).unwrap();
    assert_eq!((level.available, level.committed), (4, 4));
    for i in 4..8 {
        buy(&h, &format!("key-{i:05}"), 1);
    }
    let parts = h.store.partitions(SKU).unwrap();
    assert!(parts.iter().all(|p| p.available == 0));
    let retired_reserved: i64 = parts[2..].iter().map(|p| p.reserved + p.committed).sum();
    let retired_holds = count(
        &raw(&h),
        "SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE part >= 2 AND state = 'committed'",
    );
    assert_eq!(retired_reserved, retired_holds);
    assert!(audit(h.dir.path(), T0_MS).unwrap().is_empty());
}

/// The model: what the test expects each order to be.
struct Open {
    order_id: String,
    state: OrderState,
}

/// What one run reached, so the test can tell it exercised something.
#[derive(Default)]
struct Reached {
    confirmed: usize,
    rejected: usize,
    /// Units moved, per reason.
    gathered: i64,
    rebalanced: i64,
    repartitioned: i64,
}

fn run(seed: u64) -> Reached {
    let mut rng = StdRng::seed_from_u64(seed);
    let k = rng.random_range(1..=8u32);
    let mut total = rng.random_range(3..=24u32);
    let h = Arc::new(partitioned(total, k));
    // A reader on its own connection checks every commit it can see while
    // the steps run.
    let stop = Arc::new(AtomicBool::new(false));
    let total_max = Arc::new(std::sync::atomic::AtomicI64::new(i64::from(total)));
    let watcher = {
        let (h, stop, total_max) = (Arc::clone(&h), Arc::clone(&stop), Arc::clone(&total_max));
        std::thread::spawn(move || {
            let conn = raw(&h);
            let mut looks = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let bound = || total_max.load(Ordering::SeqCst);
                check(&conn, bound, &format!("seed {seed}, watcher"));
                looks += 1;
            }
            looks
        })
    };
    let mut open: Vec<Open> = Vec::new();
    let mut hot_holds = 0u64;
    let mut now = T0_MS;
    let conn = raw(&h);
    for step in 0..STEPS {
        let context = format!("seed {seed}, step {step}");
        match rng.random_range(0..10) {
            0..=2 => {
                let quantity = rng.random_range(1..=3);
                let raw_key = format!("key-{seed}-{step:05}");
                let (order, _) = h
                    .service
                    .begin("sub", &key(&raw_key), &request(SKU, quantity, "pm_ok"), now)
                    .unwrap();
                open.push(Open {
                    order_id: order.order_id,
                    state: order.state,
                });
            }
            3 if !open.is_empty() => {
                let i = rng.random_range(0..open.len());
                let order = h.service.cancel("sub", &open[i].order_id, now).unwrap();
                open[i].state = order.state;
            }
            4 if !open.is_empty() => {
                let i = rng.random_range(0..open.len());
                let order = h.service.pay(&open[i].order_id, now).unwrap();
                open[i].state = order.state;
            }
            5 => {
                hot_holds += 1;
                let outcome = h
                    .store
                    .reserve(ReserveRequest {
                        order_id: format!("hot-{seed}-{hot_holds}"),
                        sku: SKU.into(),
                        quantity: rng.random_range(1..=2),
                        now_ms: now,
                        expires_at_ms: now + TTL_MS,
                    })
                    .unwrap();
                assert!(matches!(
                    outcome,
                    ReserveOutcome::Reserved { .. } | ReserveOutcome::SoldOut
                ));
            }
            6 => {
                h.store.rebalance(SKU, now).unwrap();
            }
            7 => {
                let k = rng.random_range(1..=8u32);
                h.store.seed_products_at(&product(total, k), now).unwrap();
            }
            8 => {
                let delta = rng.random_range(-2..=3i64);
                if delta != 0 {
                    // Raised before the write, so the watcher never sees a
                    // total above what it allows.
                    let after = i64::from(total) + delta;
                    total_max.fetch_max(after, Ordering::SeqCst);
                    // Refused when too few units are free: fine, it changes nothing.
                    if h.store.adjust(SKU, delta, "property test", now).is_ok() {
                        total = after as u32;
                    }
                }
            }
            _ => {
                now += rng.random_range(0..=TTL_MS / 2);
                reconcile_once(&h.store, now, 120_000, 100).unwrap();
            }
        }
        check(&conn, || i64::from(total), &context);
        assert_eq!(
            h.store.stock(SKU).unwrap().total,
            i64::from(total),
            "{context}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    assert!(
        watcher.join().unwrap() > 0,
        "the watcher looked at least once"
    );
    assert_eq!(h.store.stock(SKU).unwrap().total, i64::from(total));
    let violations = audit(h.dir.path(), now).unwrap();
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    let moved = |reason: &str| {
        count(
            &conn,
            &format!("SELECT COALESCE(SUM(units), 0) FROM rebalances WHERE reason = '{reason}'"),
        )
    };
    Reached {
        confirmed: open
            .iter()
            .filter(|o| o.state == OrderState::Confirmed)
            .count(),
        rejected: open
            .iter()
            .filter(|o| o.state == OrderState::Rejected)
            .count(),
        gathered: moved("gather"),
        rebalanced: moved("rebalance"),
        repartitioned: moved("repartition"),
    }
}

#[test]
fn random_interleavings_never_exceed_the_total() {
    let mut all = Reached::default();
    for seed in 0..SEEDS {
        let reached = run(seed);
        all.confirmed += reached.confirmed;
        all.rejected += reached.rejected;
        all.gathered += reached.gathered;
        all.rebalanced += reached.rebalanced;
        all.repartitioned += reached.repartitioned;
    }
    // Only worth something if every path was taken somewhere.
    assert!(all.confirmed > 0 && all.rejected > 0);
    assert!(all.gathered > 0 && all.rebalanced > 0 && all.repartitioned > 0);
}

/// The audit notices a partition whose counts no hold backs, even when
/// the SKU's own columns still add up.
#[test]
fn audit_checks_the_sum_of_the_partitions() {
    let h = partitioned(6, 3);
    let conn = Connection::open(h.store.db_path()).unwrap();
    // Units moved between two partitions behind the store's back: each
    // row's CHECK holds, the sums still match, but no hold backs partition
    // 1's reservation and partition 0 lost one.
    conn.execute_batch(
        "UPDATE stock_partitions SET available = available - 1, reserved = reserved + 1
          WHERE sku = 'hot' AND part = 1;",
    )
    .unwrap();
    let violations = audit(h.dir.path(), T0_MS).unwrap();
    assert!(
        violations.iter().any(|v| v
            .to_string()
            .contains("partition 1 reserved is 1 but its holds sum to 0")),
        "{violations:?}"
    );
}
