//! The books' checks on PostgreSQL (`sluice audit` with `[cluster]
//! postgres_url`, and the shared test suite): what does not add up, one
//! line each.
//!
//! - each partition conserved (`share = available + reserved +
//!   committed`, none negative) and its reserved and committed units equal
//!   to the holds in it; a SKU's counts are the sum of its partitions;
//! - each order's hold where its state says (`reserved`/`authorizing`:
//!   held; `confirmed`/`refunding`: committed; `refunded`: returned;
//!   `declined`/`cancelled`/`expired`/`voided`: released; `rejected`:
//!   none; an ended hold may be gone, pruned by retention);
//! - a paid order (`confirmed`, `refunding`, `refunded`) has its capture
//!   succeeded;
//! - no hold of a `reserved` order still counted past its expiry and the
//!   grace ([`EXPIRED_HOLD_GRACE_MS`]);
//! - the references the schema no longer checks on every write
//!   (migration 5): each order's product, each hold's order and
//!   partition exist.

use super::conn::{Conn, Db};
use super::pg_err;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::EXPIRED_HOLD_GRACE_MS;

pub(super) fn check_books(client: &mut Conn, now_ms: UnixMs) -> Result<Vec<String>, StoreError> {
    let mut violations = partitions(client)?;
    let rows = client
        .query(
            "SELECT o.order_id, o.state, r.state FROM orders o
             LEFT JOIN reservations r ON r.order_id = o.order_id
             WHERE CASE o.state
                WHEN 'reserved' THEN r.state IS DISTINCT FROM 'held'
                WHEN 'authorizing' THEN r.state IS DISTINCT FROM 'held'
                WHEN 'confirmed' THEN r.state IS DISTINCT FROM 'committed'
                WHEN 'refunding' THEN r.state IS DISTINCT FROM 'committed'
                WHEN 'refunded' THEN r.state IS NOT NULL AND r.state <> 'returned'
                WHEN 'rejected' THEN r.state IS NOT NULL
                ELSE r.state IS NOT NULL AND r.state <> 'released'
             END
             ORDER BY o.order_id LIMIT 1000",
            &[],
        )
        .map_err(pg_err)?;
    for row in rows {
        let (order, state, hold): (String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        violations.push(format!(
            "order {order} is {state} but its hold is {}",
            hold.as_deref().unwrap_or("missing")
        ));
    }
    let rows = client
        .query(
            "SELECT o.order_id, o.state FROM orders o
             WHERE o.state IN ('confirmed', 'refunding', 'refunded')
               AND NOT EXISTS (SELECT 1 FROM payment_attempts a
                   WHERE a.order_id = o.order_id AND a.operation = 'capture'
                     AND a.outcome = 'succeeded')
             ORDER BY o.order_id LIMIT 1000",
            &[],
        )
        .map_err(pg_err)?;
    for row in rows {
        let (order, state): (String, String) = (row.get(0), row.get(1));
        violations.push(format!(
            "order {order} is {state} with no capture that succeeded"
        ));
    }
    let overdue: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM reservations r JOIN orders o ON o.order_id = r.order_id
             WHERE r.state = 'held' AND o.state = 'reserved' AND r.expires_at_ms < $1",
            &[&now_ms.saturating_sub(EXPIRED_HOLD_GRACE_MS)],
        )
        .map_err(pg_err)?
        .get(0);
    if overdue > 0 {
        violations.push(format!(
            "{overdue} holds of reserved orders still counted past their expiry"
        ));
    }
    violations.extend(references(client)?);
    Ok(violations)
}

/// Rows naming a row that does not exist: what the foreign keys dropped in
/// migration 5 refused at each write, checked here instead (each an
/// anti-join on a primary key, at most 1,000 lines each).
fn references(client: &mut Conn) -> Result<Vec<String>, StoreError> {
    let mut violations = Vec::new();
    let rows = client
        .query(
            "SELECT o.order_id, o.sku FROM orders o
             WHERE NOT EXISTS (SELECT 1 FROM products p WHERE p.sku = o.sku)
             ORDER BY o.order_id LIMIT 1000",
            &[],
        )
        .map_err(pg_err)?;
    for row in rows {
        let (order, sku): (String, String) = (row.get(0), row.get(1));
        violations.push(format!(
            "order {order} is for {sku}, which is not a product"
        ));
    }
    let rows = client
        .query(
            "SELECT r.order_id FROM reservations r
             WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_id = r.order_id)
             ORDER BY r.order_id LIMIT 1000",
            &[],
        )
        .map_err(pg_err)?;
    for row in rows {
        let order: String = row.get(0);
        violations.push(format!("a hold names order {order}, which does not exist"));
    }
    let rows = client
        .query(
            "SELECT r.order_id, r.sku, r.part FROM reservations r
             WHERE NOT EXISTS (SELECT 1 FROM stock_partitions p
                 WHERE p.sku = r.sku AND p.part = r.part)
             ORDER BY r.order_id LIMIT 1000",
            &[],
        )
        .map_err(pg_err)?;
    for row in rows {
        let (order, sku, part): (String, String, i32) = (row.get(0), row.get(1), row.get(2));
        violations.push(format!(
            "the hold of order {order} is on {sku} partition {part}, which does not exist"
        ));
    }
    Ok(violations)
}

/// What does not add up: a partition whose reserved or committed units
/// differ from its holds (the schema's CHECKs already keep each partition
/// conserved and non-negative).
fn partitions(client: &mut Conn) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "SELECT p.sku, p.part, p.reserved, p.committed,
                    COALESCE(SUM(r.quantity) FILTER (WHERE r.state = 'held'), 0)::bigint,
                    COALESCE(SUM(r.quantity) FILTER (WHERE r.state = 'committed'), 0)::bigint,
                    p.share, p.available
             FROM stock_partitions p
             LEFT JOIN reservations r ON r.sku = p.sku AND r.part = p.part
             GROUP BY p.sku, p.part ORDER BY p.sku, p.part",
            &[],
        )
        .map_err(pg_err)?;
    let mut violations = Vec::new();
    for row in rows {
        let (sku, part): (String, i32) = (row.get(0), row.get(1));
        let (reserved, committed, held, sold): (i64, i64, i64, i64) =
            (row.get(2), row.get(3), row.get(4), row.get(5));
        let (share, available): (i64, i64) = (row.get(6), row.get(7));
        if reserved != held || committed != sold {
            violations.push(format!(
                "{sku} partition {part}: reserved {reserved} / committed {committed}, \
                 holds {held} / {sold}"
            ));
        }
        if available < 0 || share != available + reserved + committed {
            violations.push(format!("{sku} partition {part} is not conserved"));
        }
    }
    Ok(violations)
}
