//! Provider events (webhooks and the provider's event list) on PostgreSQL:
//! the same decision as the embedded store ([`crate::core::event::fit`]:
//! "the most advanced state wins", stale events change nothing,
//! contradicting ones are refused), each step applied by
//! [`super::settle::settle`]. The event id is stored in `webhook_events`
//! in the same transaction as everything it changes, so a duplicate —
//! from another gateway of the fleet too — changes nothing; the ids are
//! pruned after [`crate::limits::WEBHOOK_EVENT_RETENTION_MS`].
//!
//! A follow-up an event stores (a capture after an authorization, a
//! compensation) is due for the payments reconciler's next pass at once,
//! as in the embedded store: no call is about to send it.
//!
//! An event about an order this database does not hold is money with no
//! order, as in the embedded store: its compensation (a void, or a
//! refund of a capture) is stored and due at once, and the event is
//! `processed` (logged as an error).

use super::conn::{Db, Tx};
use super::settle::{insert_attempt, make_due, settle, FollowUp};
use super::tally::Tally;
use super::{order, pg_err};
use crate::clock::UnixMs;
use crate::core::attempt::Operation;
use crate::core::event::{fit, Fit};
use crate::core::event::{EventType, WebhookEvent, WebhookOutcome};
use crate::core::order::Order;
use crate::core::state::PaymentState;
use crate::error::StoreError;
use crate::payment::OperationOutcome;

/// Applies one verified event in the caller's transaction.
pub(super) fn apply_event(
    tx: &mut Tx<'_>,
    tally: &mut Tally,
    event: &WebhookEvent,
    now_ms: UnixMs,
) -> Result<WebhookOutcome, StoreError> {
    let inserted = tx
        .execute(
            "INSERT INTO webhook_events (event_id, type, order_id, result, received_at_ms)
             VALUES ($1, $2, $3, 'processing', $4) ON CONFLICT DO NOTHING",
            &[
                &event.id,
                &event.event_type.as_str(),
                &event.data.order_id,
                &now_ms,
            ],
        )
        .map_err(pg_err)?;
    if inserted == 0 {
        return Ok(WebhookOutcome::Duplicate);
    }
    let outcome = advance(tx, tally, event, now_ms)?;
    if outcome == WebhookOutcome::RejectedTransition {
        tally.illegal_transition();
    }
    tx.execute(
        "UPDATE webhook_events SET result = $2 WHERE event_id = $1",
        &[&event.id, &outcome.result()],
    )
    .map_err(pg_err)?;
    Ok(outcome)
}

fn advance(
    tx: &mut Tx<'_>,
    tally: &mut Tally,
    event: &WebhookEvent,
    now_ms: UnixMs,
) -> Result<WebhookOutcome, StoreError> {
    let data = &event.data;
    let order = order::load_for_update(tx, &data.order_id)?;
    if order
        .as_ref()
        .is_some_and(|o| o.amount_cents != data.amount_cents)
    {
        return Ok(WebhookOutcome::RejectedTransition);
    }
    if order.is_none() {
        // Logged by the tally once committed, not on each run.
        tally.unknown_order(&data.order_id, &event.id);
    }
    let order = order.as_ref();
    let current = order.map_or(PaymentState::None, |o| o.payment_state);
    let pid = data.payment_id.as_str();
    let succeeded = OperationOutcome::Succeeded {
        payment_id: pid.to_owned(),
    };
    match fit(current, event.event_type) {
        Fit::Stale => return Ok(WebhookOutcome::Stale),
        Fit::Reject => return Ok(WebhookOutcome::RejectedTransition),
        Fit::Orphan(operation) => {
            // Money for an order whose payment was declined: give it back.
            tally.orphan_charge();
            let compensation = ensure(tx, order, event, operation, pid, now_ms)?;
            make_due(tx, &compensation, now_ms)?;
            return Ok(WebhookOutcome::Processed);
        }
        Fit::Advance => {}
    }
    if event.event_type == EventType::Declined {
        let auth = ensure(tx, order, event, Operation::Authorize, pid, now_ms)?;
        let declined = OperationOutcome::Declined {
            reason: "payment.declined".into(),
        };
        settle(tx, tally, &auth, &declined, FollowUp::Due, now_ms)?;
        return Ok(WebhookOutcome::Processed);
    }
    if matches!(current, PaymentState::None | PaymentState::Pending) {
        let auth = ensure(tx, order, event, Operation::Authorize, pid, now_ms)?;
        settle(tx, tally, &auth, &succeeded, FollowUp::Due, now_ms)?;
    }
    let captured_or_past = matches!(current, PaymentState::Captured | PaymentState::Refunded);
    if matches!(event.event_type, EventType::Captured | EventType::Refunded) && !captured_or_past {
        let capture = ensure(tx, order, event, Operation::Capture, pid, now_ms)?;
        settle(tx, tally, &capture, &succeeded, FollowUp::Due, now_ms)?;
    }
    let last = match event.event_type {
        EventType::Voided => Some(Operation::Void),
        EventType::Refunded => Some(Operation::Refund),
        _ => None,
    };
    if let Some(operation) = last {
        let undo = ensure(tx, order, event, operation, pid, now_ms)?;
        settle(tx, tally, &undo, &succeeded, FollowUp::Due, now_ms)?;
    }
    Ok(WebhookOutcome::Processed)
}

/// The order's attempt for `operation`, stored now if it never was (the
/// provider did it without our asking, or our row was never written).
fn ensure(
    tx: &mut Tx<'_>,
    order: Option<&Order>,
    event: &WebhookEvent,
    operation: Operation,
    payment_id: &str,
    now_ms: UnixMs,
) -> Result<String, StoreError> {
    let is_authorize = operation == Operation::Authorize;
    insert_attempt(
        tx,
        &event.data.order_id,
        operation,
        order.map_or(event.data.amount_cents, |o| o.amount_cents),
        order
            .filter(|_| is_authorize)
            .map(|o| o.payment_method.as_str()),
        (!is_authorize).then_some(payment_id),
        now_ms,
    )
}
