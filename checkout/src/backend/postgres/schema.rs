//! The PostgreSQL schema as numbered migrations, recorded in
//! `schema_migrations` and applied at start.
//!
//! Each migration runs in its own transaction together with its row in
//! `schema_migrations`, under a transaction-scoped advisory lock, so a
//! fleet starting at once applies each exactly once. A database stamped
//! with a version this binary does not know (written by a newer one) is
//! refused.
//!
//! Stock lives only in `stock_partitions` (one row per partition, each
//! conserving its own `share`); a SKU's counts are their sum, so no single
//! summary row is written by every reservation.

use postgres::Client;

use super::pg_err;
use crate::error::StoreError;

/// Key of the advisory lock migrations run under (any constant will do,
/// as long as nothing else in the database uses it).
const MIGRATION_LOCK: i64 = 0x5_1C1C_E000;

/// Every migration, in order; the number is the version it leaves.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE products (
        sku text PRIMARY KEY CHECK (length(sku) BETWEEN 1 AND 128),
        price_cents bigint NOT NULL CHECK (price_cents >= 0),
        reservation_ttl_ms bigint NOT NULL CHECK (reservation_ttl_ms > 0),
        partitions integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024)
    );
    CREATE TABLE stock_partitions (
        sku text NOT NULL REFERENCES products (sku),
        part integer NOT NULL CHECK (part >= 0 AND part < 1024),
        share bigint NOT NULL,
        available bigint NOT NULL CHECK (available >= 0),
        reserved bigint NOT NULL CHECK (reserved >= 0),
        committed bigint NOT NULL CHECK (committed >= 0),
        CHECK (share = available + reserved + committed),
        PRIMARY KEY (sku, part)
    );
    CREATE TABLE rebalances (
        id bigserial PRIMARY KEY,
        sku text NOT NULL REFERENCES products (sku),
        from_part integer NOT NULL,
        to_part integer NOT NULL,
        units bigint NOT NULL CHECK (units > 0),
        reason text NOT NULL,
        at_ms bigint NOT NULL
    );
    CREATE TABLE orders (
        order_id text PRIMARY KEY,
        subject text NOT NULL,
        sku text NOT NULL REFERENCES products (sku),
        quantity integer NOT NULL CHECK (quantity > 0),
        payment_method text NOT NULL,
        amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
        state text NOT NULL CHECK (state IN ('reserved', 'authorizing', 'confirmed',
            'declined', 'cancelled', 'expired', 'refunding', 'refunded', 'voided', 'rejected')),
        payment_state text NOT NULL CHECK (payment_state IN ('none', 'pending', 'authorized',
            'captured', 'declined', 'voided', 'refunded')),
        payment_id text,
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL,
        reservation_expires_at_ms bigint
    );
    CREATE INDEX orders_by_subject ON orders (subject);
    CREATE TABLE reservations (
        order_id text PRIMARY KEY REFERENCES orders (order_id),
        sku text NOT NULL,
        part integer NOT NULL,
        quantity bigint NOT NULL CHECK (quantity > 0),
        state text NOT NULL CHECK (state IN ('held', 'committed', 'released', 'returned')),
        created_at_ms bigint NOT NULL,
        expires_at_ms bigint NOT NULL,
        settled_at_ms bigint,
        FOREIGN KEY (sku, part) REFERENCES stock_partitions (sku, part)
    );
    CREATE INDEX reservations_held ON reservations (expires_at_ms) WHERE state = 'held';
    CREATE TABLE idempotency (
        subject text NOT NULL,
        key text NOT NULL,
        request_hash text NOT NULL,
        order_id text REFERENCES orders (order_id),
        created_at_ms bigint NOT NULL,
        locked_at_ms bigint NOT NULL,
        completed_at_ms bigint,
        PRIMARY KEY (subject, key)
    );
    CREATE TABLE payment_attempts (
        idempotency_key text PRIMARY KEY,
        order_id text NOT NULL REFERENCES orders (order_id),
        operation text NOT NULL CHECK (operation IN ('authorize', 'capture', 'void', 'refund')),
        amount_cents bigint NOT NULL,
        payment_method text,
        payment_id text,
        outcome text NOT NULL CHECK (outcome IN ('pending', 'succeeded', 'declined', 'failed')),
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL
    );
    CREATE TABLE outbox (
        seq bigserial PRIMARY KEY,
        event_id text NOT NULL UNIQUE,
        order_id text NOT NULL,
        event_type text NOT NULL,
        payload text NOT NULL,
        created_at_ms bigint NOT NULL,
        published_at_ms bigint,
        lease_owner text,
        lease_until_ms bigint
    );
    CREATE INDEX outbox_pending ON outbox (seq) WHERE published_at_ms IS NULL;
    CREATE INDEX idempotency_by_age ON idempotency (created_at_ms);
    CREATE INDEX outbox_published ON outbox (published_at_ms) WHERE published_at_ms IS NOT NULL;
    CREATE INDEX reservations_ended ON reservations (settled_at_ms)
        WHERE state IN ('released', 'returned');
    CREATE TABLE cancel_requests (
        order_id text PRIMARY KEY REFERENCES orders (order_id),
        requested_at_ms bigint NOT NULL
    );",
    ),
    // What the gateway's webhooks, adjustments, payments reconciler and
    // readiness probe need: provider event ids (deduplication, pruned by
    // age), the provider event list's cursor, the adjustment log, the
    // probe's row, and the index the payments reconciler looks for due
    // attempts through.
    (
        2,
        "CREATE TABLE webhook_events (
            event_id text PRIMARY KEY,
            type text NOT NULL,
            order_id text NOT NULL,
            result text NOT NULL,
            received_at_ms bigint NOT NULL
        );
        CREATE INDEX webhook_events_by_age ON webhook_events (received_at_ms);
        CREATE TABLE provider_cursor (
            provider text PRIMARY KEY,
            cursor bigint NOT NULL CHECK (cursor >= 0)
        );
        CREATE TABLE adjustments (
            id bigserial PRIMARY KEY,
            sku text NOT NULL REFERENCES products (sku),
            delta bigint NOT NULL CHECK (delta <> 0),
            reason text NOT NULL,
            at_ms bigint NOT NULL
        );
        CREATE TABLE write_probe (
            id integer PRIMARY KEY CHECK (id = 1),
            at_ms bigint NOT NULL
        );
        CREATE INDEX payment_attempts_pending ON payment_attempts (updated_at_ms)
            WHERE outcome = 'pending';
        CREATE INDEX payment_attempts_by_order ON payment_attempts (order_id);",
    ),
    // 3: a provider event about an order this database does not hold
    // stores its compensation (a void or refund of money with no order),
    // as the embedded store does, so attempts no longer need their order;
    // and the indexes the per-second passes count through (orders resting
    // in a state they should leave, refused compensations) instead of
    // scanning every order and attempt.
    (
        3,
        "ALTER TABLE payment_attempts DROP CONSTRAINT IF EXISTS payment_attempts_order_id_fkey;
        CREATE INDEX orders_in_flight ON orders (updated_at_ms)
            WHERE state IN ('reserved', 'authorizing', 'refunding');
        CREATE INDEX payment_attempts_failed_compensations ON payment_attempts (order_id)
            WHERE operation IN ('void', 'refund') AND outcome = 'failed';",
    ),
    // 4: a batch of checkouts claims each key with the id of the order it
    // is about to create, in one statement for the batch, before the
    // order exists: the key's foreign key to its order is checked at the
    // commit instead of at once. And the index a settled order's key is
    // completed through (by its order id), instead of a scan of every
    // key.
    (
        4,
        "ALTER TABLE idempotency ALTER CONSTRAINT idempotency_order_id_fkey
            DEFERRABLE INITIALLY DEFERRED;
        CREATE INDEX idempotency_by_order ON idempotency (order_id);",
    ),
    // 5: the hot path's immediate foreign keys go: an order's to its
    // product, a hold's to its order and to its partition. Each was a
    // lookup run for every row a batch wrote (through SPI, about a
    // quarter of the server's CPU per reservation with three gateways on
    // one hot SKU) and a `FOR KEY SHARE` lock on the hot product row by
    // every transaction in flight, for rows the same transaction had just
    // read or written (the claim reads the product, the holds are written
    // from the batch's orders and the partition its `UPDATE` took from),
    // and products, partitions and orders are never deleted. `sluice
    // audit` checks each of these references instead. The key's deferred
    // foreign key to its order stays: a key is written naming an order
    // that does not exist yet, and the commit is where a batch that
    // failed to create it is caught.
    (
        5,
        "ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_sku_fkey;
        ALTER TABLE reservations DROP CONSTRAINT IF EXISTS reservations_order_id_fkey;
        ALTER TABLE reservations DROP CONSTRAINT IF EXISTS reservations_sku_part_fkey;",
    ),
];

