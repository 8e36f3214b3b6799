//! Provider events (webhooks and the provider's event list) applied to
//! the store: "the most advanced state wins", whatever the order of
//! arrival. An event moves the payment along its path (authorized →
//! captured → refunded, or → voided, or → declined) by settling each
//! attempt on the way (see [`crate::backend::sqlite::settle`]); an event the payment is
//! already at or past is stale; one that contradicts it is refused.

use rusqlite::{params, Transaction};

use crate::backend::sqlite::attempt::{self, Attempt, NewAttempt, Operation};
use crate::backend::sqlite::order::{self, Order};
use crate::backend::sqlite::settle::{orphan, settle, FollowUp};
use crate::clock::UnixMs;
use crate::core::event::{fit, EventType, Fit, WebhookEvent, WebhookOutcome};
use crate::core::state::PaymentState;
use crate::error::StoreError;
use crate::metrics::Metrics;
use crate::payment::OperationOutcome;

/// Applies one provider event (webhook or event list): "the most advanced
/// state wins". The event id is stored first; a duplicate changes nothing.
pub(crate) fn apply_event(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    event: &WebhookEvent,
    now_ms: UnixMs,
) -> Result<WebhookOutcome, StoreError> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO webhook_events (event_id, type, order_id, result, received_at_ms)
             VALUES (?1, ?2, ?3, 'processing', ?4) ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            event.id,
            event.event_type.as_str(),
            event.data.order_id,
            now_ms
        ])?;
    if inserted == 0 {
        return Ok(WebhookOutcome::Duplicate);
    }
    let outcome = advance(tx, metrics, event, now_ms)?;
    if outcome == WebhookOutcome::RejectedTransition {
        Metrics::inc(&metrics.illegal_transitions);
    }
    tx.prepare_cached("UPDATE webhook_events SET result = ?2 WHERE event_id = ?1")?
        .execute(params![event.id, outcome.result()])?;
    Ok(outcome)
}

fn advance(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    event: &WebhookEvent,
    now_ms: UnixMs,
) -> Result<WebhookOutcome, StoreError> {
    let data = &event.data;
    let order = order::load(tx, &data.order_id)?;
    if order
        .as_ref()
        .is_some_and(|o| o.amount_cents != data.amount_cents)
    {
        return Ok(WebhookOutcome::RejectedTransition);
    }
    let current = order
        .as_ref()
        .map_or(PaymentState::None, |o| o.payment_state);
    let pid = data.payment_id.as_str();
    let succeeded = OperationOutcome::Succeeded {
        payment_id: pid.to_owned(),
    };
    match fit(current, event.event_type) {
        Fit::Stale => return Ok(WebhookOutcome::Stale),
        Fit::Reject => return Ok(WebhookOutcome::RejectedTransition),
        Fit::Orphan(operation) => {
            let auth = ensure(tx, order.as_ref(), event, Operation::Authorize, now_ms)?;
            orphan(tx, metrics, &auth, operation, pid, now_ms, FollowUp::Due)?;
            return Ok(WebhookOutcome::Processed);
        }
        Fit::Advance => {}
    }
    if event.event_type == EventType::Declined {
        let auth = ensure(tx, order.as_ref(), event, Operation::Authorize, now_ms)?;
        let declined = OperationOutcome::Declined {
            reason: "payment.declined".into(),
        };
        settle(
            tx,
            metrics,
            &auth.idempotency_key,
            &declined,
            0,
            now_ms,
            FollowUp::Due,
        )?;
        return Ok(WebhookOutcome::Processed);
    }
    if matches!(current, PaymentState::None | PaymentState::Pending) {
        let auth = ensure(tx, order.as_ref(), event, Operation::Authorize, now_ms)?;
        settle(
            tx,
            metrics,
            &auth.idempotency_key,
            &succeeded,
            0,
            now_ms,
            FollowUp::Due,
        )?;
    }
    let captured_or_past = matches!(current, PaymentState::Captured | PaymentState::Refunded);
    if matches!(event.event_type, EventType::Captured | EventType::Refunded) && !captured_or_past {
        let capture = ensure(tx, order.as_ref(), event, Operation::Capture, now_ms)?;
        settle(
            tx,
            metrics,
            &capture.idempotency_key,
            &succeeded,
            0,
            now_ms,
            FollowUp::Due,
        )?;
    }
    let last = match event.event_type {
        EventType::Voided => Some(Operation::Void),
        EventType::Refunded => Some(Operation::Refund),
        _ => None,
    };
    if let Some(operation) = last {
        let undo = ensure(tx, order.as_ref(), event, operation, now_ms)?;
        settle(
            tx,
            metrics,
            &undo.idempotency_key,
            &succeeded,
            0,
            now_ms,
            FollowUp::Due,
        )?;
    }
    Ok(WebhookOutcome::Processed)
}

/// The order's attempt for `operation`, stored now if it never was (the
/// provider did it without our asking, or our row was never written).
fn ensure(
    tx: &Transaction<'_>,
    order: Option<&Order>,
    event: &WebhookEvent,
    operation: Operation,
    now_ms: UnixMs,
) -> Result<Attempt, StoreError> {
    let is_authorize = operation == Operation::Authorize;
    attempt::insert(
        tx,
        &NewAttempt {
            order_id: &event.data.order_id,
            operation,
            amount_cents: order.map_or(event.data.amount_cents, |o| o.amount_cents),
            payment_method: if is_authorize {
                order.map(|o| o.payment_method.as_str())
            } else {
                None
            },
            payment_id: if is_authorize {
                None
            } else {
                Some(event.data.payment_id.as_str())
            },
        },
        now_ms,
    )
}
