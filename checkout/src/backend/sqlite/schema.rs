//! The tables, as numbered migrations applied in order when the store
//! opens; `PRAGMA user_version` records how many have been applied, each in
//! the same transaction as its own statements, so a crash mid-migration
//! leaves the previous version whole. A database from a newer binary (a
//! version above [`MIGRATIONS`]'s length) is refused, never downgraded.
//!
//! Conservation is a CHECK constraint, so SQLite itself refuses a
//! statement that would break `available + reserved + committed = total`;
//! the code checks it again after each change (see `stock::verify`).
//!
//! Migration 1 is the schema as it stood before versions were kept; it
//! uses `IF NOT EXISTS` throughout, so a database created then (version 0,
//! every table present) takes it as a no-op and is stamped version 1.

use rusqlite::Connection;

use crate::error::StoreError;

/// Every migration, oldest first: index `i` brings the schema from version
/// `i` to `i + 1`. Append only; never edit one that has shipped.
pub(crate) const MIGRATIONS: [&str; 3] = [V1_TABLES, V2_RETENTION_INDEXES, V3_PARTITIONS];

/// The version this binary writes.
pub(crate) const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// The schema's version as stored in the database.
pub(crate) fn version(conn: &Connection) -> Result<usize, StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    usize::try_from(version).map_err(|_| StoreError::Corrupt {
        table: "user_version",
        detail: format!("negative schema version {version}"),
    })
}

/// Applies the migrations the database has not seen yet, each in its own
/// transaction together with its version stamp. Returns the versions
/// applied.
pub(crate) fn migrate(conn: &mut Connection) -> Result<Vec<usize>, StoreError> {
    let current = version(conn)?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::InvalidArgument(format!(
            "the store's schema is version {current}, newer than this binary's \
             {SCHEMA_VERSION}; run the newer sluice"
        )));
    }
    let mut applied = Vec::new();
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let to = index + 1;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        // PRAGMA takes no bound parameters; `to` is a small integer.
        tx.execute_batch(&format!("PRAGMA user_version = {to}"))?;
        tx.commit()?;
        applied.push(to);
    }
    Ok(applied)
}

const V1_TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS stock (
    sku TEXT PRIMARY KEY,
    total INTEGER NOT NULL,
    available INTEGER NOT NULL,
    reserved INTEGER NOT NULL,
    committed INTEGER NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents >= 0),
    reservation_ttl_ms INTEGER NOT NULL CHECK (reservation_ttl_ms > 0),
    CHECK (available >= 0 AND reserved >= 0 AND committed >= 0
           AND available + reserved + committed = total)
) STRICT;

CREATE TABLE IF NOT EXISTS adjustments (
    id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL REFERENCES stock(sku),
    delta INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS reservations (
    order_id TEXT PRIMARY KEY,
    sku TEXT NOT NULL REFERENCES stock(sku),
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    state TEXT NOT NULL CHECK (state IN ('held', 'committed', 'released', 'returned')),
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS reservations_held_by_expiry
    ON reservations (expires_at_ms) WHERE state = 'held';

CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    sku TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    payment_method TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    state TEXT NOT NULL,
    payment_state TEXT NOT NULL,
    payment_id TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    reservation_expires_at_ms INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS orders_by_state ON orders (state, updated_at_ms);
CREATE INDEX IF NOT EXISTS orders_by_subject ON orders (subject, state);

CREATE TABLE IF NOT EXISTS idempotency (
    subject TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    order_id TEXT,
    created_at_ms INTEGER NOT NULL,
    locked_at_ms INTEGER NOT NULL,
    completed_at_ms INTEGER,
    PRIMARY KEY (subject, key)
) STRICT;
CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (created_at_ms);

CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    order_id TEXT NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    published_at_ms INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (seq) WHERE published_at_ms IS NULL;

CREATE TABLE IF NOT EXISTS payment_ops (
    id INTEGER PRIMARY KEY,
    order_id TEXT NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('authorize', 'capture', 'void', 'refund')),
    payment_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS payment_ops_by_order ON payment_ops (order_id);

-- One row per provider operation, stored before it is sent. Transport
-- (did an answer arrive?) is kept apart from outcome (what happened), and
-- both apart from the order's state. The key is derived from (order,
-- operation), so there is one attempt per operation and its retries reuse it.
CREATE TABLE IF NOT EXISTS payment_attempts (
    idempotency_key TEXT PRIMARY KEY,
    order_id TEXT NOT NULL,
    operation TEXT NOT NULL CHECK (operation IN ('authorize', 'capture', 'void', 'refund')),
    params_hash TEXT NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents >= 0),
    payment_method TEXT,
    payment_id TEXT,
    transport TEXT NOT NULL CHECK (transport IN ('pending', 'sent', 'timed_out', 'answered')),
    outcome TEXT NOT NULL CHECK (outcome IN ('unknown', 'succeeded', 'declined', 'failed')),
    detail TEXT,
    tries INTEGER NOT NULL CHECK (tries >= 0),
    next_try_at_ms INTEGER NOT NULL,
    stuck INTEGER NOT NULL CHECK (stuck IN (0, 1)),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (order_id, operation)
) STRICT;
CREATE INDEX IF NOT EXISTS payment_attempts_unresolved
    ON payment_attempts (next_try_at_ms) WHERE outcome = 'unknown';

