//! Durable payment attempts: one row per provider operation of an order,
//! committed before the operation is sent.
//!
//! - The idempotency key is `{order_id}:{operation}`: a retry, a look-up
//!   and a restart all find the same attempt and send the same key.
//! - The parameters are stored with their hash and re-sent verbatim.
//! - [`Transport`] (did an answer arrive?) is kept apart from
//!   [`AttemptOutcome`] (what happened), and both apart from the order.
//!
//! Transport: `pending` (stored; a first try may be under way — after a
//! crash it is treated as possibly sent) → `answered`, or → `timed_out` (the
//! answers were lost; retried later) → `sent` (a later retry is under way)
//! → `answered`. Outcome: `unknown` until an answer or a look-up says
//! `succeeded`, `declined` (authorize only) or `failed`; then final.

use rusqlite::{params, Connection, Row, Transaction};

use crate::clock::UnixMs;
pub use crate::core::attempt::{attempt_key, AttemptOutcome, Operation, Transport};
use crate::core::idempotency::request_hash;
use crate::error::StoreError;
use crate::limits::{COMPENSATION_TRIES_BUDGET, PAYMENT_IN_FLIGHT_MS};
use crate::metrics::Metrics;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub idempotency_key: String,
    pub order_id: String,
    pub operation: Operation,
    pub params_hash: String,
    pub amount_cents: u64,
    /// Authorize only.
    pub payment_method: Option<String>,
    /// The payment it acts on (capture, void, refund), or the one an
    /// authorization created once known.
    pub payment_id: Option<String>,
    pub transport: Transport,
    pub outcome: AttemptOutcome,
    /// The provider's reason for a decline or failure, or the last error.
    pub detail: Option<String>,
    /// Tries (sends and look-ups) so far, across calls.
    pub tries: u32,
    pub next_try_at_ms: UnixMs,
    /// A compensation past its budget (`compensation_failures`).
    pub stuck: bool,
    pub created_at_ms: UnixMs,
    pub updated_at_ms: UnixMs,
}

impl Attempt {
    /// The hash of what is sent; re-checked before every send.
    pub fn expected_hash(&self) -> String {
        params_hash(
            &self.order_id,
            self.operation,
            self.amount_cents,
            self.payment_method.as_deref(),
            self.payment_id.as_deref(),
        )
    }
}

fn params_hash(
    order_id: &str,
    operation: Operation,
    amount_cents: u64,
    payment_method: Option<&str>,
    payment_id: Option<&str>,
) -> String {
    // The authorization's own payment id is its result, not a parameter.
    let payment_id = if operation == Operation::Authorize {
        None
    } else {
        payment_id
    };
    request_hash(&[
        order_id,
        operation.as_str(),
        &amount_cents.to_string(),
        payment_method.unwrap_or(""),
        payment_id.unwrap_or(""),
    ])
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "payment_attempts",
        detail,
    }
}

const SELECT_ATTEMPT: &str = "SELECT idempotency_key, order_id, operation, params_hash,
    amount_cents, payment_method, payment_id, transport, outcome, detail, tries,
    next_try_at_ms, stuck, created_at_ms, updated_at_ms FROM payment_attempts";

fn from_row(row: &Row<'_>) -> Result<Attempt, StoreError> {
    let operation: String = row.get(2)?;
    let amount_cents: i64 = row.get(4)?;
    let transport: String = row.get(7)?;
    let outcome: String = row.get(8)?;
    let tries: i64 = row.get(10)?;
    let stuck: i64 = row.get(12)?;
    Ok(Attempt {
        idempotency_key: row.get(0)?,
        order_id: row.get(1)?,
        operation: Operation::parse(&operation)
            .ok_or_else(|| corrupt(format!("operation {operation:?}")))?,
        params_hash: row.get(3)?,
        amount_cents: u64::try_from(amount_cents)
            .map_err(|_| corrupt(format!("amount_cents {amount_cents}")))?,
        payment_method: row.get(5)?,
        payment_id: row.get(6)?,
        transport: Transport::parse(&transport)
            .ok_or_else(|| corrupt(format!("transport {transport:?}")))?,
        outcome: AttemptOutcome::parse(&outcome)
            .ok_or_else(|| corrupt(format!("outcome {outcome:?}")))?,
        detail: row.get(9)?,
        tries: u32::try_from(tries).map_err(|_| corrupt(format!("tries {tries}")))?,
        next_try_at_ms: row.get(11)?,
        stuck: stuck != 0,
        created_at_ms: row.get(13)?,
        updated_at_ms: row.get(14)?,
    })
}

