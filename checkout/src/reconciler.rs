//! The reconciler: one bounded pass ([`reconcile_once`]) that the gateway
//! runs in a loop and tests call directly.
//!
//! It expires overdue holds (never one whose payment may hold money),
//! reports orders stuck in one state too long, rechecks stock conservation
//! against the holds, and forgets idempotency keys past their retention.
//! Payments (ambiguous attempts, missed provider events, orphan charges,
//! stuck compensations) need the provider: see
//! [`crate::CheckoutService::reconcile_payments_once`].

use rusqlite::params;

use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::{IDEMPOTENCY_RETENTION_MS, PASS_ROWS_MAX};
use crate::order;
use crate::state::OrderState;
use crate::stock;
use crate::store::Store;

/// States an order should leave on its own; resting longer than the
/// threshold in one of them means something is stuck.
const WATCHED_STATES: [OrderState; 3] = [
    OrderState::Reserved,
    OrderState::Authorizing,
    OrderState::Refunding,
];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileOutcome {
    /// Holds released because they expired (their orders are `expired`).
    pub expired: usize,
    /// Overdue holds kept because the payment may hold money.
    pub kept_for_payment: usize,
    /// Orders resting too long, per state (`sluice_stuck_orders{state}`).
    pub stuck: Vec<(OrderState, usize)>,
    /// SKUs whose counts do not add up or disagree with their holds.
    pub conservation_violations: usize,
    pub keys_purged: usize,
}

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
    outcome.conservation_violations = store.read(count_conservation_violations)?;
    store.metrics().invariant_violations.fetch_add(
        outcome.conservation_violations as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    outcome.keys_purged = store.write(move |tx, _| {
        Ok::<_, StoreError>(tx.execute(
            "DELETE FROM idempotency WHERE rowid IN (
                SELECT rowid FROM idempotency WHERE created_at_ms < ?1 LIMIT ?2)",
            params![now_ms - IDEMPOTENCY_RETENTION_MS, limit as i64],
        )?)
    })?;
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
    let count: i64 = conn.query_row(
        "SELECT COUNT(*) FROM stock s WHERE
            s.available < 0 OR s.reserved < 0 OR s.committed < 0
            OR s.available + s.reserved + s.committed != s.total
            OR s.reserved != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                              WHERE r.sku = s.sku AND r.state = 'held')
            OR s.committed != (SELECT COALESCE(SUM(quantity), 0) FROM reservations r
                               WHERE r.sku = s.sku AND r.state = 'committed')",
        [],
        |row| row.get(0),
    )?;
    Ok(usize::try_from(count).unwrap_or(0))
}
