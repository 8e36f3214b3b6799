//! Stock in PostgreSQL: a SKU is K rows of `stock_partitions`, and its
//! counts are their sum.
//!
//! A reservation is one conditional statement on one partition
//! (`available >= n`, so the database decides): first the partitions that
//! had the units in a snapshot read in one statement with the live count
//! ([`snapshot`]), nearest first from the one the order id points at,
//! skipping rows another transaction holds (so shoppers spread over the
//! rows instead of queueing on one); then, waiting, the nearest of them
//! (with one partition, that wait at once, in no savepoint); having lost those races too (or when the
//! units are scattered), every partition is locked in ascending order and
//! read as committed now, and the units are taken from one, or gathered
//! into one by logged moves. "Sold out" is
//! said only when every partition lacked the units. The only place a
//! transaction waits for a partition's lock while holding another's is
//! that ascending lock of all.
//! Free units move between partitions only by logged moves
//! (`rebalances`), planned by [`plan_even`], a plain function.

use super::conn::{Db, Tx};
use super::pg_err;
use crate::clock::UnixMs;
use crate::core::partition::{
    even_share, needs_rebalance, plan_even, plan_gather, start_of, Partition,
};
use crate::core::stock::{ProductSeed, StockLevel};
use crate::error::StoreError;
use crate::limits::STOCK_UNITS_MAX;

/// Seeds new SKUs with their stock split evenly over their partitions;
/// every SKU takes its seed's price, TTL and partition count (a changed
/// count is followed by a logged rebalance). Returns how many were new.
pub(super) fn seed(
    tx: &mut Tx<'_>,
    products: &[ProductSeed],
    now_ms: UnixMs,
) -> Result<usize, StoreError> {
    let mut seeded = 0;
    for product in products {
        let price = i64::try_from(product.price_cents).map_err(|_| {
            StoreError::InvalidArgument(format!("price of {} too large", product.sku))
        })?;
        let parts = i32::try_from(product.partitions).unwrap_or(i32::MAX);
        let new = tx
            .execute(
                "INSERT INTO products (sku, price_cents, reservation_ttl_ms, partitions)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (sku) DO NOTHING",
                &[&product.sku, &price, &product.reservation_ttl_ms, &parts],
            )
            .map_err(pg_err)?;
        if new == 1 {
            let total = i64::from(product.total);
            for part in 0..parts {
                let share = even_share(total, parts, part);
                tx.execute(
                    "INSERT INTO stock_partitions (sku, part, share, available, reserved, committed)
                     VALUES ($1, $2, $3, $3, 0, 0)",
                    &[&product.sku, &part, &share],
                )
                .map_err(pg_err)?;
            }
            seeded += 1;
            continue;
        }
        // `FOR NO KEY UPDATE`, not `FOR UPDATE`: it does not wait for
        // `FOR KEY SHARE` holders of the product's row (a transaction
        // still open that wrote a partition, a rebalance, a gathering
        // checkout's rebalance or an adjustment: their foreign keys to
        // the product; before migration 5 every checkout in flight too,
        // through its order's, and a gateway (re)starting mid-sale failed
        // to start on the lock timeout in the fleet rehearsal). Seeders
        // of one SKU still take turns: the lock conflicts with itself.
        let before: i32 = tx
            .query_one(
                "SELECT partitions FROM products WHERE sku = $1 FOR NO KEY UPDATE",
                &[&product.sku],
            )
            .map_err(pg_err)?
            .get(0);
        tx.execute(
            "UPDATE products SET price_cents = $2, reservation_ttl_ms = $3, partitions = $4
             WHERE sku = $1",
            &[&product.sku, &price, &product.reservation_ttl_ms, &parts],
        )
        .map_err(pg_err)?;
        if before != parts {
            for part in 0..parts {
                tx.execute(
                    "INSERT INTO stock_partitions (sku, part, share, available, reserved, committed)
                     VALUES ($1, $2, 0, 0, 0, 0) ON CONFLICT (sku, part) DO NOTHING",
                    &[&product.sku, &part],
                )
                .map_err(pg_err)?;
            }
            rebalance(tx, &product.sku, "partitions changed", now_ms)?;
        }
    }
    Ok(seeded)
}

