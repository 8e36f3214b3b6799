//! Partitioned stock: a SKU's units split over `K` rows of
//! `stock_partitions` (the product's `partitions`), so that a store with
//! concurrent writers is not asked to serialise every shopper on one row.
//!
//! - Each partition has its own `share` of the total and its own CHECK
//!   (`available + reserved + committed = share`); the SKU's `stock` row is
//!   their sum, kept by triggers in the same statement (schema migration 3).
//! - A reservation starts at a partition chosen from its order id and takes
//!   from the first one, in turn, that has enough units, by one conditional
//!   UPDATE (`available >= n`); its hold remembers the partition, and the
//!   hold's later moves (commit, release, return) happen there.
//! - The SKU is sold out only when the sum is short. When the units exist
//!   but no single partition has enough, they are gathered into one first.
//! - Units move between partitions only by [`move_units`], which logs
//!   every move in `rebalances` with its reason (`gather`, `rebalance`,
//!   `repartition`, `adjust`). A move takes the units and their share from
//!   one row and gives them to another; in between the total is lower,
//!   never higher, so it is never exceeded at any instant.
//! - Lowering `K` retires the partitions at or past it: they take no new
//!   holds, their free units are moved to live ones, and their holds settle
//!   where they are (what they free is moved by the next rebalance).

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::clock::UnixMs;
use crate::core::partition::plan_even;
pub(crate) use crate::core::partition::start_of;
pub use crate::core::partition::{Partition, PARTITIONS_MAX};
use crate::error::StoreError;