pub(crate) fn load(conn: &Connection, key: &str) -> Result<Option<Attempt>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{SELECT_ATTEMPT} WHERE idempotency_key = ?1"))?;
    let mut rows = stmt.query([key])?;
    match rows.next()? {
        Some(row) => from_row(row).map(Some),
        None => Ok(None),
    }
}

fn load_many(
    conn: &Connection,
    filter: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<Attempt>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{SELECT_ATTEMPT} {filter}"))?;
    let mut rows = stmt.query(args)?;
    let mut attempts = Vec::new();
    while let Some(row) = rows.next()? {
        attempts.push(from_row(row)?);
    }
    Ok(attempts)
}

/// Every attempt of `order_id`, oldest first.
pub(crate) fn load_for_order(
    conn: &Connection,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    load_many(
        conn,
        "WHERE order_id = ?1 ORDER BY created_at_ms, rowid",
        [order_id],
    )
}

/// Unresolved attempts due for a retry at `now_ms`, oldest due first.
pub(crate) fn load_due(
    conn: &Connection,
    now_ms: UnixMs,
    limit: usize,
) -> Result<Vec<Attempt>, StoreError> {
    load_many(
        conn,
        "WHERE outcome = 'unknown' AND next_try_at_ms <= ?1 ORDER BY next_try_at_ms LIMIT ?2",
        params![now_ms, limit as i64],
    )
}

/// Compensations past their budget and still unresolved or failed.
pub(crate) fn load_stuck(conn: &Connection, limit: usize) -> Result<Vec<Attempt>, StoreError> {
    load_many(
        conn,
        "WHERE stuck = 1 AND outcome != 'succeeded' ORDER BY created_at_ms LIMIT ?1",
        [limit as i64],
    )
}

/// What a new attempt sends.
pub(crate) struct NewAttempt<'a> {
    pub order_id: &'a str,
    pub operation: Operation,
    pub amount_cents: u64,
    pub payment_method: Option<&'a str>,
    pub payment_id: Option<&'a str>,
}

/// Stores the attempt unless (order, operation) already has one; returns
/// the stored row either way. A new row is left alone by the reconciler for
/// [`PAYMENT_IN_FLIGHT_MS`] (the request that stored it is sending it).
pub(crate) fn insert(
    tx: &Transaction<'_>,
    new: &NewAttempt<'_>,
    now_ms: UnixMs,
) -> Result<Attempt, StoreError> {
    insert_due(tx, new, now_ms, now_ms.saturating_add(PAYMENT_IN_FLIGHT_MS))
}

/// Like [`insert`], due for the reconciler at `due_at_ms` (now, when no
/// request is going to send it).
pub(crate) fn insert_due(
    tx: &Transaction<'_>,
    new: &NewAttempt<'_>,
    now_ms: UnixMs,
    due_at_ms: UnixMs,
) -> Result<Attempt, StoreError> {
    let key = attempt_key(new.order_id, new.operation);
    let amount = i64::try_from(new.amount_cents)
        .map_err(|_| StoreError::InvalidArgument("amount too large".into()))?;
    let hash = params_hash(
        new.order_id,
        new.operation,
        new.amount_cents,
        new.payment_method,
        new.payment_id,
    );
    tx.prepare_cached(
        "INSERT INTO payment_attempts (idempotency_key, order_id, operation, params_hash,
            amount_cents, payment_method, payment_id, transport, outcome, tries,
            next_try_at_ms, stuck, created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 'unknown', 0, ?8, 0, ?9, ?9)
         ON CONFLICT DO NOTHING",
    )?
    .execute(params![
        key,
        new.order_id,
        new.operation.as_str(),
        hash,
        amount,
        new.payment_method,
        new.payment_id,
        due_at_ms,
        now_ms,
    ])?;
    load(tx, &key)?.ok_or_else(|| corrupt(format!("attempt {key} not stored")))
}

