//! The reconciler: one bounded pass ([`reconcile_once`]) that the gateway
//! runs in a loop and tests call directly.
//!
//! It expires overdue holds (never one whose payment may hold money),
//! reports orders stuck in one state too long, rebalances partitioned
//! stock whose free units sit badly, rechecks stock conservation
//! against the holds, and forgets what is past its retention (keys,
//! published events, provider event ids, ended holds: see
//! [`crate::backend::sqlite::retention`]).
//! Payments (ambiguous attempts, missed provider events, orphan charges,
//! stuck compensations) need the provider: see
//! [`crate::CheckoutService::reconcile_payments_once`].

use rusqlite::params;

pub use crate::backend::pass::ReconcileOutcome;
use crate::backend::sqlite::order;
use crate::backend::sqlite::partition;
use crate::backend::sqlite::retention::prune_once;
use crate::backend::sqlite::stock;
use crate::backend::sqlite::store::Store;
use crate::clock::UnixMs;
use crate::core::state::OrderState;
use crate::error::StoreError;
use crate::limits::PASS_ROWS_MAX;

/// States an order should leave on its own; resting longer than the
/// threshold in one of them means something is stuck.
const WATCHED_STATES: [OrderState; 3] = [
    OrderState::Reserved,
    OrderState::Authorizing,
    OrderState::Refunding,
];

/// One pass over at most `limit` rows of each kind.
pub fn reconcile_once(
    store: &Store,
    now_ms: UnixMs,
    stuck_after_ms: i64,
    limit: usize,
) -> Result<ReconcileOutcome, StoreError> {
    let limit = limit.clamp(1, PASS_ROWS_MAX);
    let mut outcome = ReconcileOutcome::default();
    expire_holds(store, now_ms, limit, &mut outcome)?;
    for state in WATCHED_STATES {
        let stuck = store.read(|conn| {
            order::load_in_state_before(conn, state, now_ms - stuck_after_ms, limit)
        })?;
        if !stuck.is_empty() {
            outcome.stuck.push((state, stuck.len()));
        }
    }
    outcome.rebalanced = rebalance_partitions(store, now_ms, limit)?;
    outcome.conservation_violations = store.read(count_conservation_violations)?;
    store.metrics().invariant_violations.fetch_add(
        outcome.conservation_violations as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    outcome.pruned = prune_once(store, now_ms, limit)?;
    outcome.keys_purged = outcome.pruned.idempotency_keys;
    Ok(outcome)
}

/// Expires up to `limit` overdue holds in one transaction (one fsync for
/// the whole pass). The payment state is read inside that transaction, so
/// the release commits against exactly the state it checked.
fn expire_holds(
    store: &Store,
    now_ms: UnixMs,
    limit: usize,
    outcome: &mut ReconcileOutcome,
) -> Result<(), StoreError> {
    let (expired, kept) = store.write(move |tx, metrics| {
        let overdue: Vec<String> = tx
            .prepare_cached(
                "SELECT order_id FROM reservations WHERE state = 'held' AND expires_at_ms <= ?1
                 ORDER BY expires_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms, limit as i64], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        let (mut expired, mut kept) = (0, 0);
        for order_id in overdue {
            match order::load(tx, &order_id)? {
                // A hot-path hold with no order row: nothing can be paid.
                None => {
                    stock::release_hold(tx, metrics, &order_id, now_ms)?;
                    expired += 1;
                }
                Some(current)
                    if current.state == OrderState::Reserved
                        && !current.payment_state.holds_money() =>
                {
                    let to = OrderState::Expired;
                    order::transition(tx, metrics, &order_id, OrderState::Reserved, to, now_ms)?;
                    stock::release_hold(tx, metrics, &order_id, now_ms)?;
                    expired += 1;
                }
                // Payment pending, authorized or captured: never released here.
                Some(_) => kept += 1,
            }
        }
        Ok::<_, StoreError>((expired, kept))
    })?;
    outcome.expired = expired;
    outcome.kept_for_payment = kept;
    Ok(())
}

/// SKUs whose columns do not add up, or whose `reserved`/`committed` differ
/// from the sum of their holds.
pub(crate) fn count_conservation_violations(
    conn: &rusqlite::Connection,
) -> Result<usize, StoreError> {
    let skus: i64 = conn.query_row(
        "SELECT COUNT(*) FROM stock s WHERE
            s.available < 0 OR s.reserved < 0 OR s.committed < 0
            OR s.available + s.reserved + s.committed != s.total
            OR s.reserved != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                              WHERE r.sku = s.sku AND r.state = 'held')
            OR s.committed != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                               WHERE r.sku = s.sku AND r.state = 'committed')
            OR (s.total, s.available, s.reserved, s.committed) IS NOT (
                SELECT COALESCE(SUM(share), 0), COALESCE(SUM(available), 0),
                       COALESCE(SUM(reserved), 0), COALESCE(SUM(committed), 0)
                FROM stock_partitions p WHERE p.sku = s.sku)",
        [],
        |row| row.get(0),
    )?;
    let parts: i64 = conn.query_row(
        "SELECT COUNT(*) FROM stock_partitions p WHERE
            p.reserved != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                           WHERE r.sku = p.sku AND r.part = p.part AND r.state = 'held')
            OR p.committed != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                               WHERE r.sku = p.sku AND r.part = p.part AND r.state = 'committed')",
        [],
        |row| row.get(0),
    )?;
    Ok(usize::try_from(skus + parts).unwrap_or(0))
}

/// Rebalances, in one transaction, up to `limit` SKUs whose free units sit
/// badly (an empty live partition next to a full one, or free units in a
/// retired one). Returns the SKUs rebalanced.
fn rebalance_partitions(store: &Store, now_ms: UnixMs, limit: usize) -> Result<usize, StoreError> {
    let skus: Vec<String> = store.read(|conn| {
        let mut stmt = conn.prepare_cached(
            "SELECT s.sku FROM stock s WHERE s.partitions > 1
                OR EXISTS (SELECT 1 FROM stock_partitions p
                           WHERE p.sku = s.sku AND p.part >= s.partitions AND p.available > 0)
             ORDER BY s.sku",
        )?;
        let mut due = Vec::new();
        for sku in stmt.query_map([], |row| row.get::<_, String>(0))? {
            let sku = sku?;
            if partition::needs_rebalance(conn, &sku)? {
                due.push(sku);
            }
            if due.len() >= limit {
                break;
            }
        }
        Ok(due)
    })?;
    if skus.is_empty() {
        return Ok(0);
    }
    store.write(move |tx, metrics| {
        for sku in &skus {
            partition::rebalance(tx, sku, "rebalance", now_ms)?;
            stock::verify(tx, sku, metrics)?;
        }
        Ok::<_, StoreError>(skus.len())
    })
}