/// Every partition of `sku`, live and retired, by number.
pub fn load(conn: &Connection, sku: &str) -> Result<Vec<Partition>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT part, share, available, reserved, committed FROM stock_partitions
         WHERE sku = ?1 ORDER BY part",
    )?;
    let parts = stmt
        .query_map([sku], |row| {
            Ok(Partition {
                part: row.get(0)?,
                share: row.get(1)?,
                available: row.get(2)?,
                reserved: row.get(3)?,
                committed: row.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(parts)
}

/// How many partitions of `sku` take new holds.
pub(crate) fn live_count(conn: &Connection, sku: &str) -> Result<u32, StoreError> {
    conn.prepare_cached("SELECT partitions FROM stock WHERE sku = ?1")?
        .query_row([sku], |row| row.get(0))
        .optional()?
        .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))
}

/// Moves `units` from available to reserved in the first live partition,
/// counting from `start`, that has that many; one statement, so the
/// database decides. Returns the partition, or `None` when none has them.
pub(crate) fn try_take(
    tx: &Transaction<'_>,
    sku: &str,
    units: i64,
    start: u32,
) -> Result<Option<u32>, StoreError> {
    Ok(tx
        .prepare_cached(
            "UPDATE stock_partitions SET available = available - ?2, reserved = reserved + ?2
             WHERE sku = ?1 AND available >= ?2 AND part = (
                SELECT p.part FROM stock_partitions p JOIN stock s ON s.sku = p.sku
                 WHERE p.sku = ?1 AND p.part < s.partitions AND p.available >= ?2
                 ORDER BY (p.part + s.partitions - (?3 % s.partitions)) % s.partitions
                 LIMIT 1)
             RETURNING part",
        )?
        .query_row(params![sku, units, i64::from(start)], |row| row.get(0))
        .optional()?)
}

/// [`try_take`], and when no partition has `units` but the SKU does,
/// gathers them into one (logged) and takes them there.
pub(crate) fn take(
    tx: &Transaction<'_>,
    sku: &str,
    units: i64,
    start: u32,
    now_ms: UnixMs,
) -> Result<Option<u32>, StoreError> {
    if let Some(part) = try_take(tx, sku, units, start)? {
        return Ok(Some(part));
    }
    if gather(tx, sku, units, now_ms)?.is_none() {
        return Ok(None);
    }
    try_take(tx, sku, units, start)
}

/// Moves `units` available units, and their share, from partition `from`
/// to partition `to`, and logs it. Refused (nothing changes) when `from`
/// does not have them.
pub(crate) fn move_units(
    tx: &Transaction<'_>,
    sku: &str,
    from: u32,
    to: u32,
    units: i64,
    reason: &str,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    if units <= 0 || from == to {
        return Ok(false);
    }
    let taken = tx
        .prepare_cached(
            "UPDATE stock_partitions SET share = share - ?3, available = available - ?3
             WHERE sku = ?1 AND part = ?2 AND available >= ?3",
        )?
        .execute(params![sku, from, units])?;
    if taken == 0 {
        return Ok(false);
    }
    let given = tx
        .prepare_cached(
            "UPDATE stock_partitions SET share = share + ?3, available = available + ?3
             WHERE sku = ?1 AND part = ?2",
        )?
        .execute(params![sku, to, units])?;
    if given != 1 {
        return Err(StoreError::Corrupt {
            table: "stock_partitions",
            detail: format!("{sku} has no partition {to}"),
        });
    }
    tx.prepare_cached(
        "INSERT INTO rebalances (sku, from_part, to_part, units, reason, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![sku, from, to, units, reason, now_ms])?;
    tracing::info!(
        sku,
        from,
        to,
        units,
        reason,
        "stock moved between partitions"
    );
    Ok(true)
}

/// Brings at least `units` available units into one live partition,
/// taking from the others (fullest first). Returns that partition, or
/// `None` (nothing moved) when the SKU does not have that many available.
pub(crate) fn gather(
    tx: &Transaction<'_>,
    sku: &str,
    units: i64,
    now_ms: UnixMs,
) -> Result<Option<u32>, StoreError> {
    // No such SKU: nothing to gather (the caller tells the shopper why).
    let live = match live_count(tx, sku) {
        Ok(live) => live,
        Err(StoreError::UnknownSku(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut parts = load(tx, sku)?;
    if parts.iter().map(|p| p.available).sum::<i64>() < units {
        return Ok(None);
    }
    let Some(target) = parts
        .iter()
        .filter(|p| p.part < live)
        .max_by_key(|p| (p.available, std::cmp::Reverse(p.part)))
        .map(|p| p.part)
    else {
        return Ok(None);
    };
    let mut have = parts
        .iter()
        .find(|p| p.part == target)
        .map_or(0, |p| p.available);
    parts.sort_by_key(|p| std::cmp::Reverse(p.available));
    for donor in parts.iter().filter(|p| p.part != target) {
        if have >= units {
            break;
        }
        let moved = donor.available.min(units - have);
        if move_units(tx, sku, donor.part, target, moved, "gather", now_ms)? {
            have += moved;
        }
    }
    Ok((have >= units).then_some(target))
}

/// Evens out the available units over the live partitions, and empties
/// the retired ones' free units into them, as [`plan_even`] plans it (the
/// plan PostgreSQL runs too). Returns the units moved.
pub fn rebalance(
    tx: &Transaction<'_>,
    sku: &str,
    reason: &str,
    now_ms: UnixMs,
) -> Result<i64, StoreError> {
    let live = live_count(tx, sku)?;
    // By number, from 0: `load` orders them so.
    let available: Vec<i64> = load(tx, sku)?.iter().map(|p| p.available).collect();
    let mut moved_total = 0;
    for (from, to, units) in plan_even(&available, live as usize) {
        let (from, to) = (from as u32, to as u32);
        if move_units(tx, sku, from, to, units, reason, now_ms)? {
            moved_total += units;
        }
    }
    Ok(moved_total)
}

/// Whether `sku`'s free units sit badly (the rule:
/// [`crate::core::partition::needs_rebalance`]).
pub(crate) fn needs_rebalance(conn: &Connection, sku: &str) -> Result<bool, StoreError> {
    let live = live_count(conn, sku)?;
    // By number, from 0: `load` orders them so.
    let available: Vec<i64> = load(conn, sku)?.iter().map(|p| p.available).collect();
    Ok(crate::core::partition::needs_rebalance(
        &available,
        live as usize,
    ))
}

/// Sets `sku` to `k` live partitions: the missing ones are created empty,
/// and the free units are spread over the live ones (`repartition`).
pub(crate) fn set_count(
    tx: &Transaction<'_>,
    sku: &str,
    k: u32,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    if !(1..=PARTITIONS_MAX).contains(&k) {
        return Err(StoreError::InvalidArgument(format!(
            "partitions of {sku} must be 1 to {PARTITIONS_MAX}"
        )));
    }
    if live_count(tx, sku)? == k && load(tx, sku)?.len() >= k as usize {
        return Ok(());
    }
    tx.prepare_cached("UPDATE stock SET partitions = ?2 WHERE sku = ?1")?
        .execute(params![sku, k])?;
    for part in 0..k {
        tx.prepare_cached(
            "INSERT INTO stock_partitions (sku, part, share, available, reserved, committed)
             VALUES (?1, ?2, 0, 0, 0, 0) ON CONFLICT (sku, part) DO NOTHING",
        )?
        .execute(params![sku, part])?;
    }
    rebalance(tx, sku, "repartition", now_ms)?;
    Ok(())
}

/// Adds `delta` units to `sku` (negative: removes free units), on the
/// emptiest live partition, or, for a removal, on one gathered to hold
/// them. Returns whether it could.
pub(crate) fn adjust(
    tx: &Transaction<'_>,
    sku: &str,
    delta: i64,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    let part = if delta >= 0 {
        let live = live_count(tx, sku)?;
        load(tx, sku)?
            .into_iter()
            .filter(|p| p.part < live)
            .min_by_key(|p| (p.available, p.part))
            .map(|p| p.part)
    } else {
        gather(tx, sku, -delta, now_ms)?
    };
    let Some(part) = part else {
        return Ok(false);
    };
    let changed = tx
        .prepare_cached(
            "UPDATE stock_partitions SET share = share + ?3, available = available + ?3
             WHERE sku = ?1 AND part = ?2 AND available + ?3 >= 0",
        )?
        .execute(params![sku, part, delta])?;
    Ok(changed == 1)
}
