//! The idempotent checkout on PostgreSQL, in as few durable waits as it
//! needs, with no transaction open while the provider is called:
//!
//! 1. claim the key, count the subject's orders, take the units
//!    (conditional UPDATE on one partition), create the order, and — for a
//!    full checkout — move it to `authorizing` with its authorize attempt
//!    stored; sold out, the order is `rejected` and the key completed;
//! 2. the authorization's answer: a capture attempt stored (authorized),
//!    or `declined` with the hold released and the key completed;
//! 3. the capture's answer: hold committed, `confirmed`, key completed
//!    (a refused capture: voided, released, completed).
//!
//! An answer that stays ambiguous after [`SEND_TRIES_MAX`] sends (each
//! preceded by a look-up with the same key) writes nothing: the order stays
//! `authorizing` with its attempt stored, the key stays locked until
//! [`IDEMPOTENCY_LOCK_STALE_MS`], and a retry replays the order.

use postgres::Transaction;

use super::{order, pg_err, stock, PgBackend};
use crate::attempt::{attempt_key, Operation};
use crate::clock::UnixMs;
use crate::error::{CheckoutError, StoreError};
use crate::idempotency::IdempotencyKey;
use crate::limits::IDEMPOTENCY_LOCK_STALE_MS;
use crate::order::Order;
use crate::payment::{AuthorizeOutcome, OperationOutcome, PaymentError, PaymentProvider};
use crate::service::{new_order, validate_subject, CheckoutRequest, Created, OrderLimits};
use crate::state::{OrderState, PaymentState};
use crate::store::validate_sku;

/// Sends of one provider operation within a checkout, at most.
pub const SEND_TRIES_MAX: u32 = 3;

/// What the stored key row says a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimDecision {
    /// Own the key (its owner died before creating the order): take it over.
    TakeOver,
    /// The key names an order that is done or abandoned: show it.
    Replay(String),
}

/// The decision on a key that is already stored, as a plain function.
pub(crate) fn decide_claim(
    stored_hash: &str,
    hash: &str,
    order_id: Option<String>,
    locked_at_ms: UnixMs,
    completed: bool,
    now_ms: UnixMs,
) -> Result<ClaimDecision, CheckoutError> {
    if stored_hash != hash {
        return Err(CheckoutError::Mismatch);
    }
    let abandoned = now_ms.saturating_sub(locked_at_ms) >= IDEMPOTENCY_LOCK_STALE_MS;
    match (order_id, completed || abandoned) {
        (Some(order_id), true) => Ok(ClaimDecision::Replay(order_id)),
        (None, true) => Ok(ClaimDecision::TakeOver),
        (_, false) => Err(CheckoutError::Conflict),
    }
}

/// What step 1 left to do.
enum Begun {
    Replay(String),
    Done(Order),
    Pay(Order),
}

pub(super) fn checkout(
    backend: &PgBackend,
    subject: &str,
    key: &IdempotencyKey,
    request: &CheckoutRequest,
    limits: OrderLimits,
    start_payment: bool,
    now_ms: UnixMs,
) -> Result<(Order, Created), CheckoutError> {
    validate_subject(subject)?;
    request.validate()?;
    validate_sku(&request.sku)?;
    let begun = backend
        .write(|tx| claim_and_create(tx, subject, key, request, limits, start_payment, now_ms))?;
    let order = match begun {
        Begun::Replay(order_id) => {
            let order = backend.read(|client| order::load_existing(client, &order_id))?;
            return Ok((order, Created::Replay));
        }
        Begun::Done(order) => return Ok((order, Created::Created)),
        Begun::Pay(order) => order,
    };
    let order = pay(backend, order, subject, key, now_ms)?;
    Ok((order, Created::Created))
}

