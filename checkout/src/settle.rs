//! The payment state machine in the store: what a definite outcome of an
//! attempt does to the order, its stock and the next attempt — one function,
//! [`settle`], used alike by the checkout's own calls, the reconciler's
//! look-ups and provider events (`events::apply_event`).
//!
//! - authorize succeeded: a live order (still `authorizing`, its hold still
//!   held) gets a capture attempt; anything else is money with no live
//!   order, so it gets a void (an orphan, counted);
//! - authorize declined or failed: `declined`, hold released;
//! - capture succeeded: hold committed, `confirmed` (or, with no live
//!   order, a refund);
//! - capture failed: a void (compensation);
//! - void / refund succeeded: `voided` (hold released) / `refunded` (units
//!   back on sale);
//! - void / refund failed: stuck, counted; an operator looks;
//! - a cancel asked for while the payment was in flight turns the
//!   authorization's follow-up into a void, and a capture into a refund.
//!
//! A second outcome for an attempt changes nothing, so every path may race.
//! A call whose answer comes second (a webhook got there first) adopts the
//! follow-up the first one stored for the reconciler and drives it itself
//! ([`adopt_follow_up`]).

use rusqlite::{params, OptionalExtension, Transaction};

use crate::attempt::{self, Attempt, AttemptOutcome, NewAttempt, Operation, Transport};
use crate::clock::UnixMs;
use crate::error::StoreError;
use crate::limits::PAYMENT_IN_FLIGHT_MS;
use crate::metrics::Metrics;
use crate::order;
use crate::payment::OperationOutcome;
use crate::state::{OrderState, PaymentState};
use crate::stock;

/// What the caller should drive next: the key of the follow-up attempt.
pub(crate) type Next = Option<String>;