/// Moves `units` free units and their share from `from` to `to`, logged.
fn move_free(
    tx: &mut Tx<'_>,
    sku: &str,
    (from, to, units): (i32, i32, i64),
    reason: &str,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    let taken = tx
        .execute(
            "UPDATE stock_partitions SET available = available - $3, share = share - $3
             WHERE sku = $1 AND part = $2 AND available >= $3",
            &[&sku, &from, &units],
        )
        .map_err(pg_err)?;
    if taken != 1 {
        return Err(StoreError::Corrupt {
            table: "stock_partitions",
            detail: format!("partition {from} of {sku} lost {units} free units under its lock"),
        });
    }
    tx.execute(
        "UPDATE stock_partitions SET available = available + $3, share = share + $3
         WHERE sku = $1 AND part = $2",
        &[&sku, &to, &units],
    )
    .map_err(pg_err)?;
    tx.execute(
        "INSERT INTO rebalances (sku, from_part, to_part, units, reason, at_ms)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&sku, &from, &to, &units, &reason, &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// Locks every partition of `sku` (in order, so two of these never
/// deadlock) and returns their free units and the live count.
/// `FOR NO KEY UPDATE`, the lock an `UPDATE` of the counts takes: it waits
/// for writers of the rows and for no key-share lock (before migration 5
/// every hold written in a transaction still open kept one on its
/// partition row through its foreign key, and a plain `FOR UPDATE` then
/// deadlocked two batches that had both written their holds).
pub(super) fn lock_all(tx: &mut Tx<'_>, sku: &str) -> Result<(Vec<i64>, usize), StoreError> {
    let live: i32 = tx
        .query_opt("SELECT partitions FROM products WHERE sku = $1", &[&sku])
        .map_err(pg_err)?
        .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))?
        .get(0);
    let rows = tx
        .query(
            "SELECT part, available FROM stock_partitions WHERE sku = $1 ORDER BY part FOR NO KEY UPDATE",
            &[&sku],
        )
        .map_err(pg_err)?;
    let mut available = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let part: i32 = row.get(0);
        if usize::try_from(part).ok() != Some(i) {
            return Err(StoreError::Corrupt {
                table: "stock_partitions",
                detail: format!("{sku} has a gap before partition {part}"),
            });
        }
        available.push(row.get(1));
    }
    Ok((available, usize::try_from(live).unwrap_or(1)))
}

/// Evens out `sku`'s free units over its live partitions (retired ones are
/// emptied), each move logged; returns the units moved.
pub(super) fn rebalance(
    tx: &mut Tx<'_>,
    sku: &str,
    reason: &str,
    now_ms: UnixMs,
) -> Result<i64, StoreError> {
    let (available, live) = lock_all(tx, sku)?;
    let mut moved = 0;
    for (from, to, units) in plan_even(&available, live) {
        move_free(tx, sku, (from as i32, to as i32, units), reason, now_ms)?;
        moved += units;
    }
    Ok(moved)
}

/// The SKUs whose partitions may need a rebalance ([`needs_rebalance`] in
/// SQL, read without locks), at most `limit`.
pub(super) fn due_for_rebalance(
    client: &mut impl Db,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "SELECT p.sku FROM products p
              WHERE EXISTS (SELECT 1 FROM stock_partitions s
                             WHERE s.sku = p.sku AND s.part >= p.partitions AND s.available > 0)
                 OR (EXISTS (SELECT 1 FROM stock_partitions s
                              WHERE s.sku = p.sku AND s.part < p.partitions AND s.available = 0)
                     AND EXISTS (SELECT 1 FROM stock_partitions s
                                  WHERE s.sku = p.sku AND s.part < p.partitions
                                    AND s.available >= 2))
              ORDER BY p.sku LIMIT $1",
            &[&limit],
        )
        .map_err(pg_err)?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The reconciler's rebalance of `sku`, leased: skipped (false) when
