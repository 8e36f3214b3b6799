//! `sluice audit`: checks a data directory through a read-only connection
//! (conservation per SKU and per partition, the SKU as the sum of its
//! partitions, holds against counts, payments against orders),
//! so it runs against a stopped store or next to a running one (WAL lets a
//! reader see the last commit without blocking the writer).

use std::fmt;
use std::path::Path;

use rusqlite::Connection;

use crate::backend::sqlite::attempt;
use crate::backend::sqlite::stock;
use crate::backend::sqlite::store::open_read_only;
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::{DB_FILE_NAME, EXPIRED_HOLD_GRACE_MS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The columns do not add up to the total, or one is negative.
    StockNotConserved {
        sku: String,
        total: i64,
        available: i64,
        reserved: i64,
        committed: i64,
    },
    /// `reserved` / `committed` differ from the sum of the SKU's holds.
    HoldsDisagree {
        sku: String,
        column: &'static str,
        stock: i64,
        holds: i64,
    },
    /// The SKU's counts are not the sum of its partitions, or a
    /// partition's `reserved` / `committed` differ from its holds.
    PartitionsDisagree { sku: String, detail: String },
    /// More than one capture recorded for one order.
    MultipleCaptures { order_id: String, captures: i64 },
    /// A hold past its expiry (plus grace) still counted as reserved, with
    /// no payment that could justify keeping it.
    ExpiredHoldCounted {
        order_id: String,
        expired_for_ms: i64,
    },
    /// Money was captured but the order is neither confirmed nor being
    /// compensated.
    PaidOrderNotConfirmed { order_id: String, state: String },
    /// A hold was released while the order's payment may hold money
    /// (pending, authorized or captured).
    HoldReleasedWhilePaid {
        order_id: String,
        payment_state: String,
    },
    /// Money is held or taken for an order that will not ship, and no void
    /// or refund was ever stored for it.
    UncompensatedCharge {
        order_id: String,
        state: String,
        payment_state: String,
    },
    /// A compensation past its budget that has not succeeded: an operator
    /// must look (see `docs/payments.md`).
    StuckCompensation {
        idempotency_key: String,
        outcome: String,
        tries: i64,
    },
    /// An attempt whose stored parameters no longer match their hash.
    AttemptParamsChanged { idempotency_key: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::StockNotConserved { sku, total, available, reserved, committed } => write!(
                f,
                "stock {sku}: available {available} + reserved {reserved} + committed {committed} != total {total}"
            ),
            Violation::HoldsDisagree { sku, column, stock, holds } => {
                write!(f, "stock {sku}: {column} is {stock} but its holds sum to {holds}")
            }
            Violation::PartitionsDisagree { sku, detail } => {
                write!(f, "stock {sku}: {detail}")
            }
            Violation::MultipleCaptures { order_id, captures } => {
                write!(f, "order {order_id}: captured {captures} times")
            }
            Violation::ExpiredHoldCounted { order_id, expired_for_ms } => write!(
                f,
                "order {order_id}: hold expired {expired_for_ms} ms ago and is still reserved"
            ),
            Violation::PaidOrderNotConfirmed { order_id, state } => {
                write!(f, "order {order_id}: captured but {state}")
            }
            Violation::HoldReleasedWhilePaid { order_id, payment_state } => write!(
                f,
                "order {order_id}: hold released while its payment is {payment_state}"
            ),
            Violation::UncompensatedCharge { order_id, state, payment_state } => write!(
                f,
                "order {order_id}: {state} but its payment is {payment_state} and nothing undoes it"
            ),
            Violation::StuckCompensation { idempotency_key, outcome, tries } => write!(
                f,
                "compensation {idempotency_key}: stuck ({outcome} after {tries} tries)"
            ),
            Violation::AttemptParamsChanged { idempotency_key } => write!(
                f,
                "payment attempt {idempotency_key}: parameters do not match their hash"
            ),
        }
    }
}

