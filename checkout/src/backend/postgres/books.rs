//! What the gateway reads about the PostgreSQL store besides orders: the
//! books (every SKU's sums, orders per state), the gauges (outbox backlog,
//! oldest hold), orders resting too long in one state, and the readiness
//! probe's write. Each is one short statement or a few on one connection.

use super::conn::{Conn, Db, Tx};
use super::{order, pg_err};
use crate::books::{Books, Gauges};
use crate::clock::UnixMs;
use crate::core::state::OrderState;
use crate::core::stock::StockLevel;
use crate::error::StoreError;

/// Every SKU's counts (the sums of its partitions), by SKU.
pub(super) fn levels(client: &mut impl Db) -> Result<Vec<StockLevel>, StoreError> {
    let rows = client
        .query(
            "SELECT sku, SUM(share)::bigint, SUM(available)::bigint, SUM(reserved)::bigint,
                    SUM(committed)::bigint
             FROM stock_partitions GROUP BY sku ORDER BY sku",
            &[],
        )
        .map_err(pg_err)?;
    Ok(rows
        .iter()
        .map(|row| StockLevel {
            sku: row.get(0),
            total: row.get(1),
            available: row.get(2),
            reserved: row.get(3),
            committed: row.get(4),
        })
        .collect())
}

pub(super) fn books(client: &mut Conn) -> Result<Books, StoreError> {
    Ok(Books {
        inventory: levels(client)?,
        orders: order::counts(client)?,
    })
}

pub(super) fn gauges(client: &mut Conn, now_ms: UnixMs) -> Result<Gauges, StoreError> {
    let row = client
        .query_one(
            "SELECT (SELECT COUNT(*) FROM outbox WHERE published_at_ms IS NULL),
                    (SELECT MIN(created_at_ms) FROM outbox WHERE published_at_ms IS NULL),
                    (SELECT MIN(created_at_ms) FROM reservations WHERE state = 'held')",
            &[],
        )
        .map_err(pg_err)?;
    let pending: i64 = row.get(0);
    let age = |at: Option<i64>| at.map_or(0, |at_ms| now_ms.saturating_sub(at_ms).max(0));
    Ok(Gauges {
        outbox_pending: u64::try_from(pending).unwrap_or(0),
        outbox_lag_ms: age(row.get(1)),
        oldest_hold_age_ms: age(row.get(2)),
    })
}

/// Orders resting since before `before_ms` in a state they should leave
/// on their own, per state (every watched state listed).
pub(super) fn stuck(
    client: &mut Conn,
    before_ms: UnixMs,
) -> Result<Vec<(OrderState, usize)>, StoreError> {
    let watched = [
        OrderState::Reserved,
        OrderState::Authorizing,
        OrderState::Refunding,
    ];
    let rows = client
        .query(
            "SELECT state, COUNT(*) FROM orders
             WHERE state IN ('reserved', 'authorizing', 'refunding') AND updated_at_ms < $1
             GROUP BY state",
            &[&before_ms],
        )
        .map_err(pg_err)?;
    Ok(watched
        .iter()
        .map(|state| {
            let n = rows
                .iter()
                .find(|row| row.get::<_, String>(0) == state.as_str())
                .map_or(0, |row| row.get::<_, i64>(1));
            (*state, usize::try_from(n).unwrap_or(0))
        })
        .collect())
}

/// Rewrites the probe's one row (the caller commits it: a durable write).
pub(super) fn probe(tx: &mut Tx<'_>, now_ms: UnixMs) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO write_probe (id, at_ms) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms",
        &[&now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}