/// another gateway's pass holds the SKU's lease (a transaction-scoped
/// advisory lock, taken without waiting) or when, read under the
/// partitions' locks, nothing sits badly any more; otherwise the free
/// units are evened out over the live partitions, each move logged.
pub(super) fn rebalance_if_due(
    tx: &mut Tx<'_>,
    sku: &str,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    let leased: bool = tx
        .query_one(
            "SELECT pg_try_advisory_xact_lock(hashtextextended('rebalance:' || $1::text, 0))",
            &[&sku],
        )
        .map_err(pg_err)?
        .get(0);
    if !leased {
        return Ok(false);
    }
    let (available, live) = lock_all(tx, sku)?;
    if !needs_rebalance(&available, live) {
        return Ok(false);
    }
    for (from, to, units) in plan_even(&available, live) {
        move_free(
            tx,
            sku,
            (from as i32, to as i32, units),
            "rebalance",
            now_ms,
        )?;
    }
    Ok(true)
}

/// An operator's adjustment: `delta` units added to (the live partition
/// with the fewest free units) or taken from (the fullest first) the free
/// units and the shares, logged in `adjustments`. Taking more than is free
/// is refused: held and sold units are not the operator's. Returns the
/// SKU's counts after it.
pub(super) fn adjust(
    tx: &mut Tx<'_>,
    sku: &str,
    delta: i64,
    reason: &str,
    now_ms: UnixMs,
) -> Result<StockLevel, StoreError> {
    let (available, live) = lock_all(tx, sku)?;
    let before = level(tx, sku)?;
    if before.total.saturating_add(delta) > STOCK_UNITS_MAX {
        return Err(StoreError::InvalidArgument(format!(
            "total of {sku} would exceed {STOCK_UNITS_MAX} units"
        )));
    }
    let live = live.clamp(1, available.len().max(1));
    let mut moves: Vec<(i32, i64)> = Vec::new();
    if delta > 0 {
        let emptiest = (0..live).min_by_key(|&p| available[p]).unwrap_or(0);
        moves.push((emptiest as i32, delta));
    } else {
        let mut need = -delta;
        let mut fullest: Vec<usize> = (0..available.len()).collect();
        fullest.sort_by_key(|&p| std::cmp::Reverse(available[p]));
        for p in fullest {
            if need == 0 {
                break;
            }
            let units = need.min(available[p]);
            if units > 0 {
                moves.push((p as i32, -units));
                need -= units;
            }
        }
        if need > 0 {
            return Err(StoreError::InvalidArgument(format!(
                "cannot remove {} units from {sku}: only {} available",
                -delta, before.available
            )));
        }
    }
    for (part, units) in moves {
        tx.execute(
            "UPDATE stock_partitions SET available = available + $3, share = share + $3
             WHERE sku = $1 AND part = $2",
            &[&sku, &part, &units],
        )
        .map_err(pg_err)?;
    }
    tx.execute(
        "INSERT INTO adjustments (sku, delta, reason, at_ms) VALUES ($1, $2, $3, $4)",
        &[&sku, &delta, &reason, &now_ms],
    )
    .map_err(pg_err)?;
    level(tx, sku)
}

/// A SKU's live partitions as one statement saw them (no row locked):
/// the live count and each live partition's free units, in order.
pub(super) struct Snapshot {
    live: i32,
    free: Vec<(i32, i64)>,
}

impl Snapshot {
    /// The most free units one live partition has: what a batch's one
    /// summed take can get.
    pub(super) fn largest_free(&self) -> i64 {
        self.free.iter().map(|&(_, f)| f).max().unwrap_or(0)
    }
}

/// `sku`'s [`Snapshot`], in one statement (its live count and the
/// partitions' free units together).
pub(super) fn snapshot(tx: &mut Tx<'_>, sku: &str) -> Result<Snapshot, StoreError> {
    let rows = tx
        .query(
            "SELECT GREATEST(p.partitions, 1), s.part, s.available FROM products p
               LEFT JOIN stock_partitions s
                 ON s.sku = p.sku AND s.part < GREATEST(p.partitions, 1)
              WHERE p.sku = $1 ORDER BY s.part",
            &[&sku],
        )
        .map_err(pg_err)?;
    let live: i32 = rows
        .first()
        .ok_or_else(|| StoreError::UnknownSku(sku.to_owned()))?
        .get(0);
    let free = rows
        .iter()
        .filter_map(|row| Some((row.get::<_, Option<i32>>(1)?, row.get::<_, Option<i64>>(2)?)))
        .collect();
    Ok(Snapshot { live, free })
}

