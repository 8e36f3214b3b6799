//! Every bound of the crate, named with its unit (TigerStyle: put a limit on
//! everything). Callers may choose smaller values where a parameter exists.

/// Idempotency keys: 8–255 visible ASCII characters (contract).
pub const IDEMPOTENCY_KEY_LEN_MIN: usize = 8;
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;

/// Keys are kept at least 24 hours (contract); one more hour of slack so a
/// retry at exactly 24 h still replays.
pub const IDEMPOTENCY_RETENTION_MS: i64 = 25 * 60 * 60 * 1000;

/// Published outbox events are kept this long after publication.
pub const OUTBOX_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Provider event ids are kept this long after receipt: longer than any
/// provider redelivers (Stripe: 3 days), so a late duplicate still dedupes.
pub const WEBHOOK_EVENT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Released and returned holds are kept this long after they settled.
pub const ENDED_HOLD_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// A key whose request has been in flight this long is presumed abandoned
/// (the process died mid-request); the next retry takes it over instead of
/// getting `409` forever.
pub const IDEMPOTENCY_LOCK_STALE_MS: i64 = 30_000;

/// Units in one order line.
pub const ORDER_QUANTITY_MAX: u32 = 100;

/// Lengths of strings that come from outside and get stored.
pub const SKU_LEN_MAX: usize = 128;
pub const SUBJECT_LEN_MAX: usize = 256;
pub const PAYMENT_METHOD_LEN_MAX: usize = 64;
pub const ADJUST_REASON_LEN_MAX: usize = 512;

/// Units of one SKU; keeps every sum far from `i64` overflow.
pub const STOCK_UNITS_MAX: i64 = 1_000_000_000_000;

/// Rows one reconciler pass, relay pass or purge pass touches, at most.
pub const PASS_ROWS_MAX: usize = 10_000;

/// How long SQLite waits for another connection's write lock.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;

/// Group commit: bounds of one batch and of the request queue.
pub const GROUP_COMMIT_BATCH_MAX: usize = 4_096;
pub const GROUP_COMMIT_WAIT_MAX_US: u64 = 10_000;
/// Default wait for company: short next to an fsync, so a lone request is
/// barely delayed while a crowd fills the batch.
pub const GROUP_COMMIT_WAIT_DEFAULT_US: u64 = 200;
pub const GROUP_COMMIT_QUEUE_MAX: usize = 65_536;

/// Audit: a hold past its expiry by more than this is a leak (the reconciler
/// runs more often than this).
pub const EXPIRED_HOLD_GRACE_MS: i64 = 60_000;

/// The database file inside the data dir.
pub const DB_FILE_NAME: &str = "checkout.db";
/// The outbox's default sink inside the data dir.
pub const OUTBOX_FILE_NAME: &str = "outbox.jsonl";

/// Provider tries (sends and look-ups) of one operation in one call, at most.
pub const PAYMENT_TRIES_MAX: u32 = 10;
/// The longest pause between two tries.
pub const PAYMENT_BACKOFF_MAX_MS: u64 = 60_000;
/// An attempt stored this recently may still be in flight in the request
/// that stored it; the reconciler leaves it alone until then.
pub const PAYMENT_IN_FLIGHT_MS: i64 = 60_000;
/// Total tries of a compensation (void, refund) before it is counted in
/// `compensation_failures` and shown as stuck; the reconciler keeps trying.
pub const COMPENSATION_TRIES_BUDGET: u32 = 3;
/// Payment steps one drive may chain (authorize → capture → void).
pub const PAYMENT_STEPS_MAX: usize = 4;
/// Webhook signature: timestamps this far from now are refused.
pub const WEBHOOK_TOLERANCE_S: i64 = 300;
/// Webhook body and header bounds.
pub const WEBHOOK_BODY_BYTES_MAX: usize = 64 * 1024;
pub const WEBHOOK_HEADER_BYTES_MAX: usize = 4 * 1024;
/// `v1=` values one signature header may carry, at most.
pub const WEBHOOK_SIGNATURES_MAX: usize = 8;
/// Event ids, payment ids and order ids coming from a provider.
pub const PROVIDER_ID_LEN_MAX: usize = 255;
/// Provider events one reconciler pass fetches, at most.
pub const PROVIDER_EVENTS_PAGE_MAX: usize = 1_000;