/// Records a definite outcome; false (and nothing written) when the
/// attempt already had one, so a late second answer changes nothing.
pub(crate) fn record_outcome(
    tx: &Transaction<'_>,
    key: &str,
    outcome: AttemptOutcome,
    payment_id: Option<&str>,
    detail: Option<&str>,
    tries: u32,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    debug_assert_ne!(outcome, AttemptOutcome::Unknown);
    let changed = tx
        .prepare_cached(
            "UPDATE payment_attempts SET transport = 'answered', outcome = ?2,
                payment_id = COALESCE(payment_id, ?3), detail = ?4, tries = tries + ?5,
                updated_at_ms = ?6
             WHERE idempotency_key = ?1 AND outcome = 'unknown'",
        )?
        .execute(params![
            key,
            outcome.as_str(),
            payment_id,
            detail,
            tries,
            now_ms
        ])?;
    Ok(changed == 1)
}

/// Marks a definite failure of a compensation as stuck (an operator must
/// look), counting it once.
pub(crate) fn mark_stuck(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    attempt: &Attempt,
) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached(
            "UPDATE payment_attempts SET stuck = 1 WHERE idempotency_key = ?1 AND stuck = 0",
        )?
        .execute([&attempt.idempotency_key])?;
    if changed == 1 {
        Metrics::inc(&metrics.compensation_failures);
        metrics.count_compensation(attempt.operation.as_str(), "failed");
    }
    Ok(())
}

/// The answers of `tries` more tries were lost: the attempt stays
/// unresolved, due again at `next_try_at_ms`. A compensation that has now
/// used its budget is marked stuck and counted once.
pub(crate) fn record_unresolved(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    key: &str,
    tries: u32,
    detail: &str,
    next_try_at_ms: UnixMs,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE payment_attempts SET transport = 'timed_out', tries = tries + ?2, detail = ?3,
            next_try_at_ms = ?4, updated_at_ms = ?5
         WHERE idempotency_key = ?1 AND outcome = 'unknown'",
    )?
    .execute(params![key, tries, detail, next_try_at_ms, now_ms])?;
    if let Some(attempt) = load(tx, key)? {
        if attempt.operation.is_compensation()
            && attempt.outcome == AttemptOutcome::Unknown
            && attempt.tries >= COMPENSATION_TRIES_BUDGET
        {
            mark_stuck(tx, metrics, &attempt)?;
        }
    }
    Ok(())
}

/// Takes over an attempt a provider event stored and nobody has sent yet
/// (never tried, still `pending`, due sooner than the in-flight bound
/// from its creation: at once, or when the attempt it follows was due —
/// a call stores its own due exactly that bound later, so one a call is
/// sending is never taken): due again only after
/// [`PAYMENT_IN_FLIGHT_MS`] (from its creation at the earliest: the
/// caller's time may lag the event's, and a taken-over attempt must not
/// look takeable again), as if the caller had stored it, because the
/// caller sends it now. False (nothing written) for any other attempt:
/// answered, tried, being retried, or already taken over.
pub(crate) fn adopt(tx: &Transaction<'_>, key: &str, now_ms: UnixMs) -> Result<bool, StoreError> {
    let changed = tx
        .prepare_cached(
            "UPDATE payment_attempts SET next_try_at_ms = MAX(?2, created_at_ms) + ?3,
                    updated_at_ms = ?2
             WHERE idempotency_key = ?1 AND outcome = 'unknown' AND transport = 'pending'
                AND tries = 0 AND next_try_at_ms < created_at_ms + ?3",
        )?
        .execute(params![key, now_ms, PAYMENT_IN_FLIGHT_MS])?;
    Ok(changed == 1)
}

/// A retry of an unresolved attempt is under way (reconciler).
pub(crate) fn mark_sent(tx: &Transaction<'_>, key: &str, now_ms: UnixMs) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE payment_attempts SET transport = 'sent', updated_at_ms = ?2,
            next_try_at_ms = MAX(next_try_at_ms, ?2 + ?3)
         WHERE idempotency_key = ?1 AND outcome = 'unknown'",
    )?
    .execute(params![key, now_ms, PAYMENT_IN_FLIGHT_MS])?;
    Ok(())
}

/// The attempt of (order, operation), if any.
pub(crate) fn load_op(
    conn: &Connection,
    order_id: &str,
    operation: Operation,
) -> Result<Option<Attempt>, StoreError> {
    load(conn, &attempt_key(order_id, operation))
}