/// Takes `units` for a hold: the partition it came from, or `None` when
/// the SKU does not have them (sold out). See the module map for the order
/// partitions are tried in.
pub(super) fn take(
    tx: &mut Tx<'_>,
    sku: &str,
    units: i64,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Option<i32>, StoreError> {
    let seen = snapshot(tx, sku)?;
    take_from(tx, &seen, sku, units, order_id, true, now_ms)
}

/// A batch's whole demand for `sku` from one partition, or `None` when no
/// single partition has it: then the batch takes each hold on its own, in
/// arrival order ([`take`]), so exactly the units left are sold. Never
/// gathers: a batch's sum is not worth moving units between partitions.
/// `seen` is the batch's own [`snapshot`], read to decide whether the sum
/// fits (a hint only: every take is conditional).
pub(super) fn take_whole(
    tx: &mut Tx<'_>,
    seen: &Snapshot,
    sku: &str,
    units: i64,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Option<i32>, StoreError> {
    take_from(tx, seen, sku, units, order_id, false, now_ms)
}

fn take_from(
    tx: &mut Tx<'_>,
    seen: &Snapshot,
    sku: &str,
    units: i64,
    order_id: &str,
    gather: bool,
    now_ms: UnixMs,
) -> Result<Option<i32>, StoreError> {
    let live = seen.live.max(1);
    let start = (start_of(order_id) % live as u32) as i32;
    let mut candidates: Vec<i32> = seen
        .free
        .iter()
        .filter(|(_, available)| *available >= units)
        .map(|(part, _)| *part)
        .collect();
    candidates.sort_by_key(|part| (part + live - start) % live);
    if live == 1 {
        // One partition: nothing to spread over, so wait for its row at
        // once. No savepoint either: a failed re-check keeps the row's
        // lock, but the only lock `lock_all` below then takes first is
        // that same row's (the lowest), so it cannot deadlock.
        if let Some(&part) = candidates.first() {
            if try_take(tx, sku, part, units)? {
                return Ok(Some(part));
            }
        }
    } else if !candidates.is_empty() {
        // Nearest first, skipping rows another transaction holds, so
        // shoppers spread instead of queueing. Inside a savepoint: a
        // failed try may leave a row locked, and rolling back releases it
        // before anything below waits.
        let mut spread = tx.savepoint("take_spread").map_err(pg_err)?;
        for &part in &candidates {
            if try_take_unlocked(&mut spread, sku, part, units)? {
                spread.commit().map_err(pg_err)?;
                return Ok(Some(part));
            }
        }
        drop(spread);
        // Every candidate was busy or taken: wait for the nearest one
        // alone (in a savepoint again, so a failed re-check, which keeps
        // the row's lock, is undone before `lock_all` waits below). Only
        // when that one is gone too does the SKU lock as a whole.
        let mut nearest = tx.savepoint("take_nearest").map_err(pg_err)?;
        if try_take(&mut nearest, sku, candidates[0], units)? {
            nearest.commit().map_err(pg_err)?;
            return Ok(Some(candidates[0]));
        }
        drop(nearest);
    }
    let free: i64 = seen.free.iter().map(|(_, available)| available).sum();
    if candidates.is_empty() && free < units {
        // Sold out as of the snapshot: every partition lacked the units.
        return Ok(None);
    }
    // Lost every race, every row was busy, or the units are scattered:
    // every partition locked (in order), then read as committed now.
    let (available, live) = lock_all(tx, sku)?;
    let available = &available[..live.min(available.len())];
    let n = available.len();
    let start_at = usize::try_from(start).unwrap_or(0);
    if let Some(part) = (0..n)
        .map(|step| (start_at + step) % n)
        .find(|&part| available[part] >= units)
    {
        let part = part as i32;
        return Ok(try_take(tx, sku, part, units)?.then_some(part));
    }
    // No partition has `units` alone: gather them into one if the SKU has
    // them in all.
    if !gather {
        return Ok(None);
    }
    let into = start_at;
    let moves = plan_gather(available, into, units);
    if moves.is_empty() {
        return Ok(None);
    }
    for (from, to, moved) in moves {
        move_free(tx, sku, (from as i32, to as i32, moved), "gather", now_ms)?;
    }
    let into = into as i32;
    Ok(try_take(tx, sku, into, units)?.then_some(into))
}

/// [`try_take`] unless another transaction holds the row (then false at
/// once, without waiting).
fn try_take_unlocked(
    tx: &mut Tx<'_>,
    sku: &str,
    part: i32,
    units: i64,
) -> Result<bool, StoreError> {
    let taken = tx
        .execute(
            "UPDATE stock_partitions SET available = available - $3, reserved = reserved + $3
             WHERE sku = $1 AND available >= $3 AND part = (
                SELECT part FROM stock_partitions
                 WHERE sku = $1 AND part = $2 AND available >= $3
                 FOR NO KEY UPDATE SKIP LOCKED)",
            &[&sku, &part, &units],
        )
        .map_err(pg_err)?;
    Ok(taken == 1)
}

/// The reservation itself: one conditional statement on one partition
/// (waits for its row lock; takes nothing unless `available >= units`).
fn try_take(tx: &mut Tx<'_>, sku: &str, part: i32, units: i64) -> Result<bool, StoreError> {
    let taken = tx
        .execute(
            "UPDATE stock_partitions SET available = available - $3, reserved = reserved + $3
             WHERE sku = $1 AND part = $2 AND available >= $3",
            &[&sku, &part, &units],
        )
        .map_err(pg_err)?;
    Ok(taken == 1)
}

pub(super) use crate::core::stock::{HoldMove, PartitionMove};

/// Writes collected hold moves: one conditional UPDATE per partition and
/// kind of move, the units summed, in (sku, partition) order.
pub(super) fn apply_put_off(tx: &mut Tx<'_>, moves: Vec<PartitionMove>) -> Result<(), StoreError> {
    let mut summed: std::collections::BTreeMap<(String, i32, HoldMove), i64> =
        std::collections::BTreeMap::new();
    for m in moves {
        *summed.entry((m.sku, m.part, m.step)).or_default() += m.units;
    }
    for ((sku, part, step), units) in summed {
        let changed = tx
            .execute(hold_move_sql(step), &[&sku, &part, &units])
            .map_err(pg_err)?;
        if changed != 1 {
            return Err(StoreError::Corrupt {
                table: "stock_partitions",
                detail: format!("partition {part} of {sku} cannot move {units} units ({step:?})"),
            });
        }
    }
    Ok(())
}

fn hold_move_sql(step: HoldMove) -> &'static str {
    match step {
        HoldMove::Commit => {
            "UPDATE stock_partitions SET reserved = reserved - $3, committed = committed + $3
             WHERE sku = $1 AND part = $2 AND reserved >= $3"
        }
        HoldMove::Release => {
            "UPDATE stock_partitions SET reserved = reserved - $3, available = available + $3
             WHERE sku = $1 AND part = $2 AND reserved >= $3"
        }
        HoldMove::Return => {
            "UPDATE stock_partitions SET committed = committed - $3, available = available + $3
             WHERE sku = $1 AND part = $2 AND committed >= $3"
        }
    }
}

/// Moves the hold of `order_id` once; false when it was already moved (or
/// never held): the idempotent no-op.
pub(super) fn move_hold(
    tx: &mut Tx<'_>,
    order_id: &str,
    step: HoldMove,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    let (from, to) = match step {
        HoldMove::Commit => ("held", "committed"),
        HoldMove::Release => ("held", "released"),
        HoldMove::Return => ("committed", "returned"),
    };
    let stock_sql = hold_move_sql(step);
    let moved = tx
        .query_opt(
            "UPDATE reservations SET state = $2, settled_at_ms = $3
             WHERE order_id = $1 AND state = $4 RETURNING sku, part, quantity",
            &[&order_id, &to, &now_ms, &from],
        )
        .map_err(pg_err)?;
    let Some(row) = moved else {
        return Ok(false);
    };
    let (sku, part, quantity): (String, i32, i64) = (row.get(0), row.get(1), row.get(2));
    if let Some(moves) = tx.deferred_hold_moves() {
        moves.push(PartitionMove {
            sku,
            part,
            step,
            units: quantity,
        });
        return Ok(true);
    }
    let changed = tx
        .execute(stock_sql, &[&sku, &part, &quantity])
        .map_err(pg_err)?;
    if changed != 1 {
        return Err(StoreError::Corrupt {
            table: "stock_partitions",
            detail: format!("hold of {order_id} ({quantity} of {sku}) is not in partition {part}"),
        });
    }
    Ok(true)
}

/// Releases the holds of `order_ids` still `held`: the holds in one
/// statement, then one statement per partition with the units summed, in
/// (sku, partition) order. Returns how many holds were released.
pub(super) fn release_holds(
    tx: &mut Tx<'_>,
    order_ids: &[String],
    now_ms: UnixMs,
) -> Result<usize, StoreError> {
    if order_ids.is_empty() {
        return Ok(0);
    }
    let rows = tx
        .query(
            "WITH released AS (
                UPDATE reservations SET state = 'released', settled_at_ms = $2
                 WHERE order_id = ANY($1) AND state = 'held'
                 RETURNING sku, part, quantity)
             SELECT sku, part, SUM(quantity)::bigint, COUNT(*) FROM released
              GROUP BY sku, part ORDER BY sku COLLATE \"C\", part",
            &[&order_ids, &now_ms],
        )
        .map_err(pg_err)?;
    let mut released = 0;
    for row in rows {
        let (sku, part, units, holds): (String, i32, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let changed = tx
            .execute(
                "UPDATE stock_partitions SET reserved = reserved - $3, available = available + $3
                 WHERE sku = $1 AND part = $2 AND reserved >= $3",
                &[&sku, &part, &units],
            )
            .map_err(pg_err)?;
        if changed != 1 {
            return Err(StoreError::Corrupt {
                table: "stock_partitions",
                detail: format!("partition {part} of {sku} does not hold {units} released units"),
            });
        }
        released += usize::try_from(holds).unwrap_or(0);
    }
    Ok(released)
}

/// One SKU's counts: the sum of its partitions.
pub(super) fn level(client: &mut impl Db, sku: &str) -> Result<StockLevel, StoreError> {
    let row = client
        .query_one(
            "SELECT COUNT(*), COALESCE(SUM(share), 0)::bigint, COALESCE(SUM(available), 0)::bigint,
                    COALESCE(SUM(reserved), 0)::bigint, COALESCE(SUM(committed), 0)::bigint
             FROM stock_partitions WHERE sku = $1",
            &[&sku],
        )
        .map_err(pg_err)?;
    let parts: i64 = row.get(0);
    if parts == 0 {
        return Err(StoreError::UnknownSku(sku.to_owned()));
    }
    Ok(StockLevel {
        sku: sku.to_owned(),
        total: row.get(1),
        available: row.get(2),
        reserved: row.get(3),
        committed: row.get(4),
    })
}

/// Every partition of `sku`, by number.
pub(super) fn partitions(client: &mut impl Db, sku: &str) -> Result<Vec<Partition>, StoreError> {
    let rows = client
        .query(
            "SELECT part, share, available, reserved, committed FROM stock_partitions
             WHERE sku = $1 ORDER BY part",
            &[&sku],
        )
        .map_err(pg_err)?;
    if rows.is_empty() {
        return Err(StoreError::UnknownSku(sku.to_owned()));
    }
    Ok(rows
        .iter()
        .map(|row| Partition {
            part: u32::try_from(row.get::<_, i32>(0)).unwrap_or(0),
            share: row.get(1),
            available: row.get(2),
            reserved: row.get(3),
            committed: row.get(4),
        })
        .collect())
}
