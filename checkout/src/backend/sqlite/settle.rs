//! The payment state machine in the embedded store: what a definite
//! outcome of an attempt does to the order, its stock and the next attempt
//! — one function, [`settle`], used alike by the checkout's own calls, the
//! reconciler's look-ups and provider events (`events::apply_event`). It
//! reads the facts, asks the shared decision
//! ([`crate::core::settle::decide`], where the rules are listed) and
//! applies the [`Settlement`] in SQL, with this store's bookkeeping: the
//! ledger the audit reads, the superseded attempt closed, a refused
//! compensation marked stuck.
//!
//! A second outcome for an attempt changes nothing, so every path may race.
//! A call whose answer comes second (a webhook got there first) adopts the
//! follow-up the first one stored for the reconciler and drives it itself
//! ([`adopt_follow_up`]).

use rusqlite::{params, OptionalExtension, Transaction};

use crate::backend::sqlite::attempt::{
    self, Attempt, AttemptOutcome, NewAttempt, Operation, Transport,
};
use crate::backend::sqlite::order;
use crate::backend::sqlite::stock;
use crate::clock::UnixMs;
pub(crate) use crate::core::settle::FollowUp;
use crate::core::settle::{
    decide, needs_cancel_flag, possible_follow_ups, Attempted, Compensation, OrderFacts, Settlement,
};
use crate::core::state::{OrderState, PaymentState};
use crate::core::stock::HoldMove;
use crate::error::StoreError;
use crate::limits::PAYMENT_IN_FLIGHT_MS;
use crate::metrics::Metrics;
use crate::payment::OperationOutcome;

/// What the caller should drive next: the key of the follow-up attempt.
pub(crate) type Next = Option<String>;

/// Applies a definite outcome to the attempt `key` and everything it
/// decides. Returns the follow-up attempt to drive, if any.
pub(crate) fn settle(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    key: &str,
    answer: &OperationOutcome,
    tries: u32,
    now_ms: UnixMs,
    follow: FollowUp,
) -> Result<Next, StoreError> {
    let Some(attempt) = attempt::load(tx, key)? else {
        return Err(StoreError::Corrupt {
            table: "payment_attempts",
            detail: format!("no attempt {key}"),
        });
    };
    let (outcome, payment_id, detail) = match answer {
        OperationOutcome::Succeeded { payment_id } => {
            (AttemptOutcome::Succeeded, Some(payment_id.as_str()), None)
        }
        OperationOutcome::Declined { reason } => {
            (AttemptOutcome::Declined, None, Some(reason.as_str()))
        }
        OperationOutcome::Failed { reason } => {
            (AttemptOutcome::Failed, None, Some(reason.as_str()))
        }
    };
    if !attempt::record_outcome(tx, key, outcome, payment_id, detail, tries, now_ms)? {
        return Ok(None);
    }
    // An event settled an attempt a call stored earlier and may still be
    // sending (never answered, never given up on, its in-flight bound not
    // run out): its follow-up is due when the attempt was, not at once
    // (the call adopts it when its answer comes; the reconciler would send
    // it meanwhile, a second time).
    let in_flight = attempt.created_at_ms < now_ms
        && attempt.tries == 0
        && attempt.transport == Transport::Pending
        && attempt.next_try_at_ms > now_ms;
    let follow = match follow {
        FollowUp::Due if in_flight => FollowUp::Until(attempt.next_try_at_ms),
        other => other,
    };
    // The payment this attempt is about, as now recorded.
    let payment_id = attempt
        .payment_id
        .clone()
        .or_else(|| payment_id.map(str::to_owned))
        .unwrap_or_default();
    let order = order::load(tx, &attempt.order_id)?;
    let facts = match &order {
        Some(o) => Some(OrderFacts {
            state: o.state,
            payment_state: o.payment_state,
            hold_held: o.state == OrderState::Authorizing
                && hold_state(tx, &o.order_id)? == Some("held".into()),
        }),
        None => None,
    };
    let attempted = Attempted {
        operation: attempt.operation,
        outcome,
    };
    let cancel =
        needs_cancel_flag(attempted, facts.as_ref()) && cancel_requested(tx, &attempt.order_id)?;
    let settlement = decide(attempted, facts.as_ref(), cancel);
    apply(
        tx,
        metrics,
        &attempt,
        attempted,
        &settlement,
        &payment_id,
        now_ms,
        follow,
    )
}

