//! Payment attempts on PostgreSQL and what a definite answer does: one
//! function, [`settle`], used alike by the checkout's own calls, the
//! cancel's refund, provider webhooks and the payments reconciler, so the
//! order of arrival does not matter. It reads the facts, asks the shared decision
//! ([`crate::core::settle::decide`], where the rules are listed) and
//! applies the settlement in SQL.
//!
//! An attempt is settled once: the UPDATE is conditional on its outcome
//! still being `pending`, so a second answer (a webhook got there first)
//! changes nothing. [`drive`] sends an attempt and its follow-ups, each
//! answer settled in one transaction, none open across a provider call.

use super::conn::{Db, Tx};
use super::tally::Tally;
use super::{order, pg_err, stock, PgBackend};
use crate::blocking::{step, Blocking, Inline};
use crate::clock::UnixMs;
use crate::core::attempt::{attempt_key, AttemptOutcome, Operation};
use crate::core::order::Order;
pub(super) use crate::core::settle::FollowUp;
use crate::core::settle::{decide, needs_cancel_flag, Attempted, Compensation, OrderFacts};
use crate::core::state::{OrderState, PaymentState};
use crate::error::StoreError;
use crate::http_client::wait;
use crate::limits::{PAYMENT_IN_FLIGHT_MS, PAYMENT_STEPS_MAX};
use crate::metrics::Metrics;
use crate::payment::{send_once, Call, OperationOutcome, PaymentError, PaymentProvider};

/// Sends of one provider operation within one drive, at most.
pub const SEND_TRIES_MAX: u32 = 3;

/// Stores an attempt before it is sent (nothing if it already is);
/// returns its key.
pub(super) fn insert_attempt(
    tx: &mut Tx<'_>,
    order_id: &str,
    operation: Operation,
    amount_cents: u64,
    payment_method: Option<&str>,
    payment_id: Option<&str>,
    now_ms: UnixMs,
) -> Result<String, StoreError> {
    let key = attempt_key(order_id, operation);
    let amount = i64::try_from(amount_cents).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO payment_attempts (idempotency_key, order_id, operation, amount_cents,
             payment_method, payment_id, outcome, created_at_ms, updated_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7)
         ON CONFLICT (idempotency_key) DO NOTHING",
        &[
            &key,
            &order_id,
            &operation.as_str(),
            &amount,
            &payment_method,
            &payment_id,
            &now_ms,
        ],
    )
    .map_err(pg_err)?;
    Ok(key)
}

/// Makes a stored, still pending attempt due for the payments
/// reconciler's next pass (its in-flight bound already run out): for a
/// follow-up no call is about to send (a provider event stored it), as
/// the embedded store's `FollowUp::Due`.
pub(super) fn make_due(tx: &mut Tx<'_>, key: &str, now_ms: UnixMs) -> Result<(), StoreError> {
    lease_from(tx, key, now_ms.saturating_sub(PAYMENT_IN_FLIGHT_MS))
}

