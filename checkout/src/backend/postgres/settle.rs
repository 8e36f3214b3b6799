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
    let attempt = StoredAttempt {
        key: attempt_key(order_id, operation),
        order_id: order_id.to_owned(),
        operation,
        amount_cents,
        payment_method: payment_method.map(str::to_owned),
        payment_id: payment_id.map(str::to_owned),
        pending: true,
    };
    store_attempt(tx, attempt, now_ms).map(|(key, _)| key)
}

/// [`insert_attempt`] of `attempt` (pending): its key, and the attempt
/// as stored when this call stored it (`None`: one was already stored
/// under the key, maybe settled since).
fn store_attempt(
    tx: &mut Tx<'_>,
    attempt: StoredAttempt,
    now_ms: UnixMs,
) -> Result<(String, Option<StoredAttempt>), StoreError> {
    let amount = i64::try_from(attempt.amount_cents).unwrap_or(i64::MAX);
    let stored = tx
        .execute(
            "INSERT INTO payment_attempts (idempotency_key, order_id, operation, amount_cents,
             payment_method, payment_id, outcome, created_at_ms, updated_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7)
         ON CONFLICT (idempotency_key) DO NOTHING",
            &[
                &attempt.key,
                &attempt.order_id,
                &attempt.operation.as_str(),
                &amount,
                &attempt.payment_method,
                &attempt.payment_id,
                &now_ms,
            ],
        )
        .map_err(pg_err)?;
    Ok((attempt.key.clone(), (stored == 1).then_some(attempt)))
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
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What settling an attempt left to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settled {
    /// Nothing more to send; the order as its last move left it, when
    /// this settlement moved it.
    Done(Option<Order>),
    /// This follow-up attempt, stored, is to be sent (with the attempt,
    /// when this settlement stored it; `None`: it was stored before).
    Next(String, Option<StoredAttempt>),
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
    // `was`: the row before this statement (its lease, see below). The
    // order's hold and cancel flags come with it: read by a statement
    // after the order's row lock, they see what every earlier holder of
    // the lock committed.
    let Some(row) = tx
        .query_opt(
            "UPDATE payment_attempts a SET outcome = $2,
                    payment_id = COALESCE(a.payment_id, $3), updated_at_ms = $4
             FROM payment_attempts was
             WHERE a.idempotency_key = $1 AND a.outcome = 'pending'
               AND was.idempotency_key = a.idempotency_key
             RETURNING a.operation, a.payment_id, a.amount_cents, was.updated_at_ms,
                       a.created_at_ms,
                       EXISTS (SELECT 1 FROM reservations r
                                WHERE r.order_id = a.order_id AND r.state = 'held'),
                       EXISTS (SELECT 1 FROM cancel_requests c WHERE c.order_id = a.order_id)",
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
        let attempt = StoredAttempt {
            key: attempt_key(&order_id, op),
            order_id: order_id.clone(),
            operation: op,
            amount_cents: amount,
            payment_method: None,
            payment_id: Some(payment_id.clone()),
            pending: true,
        };
        let (next, stored) = store_attempt(tx, attempt, now_ms)?;
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
        Ok(Settled::Next(next, stored))
    };
    let (held, cancel_asked): (bool, bool) = (row.get(5), row.get(6));
    let hold_held = held && order.as_ref().map(|o| o.state) == Some(OrderState::Authorizing);
    let facts = order.as_ref().map(|o| OrderFacts {
        state: o.state,
        payment_state: o.payment_state,
        hold_held,
    });
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
    let cancel = needs_cancel_flag(attempted, facts.as_ref()) && cancel_asked;
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
    // The payment's change rides on the order's first move when it has
    // one (one UPDATE of the row, not two; the hold's move in between
    // touches other tables), alone otherwise.
    let mut payment = settlement.payment_to.map(|state| {
        let id = matches!(state, PaymentState::Authorized | PaymentState::Captured)
            .then_some(payment_id.as_str());
        (state, id)
    });
    if settlement.order_to.is_empty() {
        if let Some((state, id)) = payment.take() {
            order::set_payment(tx, &order_id, state, id, now_ms)?;
        }
    }
    if let Some(step) = settlement.hold {
        stock::move_hold(tx, &order_id, step, now_ms)?;
    }
    // The key is completed by the order's last move's statement, or
    // apart when the order does not move.
    let mut moved = None;
    let moves = settlement.order_to.len();
    for (n, &(from, to)) in settlement.order_to.iter().enumerate() {
        let complete_key = settlement.completes_key() && n + 1 == moves;
        moved = Some(order::transition_paying(
            tx,
            &order_id,
            from,
            to,
            payment.take(),
            complete_key,
            now_ms,
        )?);
    }
    if settlement.completes_key() && moves == 0 {
        complete_key_of(tx, &order_id, now_ms)?;
    }
    match settlement.follow_up {
        Some(op) => {
            if settlement.orphan {
                tally.orphan_charge();
            }
            follow(tx, op)
        }
        None => Ok(Settled::Done(moved)),
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
                        Settled::Next(_, Some(stored)) => (Some(stored.clone()), None),
                        Settled::Next(next, None) => (load_attempt(tx, next)?, None),
                        Settled::Done(Some(order)) => (None, Some(order.clone())),
                        Settled::Done(None) => (None, order::load(tx, &order_id)?),
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
            Settled::Next(key, _) => {
                lookup_first = false;
                match followed {
                    Some(attempt) => Start::Known(attempt),
                    None => Start::Stored(key),
                }
            }
            Settled::Done(_) => return answered(order),
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
