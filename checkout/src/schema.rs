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