/// Applies a [`Settlement`] to the store, in its order: the ledger, the
/// counters, the superseded attempt, the payment, the hold, the order's
/// moves, the follow-up.
#[allow(clippy::too_many_arguments)]
fn apply(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    attempt: &Attempt,
    attempted: Attempted,
    settlement: &Settlement,
    payment_id: &str,
    now_ms: UnixMs,
    follow: FollowUp,
) -> Result<Next, StoreError> {
    let order_id = attempt.order_id.as_str();
    if attempted.outcome == AttemptOutcome::Succeeded {
        ledger(
            tx,
            attempt,
            attempted.operation.as_str(),
            payment_id,
            now_ms,
        )?;
    }
    match settlement.compensation {
        Some(Compensation::Done(operation)) => {
            metrics.count_compensation(operation.as_str(), "ok");
        }
        Some(Compensation::Refused(_)) => {
            let stored =
                attempt::load(tx, &attempt.idempotency_key)?.unwrap_or_else(|| attempt.clone());
            attempt::mark_stuck(tx, metrics, &stored)?;
        }
        None => {}
    }
    if let Some(operation) = settlement.supersede {
        let reason = match operation {
            Operation::Void => "payment was captured",
            _ => "payment was voided",
        };
        supersede(tx, order_id, operation, reason, now_ms)?;
    }
    if let Some(state) = settlement.payment_to {
        let id = matches!(state, PaymentState::Authorized | PaymentState::Captured)
            .then_some(payment_id);
        order::set_payment(tx, order_id, state, id, now_ms)?;
    }
    match settlement.hold {
        Some(HoldMove::Commit) => stock::commit_hold(tx, metrics, order_id, now_ms)?,
        Some(HoldMove::Release) => stock::release_hold(tx, metrics, order_id, now_ms)?,
        Some(HoldMove::Return) => stock::return_committed(tx, metrics, order_id, now_ms)?,
        None => false,
    };
    for &(from, to) in &settlement.order_to {
        order::transition(tx, metrics, order_id, from, to, now_ms)?;
    }
    match settlement.follow_up {
        Some(operation) if settlement.orphan => {
            orphan(tx, metrics, attempt, operation, payment_id, now_ms, follow)
        }
        Some(operation) => {
            let next = follow_up(tx, attempt, operation, payment_id, now_ms, follow)?;
            Ok(Some(next.idempotency_key))
        }
        None => Ok(None),
    }
}

/// The attempt `key` was settled by someone else (a provider event, which
/// may well arrive before the call's own answer) while this call waited on
/// the provider. That settle stored the follow-up due at once, for the
/// reconciler's next pass, as nobody was about to send it; this call is,
/// so it adopts the follow-up (see [`attempt::adopt`]) and returns its key
/// to drive. `None` when there is no such follow-up (the event went further
/// itself, or the reconciler has it already).
pub(crate) fn adopt_follow_up(
    tx: &Transaction<'_>,
    key: &str,
    now_ms: UnixMs,
) -> Result<Next, StoreError> {
    let Some(settled) = attempt::load(tx, key)? else {
        return Ok(None);
    };
    let attempted = Attempted {
        operation: settled.operation,
        outcome: settled.outcome,
    };
    for &operation in possible_follow_ups(attempted) {
        let next = attempt::attempt_key(&settled.order_id, operation);
        if attempt::adopt(tx, &next, now_ms)? {
            return Ok(Some(next));
        }
    }
    Ok(None)
}

/// Whether the shopper cancelled the order while its payment was in flight.
fn cancel_requested(tx: &Transaction<'_>, order_id: &str) -> Result<bool, StoreError> {
    Ok(tx
        .prepare_cached("SELECT 1 FROM cancel_requests WHERE order_id = ?1")?
        .query_row([order_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The hold's state (`held`, `committed`, …), if the order has one.
fn hold_state(tx: &Transaction<'_>, order_id: &str) -> Result<Option<String>, StoreError> {
    Ok(tx
        .prepare_cached("SELECT state FROM reservations WHERE order_id = ?1")?
        .query_row([order_id], |row| row.get(0))
        .optional()?)
}

/// Stores the next attempt on the same payment.
fn follow_up(
    tx: &Transaction<'_>,
    after: &Attempt,
    operation: Operation,
    payment_id: &str,
    now_ms: UnixMs,
    follow: FollowUp,
) -> Result<Attempt, StoreError> {
    let due_at_ms = match follow {
        FollowUp::Driven => now_ms.saturating_add(PAYMENT_IN_FLIGHT_MS),
        FollowUp::Due => now_ms,
        FollowUp::Until(due_at_ms) => due_at_ms.max(now_ms),
    };
    attempt::insert_due(
        tx,
        &NewAttempt {
            order_id: &after.order_id,
            operation,
            amount_cents: after.amount_cents,
            payment_method: None,
            payment_id: Some(payment_id),
        },
        now_ms,
        due_at_ms,
    )
}

/// Money with no live order: schedule its compensation, counted once per
/// order (the first compensation stored for it).
pub(crate) fn orphan(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    after: &Attempt,
    operation: Operation,
    payment_id: &str,
    now_ms: UnixMs,
    follow: FollowUp,
) -> Result<Next, StoreError> {
    let first = attempt::load_op(tx, &after.order_id, Operation::Void)?.is_none()
        && attempt::load_op(tx, &after.order_id, Operation::Refund)?.is_none();
    if first {
        Metrics::inc(&metrics.orphan_charges);
    }
    let next = follow_up(tx, after, operation, payment_id, now_ms, follow)?;
    Ok(Some(next.idempotency_key))
}

/// An unresolved attempt that can no longer succeed (a capture after a
/// void, a void after a capture) is closed as failed, not stuck.
fn supersede(
    tx: &Transaction<'_>,
    order_id: &str,
    operation: Operation,
    reason: &str,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    let key = attempt::attempt_key(order_id, operation);
    attempt::record_outcome(
        tx,
        &key,
        AttemptOutcome::Failed,
        None,
        Some(reason),
        0,
        now_ms,
    )?;
    Ok(())
}

/// Appends to the ledger the audit reads (one capture per order).
fn ledger(
    tx: &Transaction<'_>,
    attempt: &Attempt,
    op: &str,
    payment_id: &str,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO payment_ops (order_id, op, payment_id, amount_cents, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        attempt.order_id,
        op,
        payment_id,
        i64::try_from(attempt.amount_cents).unwrap_or(i64::MAX),
        now_ms
    ])?;
    Ok(())
}