/// When a follow-up attempt is due for the reconciler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FollowUp {
    /// The caller drives it now; the reconciler waits out the in-flight
    /// bound.
    Driven,
    /// Nobody stored it to send it (a provider event): due at once, or
    /// when the attempt it follows was due if a call stored that one
    /// before and may still be waiting for its answer (the call adopts
    /// the follow-up when the answer comes; see [`settle`]).
    Due,
    /// Due at this time (a [`FollowUp::Due`] inheriting its attempt's).
    Until(UnixMs),
}

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
    let live = match &order {
        Some(o) => {
            o.state == OrderState::Authorizing
                && hold_state(tx, &o.order_id)? == Some("held".into())
        }
        None => false,
    };
    match (attempt.operation, outcome) {
        (Operation::Authorize, AttemptOutcome::Succeeded) => {
            ledger(tx, &attempt, "authorize", &payment_id, now_ms)?;
            if let Some(o) = &order {
                if matches!(o.payment_state, PaymentState::None | PaymentState::Pending) {
                    order::set_payment(
                        tx,
                        &o.order_id,
                        PaymentState::Authorized,
                        Some(&payment_id),
                        now_ms,
                    )?;
                }
            }
            if live {
                // A cancel asked for while we waited turns the capture
                // into a void.
                let operation = if cancel_requested(tx, &attempt.order_id)? {
                    Operation::Void
                } else {
                    Operation::Capture
                };
                let next = follow_up(tx, &attempt, operation, &payment_id, now_ms, follow)?;
                return Ok(Some(next.idempotency_key));
            }
            orphan(
                tx,
                metrics,
                &attempt,
                Operation::Void,
                &payment_id,
                now_ms,
                follow,
            )
        }
        (Operation::Authorize, _) => {
            if let Some(o) = order.filter(|o| o.state == OrderState::Authorizing) {
                order::set_payment(tx, &o.order_id, PaymentState::Declined, None, now_ms)?;
                stock::release_hold(tx, metrics, &o.order_id, now_ms)?;
                order::transition(
                    tx,
                    metrics,
                    &o.order_id,
                    OrderState::Authorizing,
                    OrderState::Declined,
                    now_ms,
                )?;
            }
            Ok(None)
        }
        (Operation::Capture, AttemptOutcome::Succeeded) => {
            ledger(tx, &attempt, "capture", &payment_id, now_ms)?;
            supersede(
                tx,
                &attempt.order_id,
                Operation::Void,
                "payment was captured",
                now_ms,
            )?;
            if let Some(o) = &order {
                order::set_payment(
                    tx,
                    &o.order_id,
                    PaymentState::Captured,
                    Some(&payment_id),
                    now_ms,
                )?;
            }
            match order.filter(|_| live) {
                Some(o) => {
                    stock::commit_hold(tx, metrics, &o.order_id, now_ms)?;
                    order::transition(
                        tx,
                        metrics,
                        &o.order_id,
                        OrderState::Authorizing,
                        OrderState::Confirmed,
                        now_ms,
                    )?;
                    if !cancel_requested(tx, &o.order_id)? {
                        return Ok(None);
                    }
                    // Captured after the shopper cancelled: refund it.
                    let (from, to) = (OrderState::Confirmed, OrderState::Refunding);
                    order::transition(tx, metrics, &o.order_id, from, to, now_ms)?;
                    let op = Operation::Refund;
                    let next = follow_up(tx, &attempt, op, &payment_id, now_ms, follow)?;
                    Ok(Some(next.idempotency_key))
                }
                None => orphan(
                    tx,
                    metrics,
                    &attempt,
                    Operation::Refund,
                    &payment_id,
                    now_ms,
                    follow,
                ),
            }
        }
        (Operation::Capture, _) => {
            // Authorized, not captured: give the money back.
            let next = follow_up(tx, &attempt, Operation::Void, &payment_id, now_ms, follow)?;
            Ok(Some(next.idempotency_key))
        }
        (Operation::Void, AttemptOutcome::Succeeded) => {
            ledger(tx, &attempt, "void", &payment_id, now_ms)?;
            metrics.count_compensation("void", "ok");
            supersede(
                tx,
                &attempt.order_id,
                Operation::Capture,
                "payment was voided",
                now_ms,
            )?;
            if let Some(o) = order {
                order::set_payment(tx, &o.order_id, PaymentState::Voided, None, now_ms)?;
                if o.state == OrderState::Authorizing {
                    stock::release_hold(tx, metrics, &o.order_id, now_ms)?;
                    order::transition(
                        tx,
                        metrics,
                        &o.order_id,
                        OrderState::Authorizing,
                        OrderState::Voided,
                        now_ms,
                    )?;
                }
            }
            Ok(None)
        }
        (Operation::Refund, AttemptOutcome::Succeeded) => {
            ledger(tx, &attempt, "refund", &payment_id, now_ms)?;
            metrics.count_compensation("refund", "ok");
            if let Some(o) = order {
                order::set_payment(tx, &o.order_id, PaymentState::Refunded, None, now_ms)?;
                if o.state == OrderState::Confirmed {
                    order::transition(
                        tx,
                        metrics,
                        &o.order_id,
                        OrderState::Confirmed,
                        OrderState::Refunding,
                        now_ms,
                    )?;
                }
                if matches!(o.state, OrderState::Confirmed | OrderState::Refunding) {
                    stock::return_committed(tx, metrics, &o.order_id, now_ms)?;
                    order::transition(
                        tx,
                        metrics,
                        &o.order_id,
                        OrderState::Refunding,
                        OrderState::Refunded,
                        now_ms,
                    )?;
                }
            }
            Ok(None)
        }
        (Operation::Void | Operation::Refund, _) => {
            let stored = attempt::load(tx, key)?.unwrap_or(attempt);
            attempt::mark_stuck(tx, metrics, &stored)?;
            Ok(None)
        }
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
    // What `settle` stores after each outcome (see the table at the top).
    let follow_ups: &[Operation] = match (settled.operation, settled.outcome) {
        (Operation::Authorize, AttemptOutcome::Succeeded) => &[Operation::Capture, Operation::Void],
        (Operation::Capture, AttemptOutcome::Succeeded) => &[Operation::Refund],
        (Operation::Capture, AttemptOutcome::Declined | AttemptOutcome::Failed) => {
            &[Operation::Void]
        }
        _ => &[],
    };
    for &operation in follow_ups {
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