/// Every violation found in `data_dir` as of `now_ms`.
pub fn audit(data_dir: &Path, now_ms: UnixMs) -> Result<Vec<Violation>, StoreError> {
    let conn = open_read_only(&data_dir.join(DB_FILE_NAME))?;
    let version = crate::backend::sqlite::schema::version(&conn)?;
    if version != crate::backend::sqlite::schema::SCHEMA_VERSION {
        let hint = if version > crate::backend::sqlite::schema::SCHEMA_VERSION {
            "run the newer sluice's audit"
        } else {
            "start this sluice once on it to migrate it"
        };
        return Err(StoreError::InvalidArgument(format!(
            "the store's schema is version {version}, this binary's is {}: {hint}",
            crate::backend::sqlite::schema::SCHEMA_VERSION
        )));
    }
    // One read transaction: every check sees the same commit.
    conn.execute_batch("BEGIN")?;
    let mut violations = Vec::new();

    for level in stock::load_all(&conn)? {
        if !level.is_conserved() {
            violations.push(Violation::StockNotConserved {
                sku: level.sku.clone(),
                total: level.total,
                available: level.available,
                reserved: level.reserved,
                committed: level.committed,
            });
        }
        for (column, value, hold_state) in [
            ("reserved", level.reserved, "held"),
            ("committed", level.committed, "committed"),
        ] {
            let holds: i64 = conn.query_row(
                "SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE sku = ?1 AND state = ?2",
                [&level.sku, hold_state],
                |row| row.get(0),
            )?;
            if holds != value {
                violations.push(Violation::HoldsDisagree {
                    sku: level.sku.clone(),
                    column,
                    stock: value,
                    holds,
                });
            }
        }
    }

    partition_checks(&conn, &mut violations)?;

    let mut stmt = conn.prepare(
        "SELECT order_id, COUNT(*) FROM payment_ops WHERE op = 'capture'
         GROUP BY order_id HAVING COUNT(*) > 1",
    )?;
    for row in stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (order_id, captures) = row?;
        violations.push(Violation::MultipleCaptures { order_id, captures });
    }

    let mut stmt = conn.prepare(
        "SELECT r.order_id, r.expires_at_ms FROM reservations r
         LEFT JOIN orders o ON o.order_id = r.order_id
         WHERE r.state = 'held' AND r.expires_at_ms < ?1
           AND COALESCE(o.payment_state, 'none') NOT IN ('pending', 'authorized', 'captured')",
    )?;
    for row in stmt.query_map([now_ms - EXPIRED_HOLD_GRACE_MS], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })? {
        let (order_id, expires_at_ms) = row?;
        violations.push(Violation::ExpiredHoldCounted {
            order_id,
            expired_for_ms: now_ms - expires_at_ms,
        });
    }

    let mut stmt = conn.prepare(
        "SELECT DISTINCT o.order_id, o.state FROM orders o
         JOIN payment_ops p ON p.order_id = o.order_id AND p.op = 'capture'
         WHERE o.state NOT IN ('confirmed', 'refunding', 'refunded')",
    )?;
    for row in stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (order_id, state) = row?;
        violations.push(Violation::PaidOrderNotConfirmed { order_id, state });
    }
    drop(stmt);
    payment_checks(&conn, &mut violations)?;
    conn.execute_batch("COMMIT")?;
    Ok(violations)
}

/// Each SKU against the sum of its partitions, and each partition against
/// its own holds.
fn partition_checks(conn: &Connection, violations: &mut Vec<Violation>) -> Result<(), StoreError> {
    for level in stock::load_all(conn)? {
        let parts = crate::backend::sqlite::partition::load(conn, &level.sku)?;
        let sum = |f: fn(&crate::backend::sqlite::partition::Partition) -> i64| {
            parts.iter().map(f).sum::<i64>()
        };
        let summed = (
            sum(|p| p.share),
            sum(|p| p.available),
            sum(|p| p.reserved),
            sum(|p| p.committed),
        );
        let stored = (
            level.total,
            level.available,
            level.reserved,
            level.committed,
        );
        if summed != stored {
            violations.push(Violation::PartitionsDisagree {
                sku: level.sku.clone(),
                detail: format!(
                    "total/available/reserved/committed are {stored:?} but its partitions sum to {summed:?}"
                ),
            });
        }
        for p in &parts {
            for (column, value, hold_state) in [
                ("reserved", p.reserved, "held"),
                ("committed", p.committed, "committed"),
            ] {
                let holds: i64 = conn.query_row(
                    "SELECT COALESCE(SUM(quantity), 0) FROM reservations
                     WHERE sku = ?1 AND part = ?2 AND state = ?3",
                    rusqlite::params![level.sku, p.part, hold_state],
                    |row| row.get(0),
                )?;
                if holds != value {
                    violations.push(Violation::PartitionsDisagree {
                        sku: level.sku.clone(),
                        detail: format!(
                            "partition {} {column} is {value} but its holds sum to {holds}",
                            p.part
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The payment attempts against the orders and holds.
fn payment_checks(conn: &Connection, violations: &mut Vec<Violation>) -> Result<(), StoreError> {
    let mut stmt = conn.prepare(
        "SELECT r.order_id, o.payment_state FROM reservations r
         JOIN orders o ON o.order_id = r.order_id
         WHERE r.state = 'released' AND o.payment_state IN ('pending', 'authorized', 'captured')",
    )?;
    for row in stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (order_id, payment_state) = row?;
        violations.push(Violation::HoldReleasedWhilePaid {
            order_id,
            payment_state,
        });
    }
    let mut stmt = conn.prepare(
        "SELECT o.order_id, o.state, o.payment_state FROM orders o
         WHERE o.state IN ('declined', 'cancelled', 'expired', 'voided', 'rejected')
           AND o.payment_state IN ('authorized', 'captured')
           AND NOT EXISTS (SELECT 1 FROM payment_attempts a
                           WHERE a.order_id = o.order_id AND a.operation IN ('void', 'refund'))",
    )?;
    for row in stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))? {
        let (order_id, state, payment_state) = row?;
        violations.push(Violation::UncompensatedCharge {
            order_id,
            state,
            payment_state,
        });
    }
    let mut stmt = conn.prepare(
        "SELECT idempotency_key, outcome, tries FROM payment_attempts
         WHERE stuck = 1 AND outcome != 'succeeded' ORDER BY created_at_ms",
    )?;
    for row in stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))? {
        let (idempotency_key, outcome, tries) = row?;
        violations.push(Violation::StuckCompensation {
            idempotency_key,
            outcome,
            tries,
        });
    }
    let mut stmt = conn.prepare("SELECT idempotency_key FROM payment_attempts")?;
    let keys: Vec<String> = stmt
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for key in keys {
        match attempt::load(conn, &key) {
            Ok(Some(a)) if a.params_hash == a.expected_hash() => {}
            _ => violations.push(Violation::AttemptParamsChanged {
                idempotency_key: key,
            }),
        }
    }
    Ok(())
}
