//! Stock of one SKU as `available`, `reserved` (held for an order) and
//! `committed` (sold), and the hold of one order moving between them.
//!
//! A hold is taken by one conditional UPDATE that succeeds only while enough
//! units are available: the database decides, nobody reads-then-writes. A
//! hold then moves exactly once (`held` → `committed` | `released`; a
//! committed hold may be `returned` by a refund): each move is a conditional
//! UPDATE on the hold's own state, so a second attempt changes nothing.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::metrics::Metrics;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockLevel {
    pub sku: String,
    pub total: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

impl StockLevel {
    pub fn is_conserved(&self) -> bool {
        self.available >= 0
            && self.reserved >= 0
            && self.committed >= 0
            && self.available + self.reserved + self.committed == self.total
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved { expires_at_ms: UnixMs },
    SoldOut,
}

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

/// Moves `units` from available to reserved if, and only if, that many are
/// available. Returns whether it did.
pub(crate) fn try_take(tx: &Transaction<'_>, sku: &str, units: i64) -> Result<bool, StoreError> {
    let changed = tx
        .prepare_cached(
            "UPDATE stock SET available = available - ?2, reserved = reserved + ?2
             WHERE sku = ?1 AND available >= ?2",
        )?
        .execute(params![sku, units])?;
    Ok(changed == 1)
}

/// Records the hold of `order_id` (the units were taken by [`try_take`]).
pub(crate) fn insert_hold(
    tx: &Transaction<'_>,
    order_id: &str,
    sku: &str,
    quantity: u32,
    now_ms: UnixMs,
    expires_at_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO reservations (order_id, sku, quantity, state, created_at_ms, expires_at_ms)
         VALUES (?1, ?2, ?3, 'held', ?4, ?5)",
    )?
    .execute(params![order_id, sku, quantity, now_ms, expires_at_ms])?;
    Ok(())
}

/// Takes and records a hold in one step, checking conservation after it.
pub(crate) fn reserve(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    sku: &str,
    quantity: u32,
    now_ms: UnixMs,
    expires_at_ms: UnixMs,
) -> Result<ReserveOutcome, StoreError> {
    if !try_take(tx, sku, i64::from(quantity))? {
        // Distinguish "sold out" from "no such SKU".
        load(tx, sku)?;
        Metrics::inc(&metrics.reservations_sold_out);
        return Ok(ReserveOutcome::SoldOut);
    }
    insert_hold(tx, order_id, sku, quantity, now_ms, expires_at_ms)?;
    verify(tx, sku, metrics)?;
    Metrics::inc(&metrics.reservations_ok);
    Ok(ReserveOutcome::Reserved { expires_at_ms })
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
    stock_sql: "UPDATE stock SET reserved = reserved - ?2, committed = committed + ?2
                WHERE sku = ?1 AND reserved >= ?2",
};
const RELEASE: HoldMove = HoldMove {
    from: "held",
    to: "released",
    stock_sql: "UPDATE stock SET reserved = reserved - ?2, available = available + ?2
                WHERE sku = ?1 AND reserved >= ?2",
};
const RETURN: HoldMove = HoldMove {
    from: "committed",
    to: "returned",
    stock_sql: "UPDATE stock SET committed = committed - ?2, available = available + ?2
                WHERE sku = ?1 AND committed >= ?2",
};

fn move_hold(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    now_ms: UnixMs,
    step: &HoldMove,
) -> Result<bool, StoreError> {
    let moved: Option<(String, i64)> = tx
        .prepare_cached(
            "UPDATE reservations SET state = ?3, settled_at_ms = ?4
             WHERE order_id = ?1 AND state = ?2
             RETURNING sku, quantity",
        )?
        .query_row(params![order_id, step.from, step.to, now_ms], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    let Some((sku, quantity)) = moved else {
        // Already moved (or never held): the idempotent no-op.
        return Ok(false);
    };
    let changed = tx
        .prepare_cached(step.stock_sql)?
        .execute(params![sku, quantity])?;
    if changed != 1 {
        Metrics::inc(&metrics.invariant_violations);
        return Err(StoreError::Corrupt {
            table: "stock",
            detail: format!(
                "hold of {order_id} ({quantity} of {sku}) is not in stock.{}",
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