-- Provider events applied (webhooks and the event list): a duplicate id
-- changes nothing.
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    order_id TEXT NOT NULL,
    result TEXT NOT NULL,
    received_at_ms INTEGER NOT NULL
) STRICT;

-- A shopper cancelled while the payment was in flight: whatever the
-- provider answers, the money goes back (void if authorized, refund if
-- captured).
CREATE TABLE IF NOT EXISTS cancel_requests (
    order_id TEXT PRIMARY KEY,
    requested_at_ms INTEGER NOT NULL
) STRICT;

-- Where the reconciler is in the provider's event list.
CREATE TABLE IF NOT EXISTS provider_cursor (
    provider TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL CHECK (cursor >= 0)
) STRICT;

-- Orders per state, kept by the triggers below in the transactions that
-- change orders; recounted from `orders` when the store opens.
CREATE TABLE IF NOT EXISTS order_counts (
    state TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) STRICT;
CREATE TRIGGER IF NOT EXISTS order_counts_insert AFTER INSERT ON orders BEGIN
    UPDATE order_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER IF NOT EXISTS order_counts_update AFTER UPDATE OF state ON orders
WHEN OLD.state <> NEW.state BEGIN
    UPDATE order_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE order_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER IF NOT EXISTS order_counts_delete AFTER DELETE ON orders BEGIN
    UPDATE order_counts SET n = n - 1 WHERE state = OLD.state;
END;

-- One row, rewritten by the readiness probe: a real durable write.
CREATE TABLE IF NOT EXISTS write_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at_ms INTEGER NOT NULL
) STRICT;
"#;

/// Indexes the retention passes delete by, so each bounded pass finds its
/// oldest rows without a scan (see `retention`).
const V2_RETENTION_INDEXES: &str = r#"
CREATE INDEX IF NOT EXISTS outbox_published_by_age
    ON outbox (published_at_ms) WHERE published_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_events_by_age ON webhook_events (received_at_ms);
CREATE INDEX IF NOT EXISTS reservations_ended_by_age
    ON reservations (settled_at_ms) WHERE state IN ('released', 'returned');
"#;

/// Partitioned stock: each SKU's units live in `stock.partitions` rows of
/// `stock_partitions` (existing SKUs get one, holding what the SKU held),
/// each with its own `share` of the total and its own CHECK. The `stock`
/// row's counts become the sum of its partitions, kept by the triggers in
/// the same statement that moves a partition, so the `stock` CHECK still
/// holds at every statement. Holds remember their partition; rebalances
/// are logged.
const V3_PARTITIONS: &str = r#"
ALTER TABLE stock ADD COLUMN partitions INTEGER NOT NULL DEFAULT 1
    CHECK (partitions >= 1 AND partitions <= 1024);