/// Dates a stored, still pending attempt's lease from `leased_at_ms` at
/// the latest: the reconciler takes it once its in-flight bound from
/// then has run out.
fn lease_from(tx: &mut Tx<'_>, key: &str, leased_at_ms: UnixMs) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE payment_attempts SET updated_at_ms = LEAST(updated_at_ms, $2)
         WHERE idempotency_key = $1 AND outcome = 'pending'",
        &[&key, &leased_at_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// One stored attempt, as [`drive`] sends it.
#[derive(Debug, Clone)]
pub(super) struct StoredAttempt {
    pub key: String,
    pub order_id: String,
    pub operation: Operation,
    pub amount_cents: u64,
    pub payment_method: Option<String>,
    pub payment_id: Option<String>,
    pub pending: bool,
}

pub(super) fn load_attempt(
    client: &mut impl Db,
    key: &str,
) -> Result<Option<StoredAttempt>, StoreError> {
    let Some(row) = client
        .query_opt(
            "SELECT idempotency_key, order_id, operation, amount_cents, payment_method,
                    payment_id, outcome = 'pending'
             FROM payment_attempts WHERE idempotency_key = $1",
            &[&key],
        )
        .map_err(pg_err)?
    else {
        return Ok(None);
    };
    let operation: String = row.get(2);
    let amount: i64 = row.get(3);
    Ok(Some(StoredAttempt {
        key: row.get(0),
        order_id: row.get(1),
        operation: Operation::parse(&operation).ok_or_else(|| StoreError::Corrupt {
            table: "payment_attempts",
            detail: format!("operation {operation:?}"),
        })?,
        amount_cents: u64::try_from(amount).unwrap_or(0),
        payment_method: row.get(4),
        payment_id: row.get(5),
        pending: row.get(6),
    }))
}

/// Marks the checkout's key done once its order has an outcome, so a retry
/// replays it at once instead of waiting out the lock.
pub(super) fn complete_key_of(
    tx: &mut Tx<'_>,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE idempotency SET completed_at_ms = $2
         WHERE order_id = $1 AND completed_at_ms IS NULL",
        &[&order_id, &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

fn cancel_requested(tx: &mut Tx<'_>, order_id: &str) -> Result<bool, StoreError> {
    Ok(tx
        .query_opt(
            "SELECT 1 FROM cancel_requests WHERE order_id = $1",
            &[&order_id],
        )
        .map_err(pg_err)?
        .is_some())
}

fn hold_is_held(tx: &mut Tx<'_>, order_id: &str) -> Result<bool, StoreError> {
    Ok(tx
        .query_opt(
            "SELECT 1 FROM reservations WHERE order_id = $1 AND state = 'held'",
            &[&order_id],
        )
        .map_err(pg_err)?
        .is_some())
}

/// An order's move, when it is still where this settlement expects it.
fn advance(
    tx: &mut Tx<'_>,
    order_id: &str,
    from: OrderState,
    to: OrderState,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    order::transition(tx, order_id, from, to, now_ms).map(|_| ())
}

/// What settling an attempt left to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settled {
    /// Nothing more to send.
    Done,
    /// This follow-up attempt, stored, is to be sent.
    Next(String),
    /// The attempt had been settled before: nothing changed.
    Before,
}

/// Applies a definite `answer` to the attempt `key` and everything it
/// decides, in the caller's transaction.
pub(super) fn settle(
    tx: &mut Tx<'_>,
    tally: &mut Tally,
    key: &str,
    answer: &OperationOutcome,
    follow_up: FollowUp,
    now_ms: UnixMs,
) -> Result<Settled, StoreError> {
    let (outcome, answered_id) = match answer {
        OperationOutcome::Succeeded { payment_id } => ("succeeded", Some(payment_id.as_str())),
        OperationOutcome::Declined { .. } => ("declined", None),
        OperationOutcome::Failed { .. } => ("failed", None),
    };
    // The order is locked before its attempt, as webhooks, cancels and
    // the expiry pass lock it before anything of it: opposite orders
    // would deadlock (each victim retried only after `deadlock_timeout`).
    // An attempt's order never changes, so it is read without a lock:
    // with the order's row locked in one statement, or, when that finds
    // none (no such attempt, or its order is gone), apart.
    let (order_id, order) = match order::load_for_update_by_attempt(tx, key)? {
        Some(order) => (order.order_id.clone(), Some(order)),
        None => {
            let Some(order_id) = tx
                .query_opt(
                    "SELECT order_id FROM payment_attempts WHERE idempotency_key = $1",
                    &[&key],
                )
                .map_err(pg_err)?
                .map(|row| row.get::<_, String>(0))
            else {
                return Ok(Settled::Before);
            };
            let order: Option<Order> = order::load_for_update(tx, &order_id)?;
            (order_id, order)
        }
    };
    // `was`: the row before this statement (its lease, see below).
    let Some(row) = tx
        .query_opt(
            "UPDATE payment_attempts a SET outcome = $2,
                    payment_id = COALESCE(a.payment_id, $3), updated_at_ms = $4
             FROM payment_attempts was
             WHERE a.idempotency_key = $1 AND a.outcome = 'pending'
               AND was.idempotency_key = a.idempotency_key
             RETURNING a.operation, a.payment_id, a.amount_cents, was.updated_at_ms,
                       a.created_at_ms",
            &[&key, &outcome, &answered_id, &now_ms],
        )
        .map_err(pg_err)?
    else {
        return Ok(Settled::Before);
    };
    let operation: String = row.get(0);
    let operation = Operation::parse(&operation).ok_or_else(|| StoreError::Corrupt {
        table: "payment_attempts",
        detail: format!("operation {operation:?}"),
    })?;
    let payment_id: String = row.get::<_, Option<String>>(1).unwrap_or_default();
    let amount: i64 = row.get(2);
    let amount = u64::try_from(amount).unwrap_or(0);
    // Leased by a call before this transaction (not stored by it).
    let leased_at_ms: Option<i64> =
        Some(row.get::<_, i64>(3)).filter(|_| row.get::<_, i64>(4) < now_ms);
    let follow = |tx: &mut Tx<'_>, op: Operation| {
        let next = insert_attempt(tx, &order_id, op, amount, None, Some(&payment_id), now_ms)?;
        if follow_up == FollowUp::Due {
            // A provider event settled it: nobody stored the follow-up to
            // send it, but a call that stored this attempt before may be
            // waiting for its answer still, and will adopt the follow-up
            // when it comes. It is due when this attempt was: at once for
            // one nobody drives, after the in-flight bound of a call still
            // under way (on a fleet, another gateway's pass would send it
            // meanwhile, twice, and with one simulator per gateway to one
            // that never saw the payment).
            match leased_at_ms {
                Some(leased_at_ms) => lease_from(tx, &next, leased_at_ms)?,
                None => make_due(tx, &next, now_ms)?,
            }
        }
        Ok(Settled::Next(next))
    };
    let facts = match &order {
        Some(o) => Some(OrderFacts {
            state: o.state,
            payment_state: o.payment_state,
            hold_held: o.state == OrderState::Authorizing && hold_is_held(tx, &order_id)?,
        }),
        None => None,
    };
    let attempted = Attempted {
        operation,
        outcome: if outcome == "succeeded" {
            AttemptOutcome::Succeeded
        } else if outcome == "declined" {
            AttemptOutcome::Declined
        } else {
            AttemptOutcome::Failed
        },
    };
    let cancel = needs_cancel_flag(attempted, facts.as_ref()) && cancel_requested(tx, &order_id)?;
    let settlement = decide(attempted, facts.as_ref(), cancel);
    // Applied in the settlement's order: the counters, the payment, the
    // hold, the order's moves (the key completed once it leaves
    // `authorizing`), the follow-up. This store keeps no ledger apart
    // from its attempts and closes no superseded attempt
    // (`Settlement::supersede`): a capture still pending after a void is
    // sent, and refused, by the reconciler.
    match settlement.compensation {
        Some(Compensation::Done(op)) => tally.compensation(op.as_str(), "ok"),
        // Logged by the tally once committed, not on each run.
        Some(Compensation::Refused(op)) => tally.compensation_refused(&order_id, op.as_str()),
        None => {}
    }
    if let Some(state) = settlement.payment_to {
        let id = matches!(state, PaymentState::Authorized | PaymentState::Captured)
            .then_some(payment_id.as_str());
        order::set_payment(tx, &order_id, state, id, now_ms)?;
    }
    if let Some(step) = settlement.hold {
        stock::move_hold(tx, &order_id, step, now_ms)?;
    }
    for &(from, to) in &settlement.order_to {
        advance(tx, &order_id, from, to, now_ms)?;
    }
    if settlement.completes_key() {
        complete_key_of(tx, &order_id, now_ms)?;
    }
    match settlement.follow_up {
        Some(op) => {
            if settlement.orphan {
                tally.orphan_charge();
            }
            follow(tx, op)
        }
        None => Ok(Settled::Done),
    }
}

/// Sends one stored attempt: its answer, or `None` when it stays
/// ambiguous (after [`SEND_TRIES_MAX`] sends, each ambiguous answer looked
/// up before the next send with the same key). With `lookup_first`, the
/// provider is asked what became of it before anything is sent (the
/// reconciler: a crashed gateway may have sent it).
pub(super) async fn send(
    provider: &dyn PaymentProvider,
    metrics: &Metrics,
    attempt: &StoredAttempt,
    lookup_first: bool,
) -> Option<OperationOutcome> {
    let key = attempt.key.as_str();
    if lookup_first {
        if let Ok(Some(known)) = provider.lookup(key).await {
            return Some(known);
        }
    }
    let call = Call {
        operation: attempt.operation,
        key,
        order_id: &attempt.order_id,
        amount_cents: attempt.amount_cents,
        payment_method: attempt.payment_method.as_deref().unwrap_or(""),
        payment_id: attempt.payment_id.as_deref().unwrap_or(""),
    };
    for _ in 0..SEND_TRIES_MAX {
        let sent = send_once(provider, call).await;
        match sent {
            Ok(outcome) => return Some(outcome),
            Err(PaymentError::Refused(reason)) => return Some(OperationOutcome::Failed { reason }),
            Err(PaymentError::Ambiguous) => Metrics::inc(&metrics.payment_ambiguous),
        }
        // Never received, or the look-up failed too: send again.
        if let Ok(Some(known)) = provider.lookup(key).await {
            return Some(known);
        }
    }
    None
}

/// The order's oldest attempt still `pending`, if any.
fn pending_of(client: &mut impl Db, order_id: &str) -> Result<Option<String>, StoreError> {
    Ok(client
        .query_opt(
            "SELECT idempotency_key FROM payment_attempts
             WHERE order_id = $1 AND outcome = 'pending' ORDER BY created_at_ms, idempotency_key
             LIMIT 1",
            &[&order_id],
        )
        .map_err(pg_err)?
        .map(|row| row.get(0)))
}

/// Sends the attempt `key` and each follow-up its answer decides, every
/// answer settled in its own transaction (on the answers' pool, so a rush
/// of new checkouts cannot starve a payment under way). An attempt another path settled
/// first (a webhook) hands over to the follow-up it stored, which this
/// drive adopts. An answer that stays ambiguous leaves its attempt
/// `pending` for the payments reconciler. Returns whether every step got
/// an answer.
pub(super) fn drive(
    backend: &PgBackend,
    key: String,
    lookup_first: bool,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    wait(drive_on(backend, &Inline, key, lookup_first, now_ms))
}

/// [`drive`] with each store step on `steps` and the provider calls
/// awaited between them.
pub(super) async fn drive_on(
    backend: &PgBackend,
    steps: &dyn Blocking,
    key: String,
    lookup_first: bool,
    now_ms: UnixMs,
) -> Result<bool, StoreError> {
    let drove = drive_from(backend, steps, Start::Stored(key), lookup_first, now_ms).await?;
    Ok(drove.answered)
}

/// Where a drive starts.
pub(super) enum Start {
    /// The attempt stored under this key, read first.
    Stored(String),
    /// An attempt the caller's own transaction stored moments ago and
    /// knows (step 1's authorize attempt), sent without reading it back:
    /// nobody else sends an attempt before its in-flight bound ran out,
    /// and were one settled meanwhile, the provider answers the same key
    /// with the same answer and [`settle`] changes nothing twice.
    Known(StoredAttempt),
}

/// What a drive did.
pub(super) struct Drove {
    /// Whether every step got an answer.
    pub answered: bool,
    /// The order as the drive's last transaction left it, when that
    /// transaction settled the last step (read in it: no connection of
    /// its own for the caller's read after).
    pub order: Option<Order>,
}

/// [`drive_on`] from `start`. Each answer's transaction also reads what
/// the drive needs next (the follow-up attempt it stored, or the order
/// once nothing follows), so no step reads on a connection of its own
/// between two sends.
pub(super) async fn drive_from(
    backend: &PgBackend,
    steps: &dyn Blocking,
    start: Start,
    lookup_first: bool,
    now_ms: UnixMs,
) -> Result<Drove, StoreError> {
    let mut next = start;
    let mut lookup_first = lookup_first;
    let answered = |order| {
        Ok(Drove {
            answered: true,
            order,
        })
    };
    for _ in 0..=PAYMENT_STEPS_MAX {
        let loaded = match next {
            Start::Known(attempt) => Some(attempt),
            Start::Stored(key) => {
                let b = backend.clone();
                step(steps, move || {
                    b.read_answer(|client| load_attempt(client, &key))
                })
                .await??
            }
        };
        let Some(attempt) = loaded else {
            return answered(None);
        };
        let (settled, followed, order) = if attempt.pending {
            let Some(answer) = send(
                backend.provider(),
                backend.metrics(),
                &attempt,
                lookup_first,
            )
            .await
            else {
                return Ok(Drove {
                    answered: false,
                    order: None,
                });
            };
            // Batched with this gateway's other answers: the hot stock
            // row a capture moves is locked once per batch.
            let (b, job_key, order_id) = (
                backend.clone(),
                attempt.key.clone(),
                attempt.order_id.clone(),
            );
            let (settled, tally, followed, order) = step(steps, move || {
                b.write_answer_batched(move |tx| {
                    let mut tally = Tally::default();
                    let settled =
                        settle(tx, &mut tally, &job_key, &answer, FollowUp::Driven, now_ms)?;
                    let (followed, order) = match &settled {
                        Settled::Next(next) => (load_attempt(tx, next)?, None),
                        Settled::Done => (None, order::load(tx, &order_id)?),
                        Settled::Before => (None, None),
                    };
                    Ok((settled, tally, followed, order))
                })
            })
            .await??;
            tally.apply(backend.metrics());
            (settled, followed, order)
        } else {
            (Settled::Before, None, None)
        };
        next = match settled {
            Settled::Next(key) => {
                lookup_first = false;
                match followed {
                    Some(attempt) => Start::Known(attempt),
                    None => Start::Stored(key),
                }
            }
            Settled::Done => return answered(order),
            Settled::Before => {
                // Someone else's follow-up may be waiting: adopt it (it may
                // have been sent already, so ask the provider first).
                let (b, order_id) = (backend.clone(), attempt.order_id.clone());
                let pending = step(steps, move || {
                    b.read_answer(|client| pending_of(client, &order_id))
                })
                .await??;
                match pending {
                    Some(next) if next != attempt.key => {
                        lookup_first = true;
                        Start::Stored(next)
                    }
                    _ => return answered(None),
                }
            }
        };
    }
    answered(None)
}