/// Step 1, in the caller's transaction.
fn claim_and_create(
    tx: &mut Transaction<'_>,
    subject: &str,
    key: &IdempotencyKey,
    request: &CheckoutRequest,
    limits: OrderLimits,
    start_payment: bool,
    now_ms: UnixMs,
) -> Result<Begun, CheckoutError> {
    let terms = tx
        .query_opt(
            "SELECT price_cents, reservation_ttl_ms FROM products WHERE sku = $1",
            &[&request.sku],
        )
        .map_err(pg_err)?
        .ok_or_else(|| StoreError::UnknownSku(request.sku.clone()))?;
    let (price_cents, ttl_ms): (i64, i64) = (terms.get(0), terms.get(1));
    let hash = request.hash();
    let inserted = tx
        .execute(
            "INSERT INTO idempotency (subject, key, request_hash, created_at_ms, locked_at_ms)
             VALUES ($1, $2, $3, $4, $4) ON CONFLICT (subject, key) DO NOTHING",
            &[&subject, &key.as_str(), &hash, &now_ms],
        )
        .map_err(pg_err)?;
    if inserted == 0 {
        // Locks the row: a racing takeover of an abandoned key waits here.
        let row = tx
            .query_one(
                "SELECT request_hash, order_id, locked_at_ms, completed_at_ms IS NOT NULL
                 FROM idempotency WHERE subject = $1 AND key = $2 FOR UPDATE",
                &[&subject, &key.as_str()],
            )
            .map_err(pg_err)?;
        let stored_hash: String = row.get(0);
        match decide_claim(
            &stored_hash,
            &hash,
            row.get(1),
            row.get(2),
            row.get(3),
            now_ms,
        )? {
            ClaimDecision::Replay(order_id) => return Ok(Begun::Replay(order_id)),
            ClaimDecision::TakeOver => {
                tx.execute(
                    "UPDATE idempotency SET locked_at_ms = $3 WHERE subject = $1 AND key = $2",
                    &[&subject, &key.as_str(), &now_ms],
                )
                .map_err(pg_err)?;
            }
        }
    }
    let (started, _) = order::subject_orders(tx, subject)?;
    if started >= limits.orders_per_subject_max {
        // The whole transaction rolls back: the key is not burnt.
        return Err(CheckoutError::PurchaseLimit);
    }
    let order_id = format!("ord_{}", uuid::Uuid::new_v4().simple());
    let units = i64::from(request.quantity);
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    let part = stock::take(tx, &request.sku, units, &order_id, now_ms)?;
    let held_until = part.map(|_| expires_at_ms);
    let mut created = new_order(
        order_id.clone(),
        subject,
        request,
        price_cents,
        held_until,
        now_ms,
    );
    order::insert(tx, &created)?;
    if let Some(part) = part {
        tx.execute(
            "INSERT INTO reservations (order_id, sku, part, quantity, state, created_at_ms, expires_at_ms)
             VALUES ($1, $2, $3, $4, 'held', $5, $6)",
            &[&order_id, &request.sku, &part, &units, &now_ms, &expires_at_ms],
        )
        .map_err(pg_err)?;
    }
    tx.execute(
        "UPDATE idempotency SET order_id = $3 WHERE subject = $1 AND key = $2",
        &[&subject, &key.as_str(), &order_id],
    )
    .map_err(pg_err)?;
    if !start_payment {
        return Ok(Begun::Done(created));
    }
    if created.state != OrderState::Reserved {
        complete_key(tx, subject, key, now_ms)?;
        return Ok(Begun::Done(created));
    }
    order::set_payment(tx, &order_id, PaymentState::Pending, None, now_ms)?;
    created = order::transition(
        tx,
        &order_id,
        OrderState::Reserved,
        OrderState::Authorizing,
        now_ms,
    )?;
    insert_attempt(tx, &created, Operation::Authorize, None, now_ms)?;
    Ok(Begun::Pay(created))
}