CREATE TABLE stock_partitions (
    sku TEXT NOT NULL REFERENCES stock(sku),
    part INTEGER NOT NULL CHECK (part >= 0),
    share INTEGER NOT NULL,
    available INTEGER NOT NULL,
    reserved INTEGER NOT NULL,
    committed INTEGER NOT NULL,
    PRIMARY KEY (sku, part),
    CHECK (available >= 0 AND reserved >= 0 AND committed >= 0
           AND available + reserved + committed = share)
) STRICT;
INSERT INTO stock_partitions (sku, part, share, available, reserved, committed)
    SELECT sku, 0, total, available, reserved, committed FROM stock;

CREATE TRIGGER stock_partitions_insert AFTER INSERT ON stock_partitions BEGIN
    UPDATE stock SET total = total + NEW.share, available = available + NEW.available,
                     reserved = reserved + NEW.reserved, committed = committed + NEW.committed
     WHERE sku = NEW.sku;
END;
CREATE TRIGGER stock_partitions_update AFTER UPDATE ON stock_partitions BEGIN
    UPDATE stock SET total = total + NEW.share - OLD.share,
                     available = available + NEW.available - OLD.available,
                     reserved = reserved + NEW.reserved - OLD.reserved,
                     committed = committed + NEW.committed - OLD.committed
     WHERE sku = NEW.sku;
END;

ALTER TABLE reservations ADD COLUMN part INTEGER NOT NULL DEFAULT 0 CHECK (part >= 0);

-- Every move of units between two partitions of a SKU, with why.
CREATE TABLE rebalances (
    id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL REFERENCES stock(sku),
    from_part INTEGER NOT NULL,
    to_part INTEGER NOT NULL,
    units INTEGER NOT NULL CHECK (units > 0),
    reason TEXT NOT NULL,
    at_ms INTEGER NOT NULL
) STRICT;
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(conn: &Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') ORDER BY name",
            )
            .unwrap();
        stmt.query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_new_database_gets_every_migration_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), vec![1, 2, 3]);
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        assert!(tables(&conn).contains(&"webhook_events_by_age".to_owned()));
        assert!(
            migrate(&mut conn).unwrap().is_empty(),
            "nothing left to apply"
        );
    }

    /// A store created before versions were kept (every v1 table, version
    /// 0) upgrades in place and keeps its rows.
    #[test]
    fn an_unversioned_store_is_stamped_and_upgraded() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1_TABLES).unwrap();
        conn.execute(
            "INSERT INTO stock (sku, total, available, reserved, committed, price_cents, reservation_ttl_ms)
             VALUES ('a', 3, 3, 0, 0, 100, 1000)",
            [],
        )
        .unwrap();
        assert_eq!(version(&conn).unwrap(), 0);
        assert_eq!(migrate(&mut conn).unwrap(), vec![1, 2, 3]);
        let total: i64 = conn
            .query_row("SELECT total FROM stock WHERE sku = 'a'", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(total, 3, "the partition's insert did not count twice");
        let share: i64 = conn
            .query_row(
                "SELECT share FROM stock_partitions WHERE sku = 'a' AND part = 0",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(share, 3, "an existing SKU becomes one partition");
    }

    #[test]
    fn a_store_from_a_newer_binary_is_refused_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA user_version = 99").unwrap();
        let err = migrate(&mut conn).unwrap_err().to_string();
        assert!(err.contains("version 99"), "{err}");
        assert!(tables(&conn).is_empty(), "nothing was created");
    }

    /// A migration that fails leaves the version where it was, so the next
    /// start tries it again from a whole state.
    #[test]
    fn a_failed_migration_keeps_the_previous_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1_TABLES).unwrap();
        conn.execute_batch("PRAGMA user_version = 1; DROP TABLE webhook_events;")
            .unwrap();
        assert!(migrate(&mut conn).is_err(), "v2 indexes a missing table");
        assert_eq!(version(&conn).unwrap(), 1);
        assert!(!tables(&conn).contains(&"outbox_published_by_age".to_owned()));
    }
}
