//! The tables. Conservation is a CHECK constraint, so SQLite itself refuses a
//! statement that would break `available + reserved + committed = total`;
//! the code checks it again after each change (see `stock::verify`).

pub(crate) const SCHEMA_SQL: &str = r#"
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
"#;