fn complete_key(
    tx: &mut Transaction<'_>,
    subject: &str,
    key: &IdempotencyKey,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE idempotency SET completed_at_ms = $3 WHERE subject = $1 AND key = $2",
        &[&subject, &key.as_str(), &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// Stores an attempt before it is sent; returns its key.
pub(super) fn insert_attempt(
    tx: &mut Transaction<'_>,
    order: &Order,
    operation: Operation,
    payment_id: Option<&str>,
    now_ms: UnixMs,
) -> Result<String, StoreError> {
    let key = attempt_key(&order.order_id, operation);
    let method = (operation == Operation::Authorize).then_some(order.payment_method.as_str());
    let amount = i64::try_from(order.amount_cents).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO payment_attempts (idempotency_key, order_id, operation, amount_cents,
             payment_method, payment_id, outcome, created_at_ms, updated_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7)
         ON CONFLICT (idempotency_key) DO NOTHING",
        &[
            &key,
            &order.order_id,
            &operation.as_str(),
            &amount,
            &method,
            &payment_id,
            &now_ms,
        ],
    )
    .map_err(pg_err)?;
    Ok(key)
}

pub(super) fn record_attempt(
    tx: &mut Transaction<'_>,
    key: &str,
    outcome: &str,
    payment_id: Option<&str>,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE payment_attempts SET outcome = $2, payment_id = COALESCE($3, payment_id),
                updated_at_ms = $4 WHERE idempotency_key = $1",
        &[&key, &outcome, &payment_id, &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// A provider operation's answer once ambiguity is resolved (or not).
pub(super) enum Answer {
    Succeeded(String),
    Refused(String),
    Unknown,
}

/// Sends `send` with one key: an ambiguous answer is looked up first, then
/// sent again with the same key, at most [`SEND_TRIES_MAX`] times.
pub(super) fn resolve(
    provider: &dyn PaymentProvider,
    key: &str,
    mut send: impl FnMut() -> Result<Answer, PaymentError>,
) -> Answer {
    for _ in 0..SEND_TRIES_MAX {
        match send() {
            Ok(answer) => return answer,
            Err(PaymentError::Refused(reason)) => return Answer::Refused(reason),
            Err(PaymentError::Ambiguous) => {}
        }
        match provider.lookup(key) {
            Ok(Some(OperationOutcome::Succeeded { payment_id })) => {
                return Answer::Succeeded(payment_id)
            }
            Ok(Some(OperationOutcome::Declined { reason }))
            | Ok(Some(OperationOutcome::Failed { reason })) => return Answer::Refused(reason),
            // Never received, or the look-up failed too: send again.
            Ok(None) | Err(_) => {}
        }
    }
    Answer::Unknown
}

/// Steps 2 and 3.
fn pay(
    backend: &PgBackend,
    order: Order,
    subject: &str,
    key: &IdempotencyKey,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let provider = backend.provider();
    let id = order.order_id.clone();
    let auth_key = attempt_key(&id, Operation::Authorize);
    let answer = resolve(provider, &auth_key, || {
        provider
            .authorize(&auth_key, &id, order.amount_cents, &order.payment_method)
            .map(|outcome| match outcome {
                AuthorizeOutcome::Authorized { payment_id } => Answer::Succeeded(payment_id),
                AuthorizeOutcome::Declined { reason } => Answer::Refused(reason),
            })
    });
    let payment_id = match answer {
        Answer::Unknown => return Ok(order),
        Answer::Refused(reason) => {
            tracing::debug!(order = %id, %reason, "authorization declined");
            return Ok(backend.write(|tx| {
                record_attempt(tx, &auth_key, "declined", None, now_ms)?;
                order::set_payment(tx, &id, PaymentState::Declined, None, now_ms)?;
                let (from, to) = (OrderState::Authorizing, OrderState::Declined);
                let declined = order::transition(tx, &id, from, to, now_ms)?;
                stock::move_hold(tx, &id, stock::HoldMove::Release, now_ms)?;
                complete_key(tx, subject, key, now_ms)?;
                Ok::<_, StoreError>(declined)
            })?);
        }
        Answer::Succeeded(payment_id) => payment_id,
    };
    let capture_key = backend.write(|tx| {
        record_attempt(tx, &auth_key, "succeeded", Some(&payment_id), now_ms)?;
        order::set_payment(tx, &id, PaymentState::Authorized, Some(&payment_id), now_ms)?;
        insert_attempt(tx, &order, Operation::Capture, Some(&payment_id), now_ms)
    })?;
    let answer = resolve(provider, &capture_key, || {
        provider
            .capture(&capture_key, &payment_id, order.amount_cents)
            .map(|()| Answer::Succeeded(payment_id.clone()))
    });
    match answer {
        Answer::Unknown => Ok(backend.read(|client| order::load_existing(client, &id))?),
        Answer::Succeeded(_) => Ok(backend.write(|tx| {
            record_attempt(tx, &capture_key, "succeeded", None, now_ms)?;
            stock::move_hold(tx, &id, stock::HoldMove::Commit, now_ms)?;
            order::set_payment(tx, &id, PaymentState::Captured, None, now_ms)?;
            let (from, to) = (OrderState::Authorizing, OrderState::Confirmed);
            let confirmed = order::transition(tx, &id, from, to, now_ms)?;
            complete_key(tx, subject, key, now_ms)?;
            Ok::<_, StoreError>(confirmed)
        })?),
        Answer::Refused(reason) => {
            tracing::warn!(order = %id, %reason, "capture refused; voiding");
            // The money is only held: give it back, then the units.
            let void_key = attempt_key(&id, Operation::Void);
            let _ = provider.void(&void_key, &payment_id, order.amount_cents);
            Ok(backend.write(|tx| {
                record_attempt(tx, &capture_key, "failed", None, now_ms)?;
                order::set_payment(tx, &id, PaymentState::Voided, None, now_ms)?;
                let (from, to) = (OrderState::Authorizing, OrderState::Voided);
                let voided = order::transition(tx, &id, from, to, now_ms)?;
                stock::move_hold(tx, &id, stock::HoldMove::Release, now_ms)?;
                complete_key(tx, subject, key, now_ms)?;
                Ok::<_, StoreError>(voided)
            })?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_key_replays_conflicts_or_is_taken_over() {
        let t = 1_000_000;
        let fresh = t - 1;
        let stale = t - IDEMPOTENCY_LOCK_STALE_MS;
        assert!(matches!(
            decide_claim("h", "other", None, fresh, false, t),
            Err(CheckoutError::Mismatch)
        ));
        assert!(matches!(
            decide_claim("h", "h", Some("o".into()), fresh, false, t),
            Err(CheckoutError::Conflict)
        ));
        assert_eq!(
            decide_claim("h", "h", Some("o".into()), fresh, true, t).unwrap(),
            ClaimDecision::Replay("o".into())
        );
        assert_eq!(
            decide_claim("h", "h", None, stale, false, t).unwrap(),
            ClaimDecision::TakeOver
        );
    }
}
