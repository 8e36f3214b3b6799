//! The reservation reconciler's expiry on PostgreSQL: overdue holds of
//! `reserved` orders whose payment holds no money are released and their
//! orders `expired`, at most `limit` per pass, in one transaction.
//!
//! The overdue holds and their orders are locked `FOR UPDATE SKIP
//! LOCKED`, so when several gateways run the pass at once each takes
//! different rows and none waits on another, nor on a cancel or payment
//! holding the order (which locks the order, then the hold: waiting for
//! the order while holding the hold would deadlock with it); the units go
//! back one statement per partition, in ascending order (so two passes
//! never deadlock on partitions); a gateway dying mid-pass rolls its
//! transaction back and leaves the rows to the next pass.
//!
//! The rebalance step evens out the free units of SKUs whose partitions
//! sit badly — units in partitions retired by a lowered `partitions`
//! (which `take` never looks at), or an empty live partition beside a
//! full one — each SKU leased to one gateway's pass at a time.

use super::conn::Db;
use super::{order, pg_err, stock, PgBackend};
use crate::clock::UnixMs;
use crate::core::state::OrderState;
use crate::error::StoreError;
use crate::limits::PASS_ROWS_MAX;

pub(super) fn expire_holds(
    backend: &PgBackend,
    now_ms: UnixMs,
    limit: usize,
) -> Result<usize, StoreError> {
    let limit = i64::try_from(limit.clamp(1, PASS_ROWS_MAX)).unwrap_or(1);
    backend.write(|tx| {
        let overdue: Vec<String> = tx
            .query(
                "SELECT r.order_id FROM reservations r JOIN orders o ON o.order_id = r.order_id
                 WHERE r.state = 'held' AND r.expires_at_ms <= $1
                   AND o.state = 'reserved' AND o.payment_state = 'none'
                 ORDER BY r.expires_at_ms LIMIT $2
                 FOR UPDATE OF r, o SKIP LOCKED",
                &[&now_ms, &limit],
            )
            .map_err(pg_err)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut ours: Vec<String> = Vec::with_capacity(overdue.len());
        for order_id in overdue {
            let (from, to) = (OrderState::Reserved, OrderState::Expired);
            match order::transition(tx, &order_id, from, to, now_ms) {
                Ok(_) => ours.push(order_id),
                // Paid or cancelled since it was read: not ours to expire.
                Err(StoreError::IllegalTransition { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        let expired = stock::release_holds(tx, &ours, now_ms)?;
        Ok(expired)
    })
}

/// Rebalances up to `limit` SKUs whose free units sit badly, one
/// transaction each; returns how many were rebalanced.
pub(super) fn rebalance_partitions(
    backend: &PgBackend,
    now_ms: UnixMs,
    limit: usize,
) -> Result<usize, StoreError> {
    let limit = i64::try_from(limit.clamp(1, PASS_ROWS_MAX)).unwrap_or(1);
    let due = backend.read(|client| stock::due_for_rebalance(client, limit))?;
    let mut rebalanced = 0;
    for sku in &due {
        if backend.write(|tx| stock::rebalance_if_due(tx, sku, now_ms))? {
            rebalanced += 1;
        }
    }
    Ok(rebalanced)
}