/// The version this binary leaves a database at.
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Applies every migration the database lacks; returns the version found
/// before. Refuses a database newer than this binary.
pub(super) fn migrate(client: &mut Client) -> Result<i32, StoreError> {
    let mut found = None;
    for (version, sql) in MIGRATIONS {
        let mut tx = client.transaction().map_err(pg_err)?;
        // A migration (an index on a big table) and the wait for another
        // gateway's may outlast the session's bounds.
        tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0")
            .map_err(pg_err)?;
        // The lock first: concurrent first starts creating the table at
        // once would collide on its type (pg_type, SQLSTATE 23505).
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(pg_err)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .map_err(pg_err)?;
        let current: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .map_err(pg_err)?
            .get(0);
        found.get_or_insert(current);
        if current > SCHEMA_VERSION {
            return Err(StoreError::InvalidArgument(format!(
                "the PostgreSQL schema is at version {current}, newer than this binary's \
                 {SCHEMA_VERSION}: upgrade sluice"
            )));
        }
        if current >= *version {
            continue;
        }
        tx.batch_execute(sql).map_err(pg_err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .map_err(pg_err)?;
        tx.commit().map_err(pg_err)?;
    }
    Ok(found.unwrap_or(0))
}

/// The version stored, 0 for an empty database. In a transaction: the
/// driver's statement for it (prepared, bound, closed) then stays on one
/// server session behind a transaction pooler (see `conn`).
pub(super) fn version(client: &mut Client) -> Result<i32, StoreError> {
    let mut tx = client.transaction().map_err(pg_err)?;
    let version = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .map_err(pg_err)?
        .get(0);
    tx.commit().map_err(pg_err)?;
    Ok(version)
}
