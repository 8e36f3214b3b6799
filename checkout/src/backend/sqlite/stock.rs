//! Stock of one SKU as `available`, `reserved` (held for an order) and
//! `committed` (sold), and the hold of one order moving between them.
//!
//! A hold is taken by one conditional UPDATE that succeeds only while enough
//! units are available: the database decides, nobody reads-then-writes. A
//! hold then moves exactly once (`held` → `committed` | `released`; a
//! committed hold may be `returned` by a refund): each move is a conditional
//! UPDATE on the hold's own state, so a second attempt changes nothing.
//! The units sit in one of the SKU's partitions (see [`crate::backend::sqlite::partition`]);
//! the `stock` row is their sum.

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::backend::sqlite::partition;
use crate::clock::UnixMs;
pub use crate::core::stock::{ReserveOutcome, StockLevel};
use crate::error::StoreError;
use crate::metrics::Metrics;

const SELECT_STOCK: &str = "SELECT sku, total, available, reserved, committed FROM stock";

fn level_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StockLevel> {
    Ok(StockLevel {
        sku: row.get(0)?,
        total: row.get(1)?,
        available: row.get(2)?,
        reserved: row.get(3)?,
        committed: row.get(4)?,
    })
}

pub(crate) fn load(conn: &Connection, sku: &str) -> Result<StockLevel, StoreError> {
    conn.prepare_cached(&format!("{SELECT_STOCK} WHERE sku = ?1"))?
        .query_row([sku], level_from_row)
        .optional()?
        .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))
}

pub(crate) fn load_all(conn: &Connection) -> Result<Vec<StockLevel>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{SELECT_STOCK} ORDER BY sku"))?;
    let levels = stmt
        .query_map([], level_from_row)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(levels)
}

/// Re-reads `sku` and refuses the transaction if conservation does not hold
/// (the CHECK constraint should already have; this is the assert after the
/// transition, counted in `sluice_invariant_violations_total`).
pub(crate) fn verify(
    conn: &Connection,
    sku: &str,
    metrics: &Metrics,
) -> Result<StockLevel, StoreError> {
    let level = load(conn, sku)?;
    if !level.is_conserved() {
        Metrics::inc(&metrics.invariant_violations);
        return Err(StoreError::Conservation {
            sku: level.sku,
            total: level.total,
            available: level.available,
            reserved: level.reserved,
            committed: level.committed,
        });
    }
    Ok(level)
}

/// Records the hold of `order_id` on partition `part` (the units were
/// taken by `partition::take`).
pub(crate) fn insert_hold(
    tx: &Transaction<'_>,
    hold: &Hold<'_>,
    part: u32,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO reservations (order_id, sku, quantity, state, created_at_ms, expires_at_ms, part)
         VALUES (?1, ?2, ?3, 'held', ?4, ?5, ?6)",
    )?
    .execute(params![
        hold.order_id,
        hold.sku,
        hold.quantity,
        hold.now_ms,
        hold.expires_at_ms,
        part
    ])?;
    Ok(())
}

/// A hold to take: whose, what, and until when.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold<'a> {
    pub(crate) order_id: &'a str,
    pub(crate) sku: &'a str,
    pub(crate) quantity: u32,
    pub(crate) now_ms: UnixMs,
    pub(crate) expires_at_ms: UnixMs,
}

/// Takes and records a hold in one step, checking conservation after it.
pub(crate) fn reserve(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    hold: &Hold<'_>,
) -> Result<ReserveOutcome, StoreError> {
    let (sku, units) = (hold.sku, i64::from(hold.quantity));
    let start = partition::start_of(hold.order_id);
    let Some(part) = partition::take(tx, sku, units, start, hold.now_ms)? else {
        // Distinguish "sold out" from "no such SKU".
        load(tx, sku)?;
        Metrics::inc(&metrics.reservations_sold_out);
        return Ok(ReserveOutcome::SoldOut);
    };
    insert_hold(tx, hold, part)?;
    verify(tx, sku, metrics)?;
    Metrics::inc(&metrics.reservations_ok);
    Ok(ReserveOutcome::Reserved {
        expires_at_ms: hold.expires_at_ms,
    })
}

/// One move of a hold: from `from` to `to` on the hold, and the matching
/// move of its units between two stock columns.
struct HoldMove {
    from: &'static str,
    to: &'static str,
    stock_sql: &'static str,
}

const COMMIT: HoldMove = HoldMove {
    from: "held",
    to: "committed",
    stock_sql: "UPDATE stock_partitions SET reserved = reserved - ?2, committed = committed + ?2
                WHERE sku = ?1 AND part = ?3 AND reserved >= ?2",
};
const RELEASE: HoldMove = HoldMove {
    from: "held",
    to: "released",
    stock_sql: "UPDATE stock_partitions SET reserved = reserved - ?2, available = available + ?2
                WHERE sku = ?1 AND part = ?3 AND reserved >= ?2",
};
const RETURN: HoldMove = HoldMove {
    from: "committed",
    to: "returned",
    stock_sql: "UPDATE stock_partitions SET committed = committed - ?2, available = available + ?2
                WHERE sku = ?1 AND part = ?3 AND committed >= ?2",
};

fn move_hold(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
    step: &HoldMove,
) -> Result<bool, StoreError> {
    let moved: Option<(String, i64, u32)> = tx
        .prepare_cached(
            "UPDATE reservations SET state = ?3, settled_at_ms = ?4
             WHERE order_id = ?1 AND state = ?2
             RETURNING sku, quantity, part",
        )?
        .query_row(params![order_id, step.from, step.to, now_ms], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let Some((sku, quantity, part)) = moved else {
        // Already moved (or never held): the idempotent no-op.
        return Ok(false);
    };
    let changed = tx
        .prepare_cached(step.stock_sql)?
        .execute(params![sku, quantity, part])?;
    if changed != 1 {
        Metrics::inc(&metrics.invariant_violations);
        return Err(StoreError::Corrupt {
            table: "stock",
            detail: format!(
                "hold of {order_id} ({quantity} of {sku}) is not in partition {part}'s {}",
                step.from
            ),
        });
    }
    verify(tx, &sku, metrics)?;
    Ok(true)
}

/// Payment succeeded: the held units become sold. True only the first time.
pub(crate) fn commit_hold(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    move_hold(tx, metrics, order_id, now_ms, &COMMIT)
}

/// Decline, cancel or expiry: the held units go back. True only the first time.
pub(crate) fn release_hold(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    move_hold(tx, metrics, order_id, now_ms, &RELEASE)
}

/// Refund: sold units go back on sale. True only the first time.
pub(crate) fn return_committed(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    move_hold(tx, metrics, order_id, now_ms, &RETURN)
}
