//! `POST /orders/{id}/cancel` on PostgreSQL, idempotent:
//! - `reserved`: `cancelled` and the hold released, in one transaction;
//! - `confirmed`: `refunding` with the refund attempt stored, the refund
//!   sent with no transaction open, then `refunded` with the sold units
//!   back on sale (a refund left unanswered stays `refunding`);
//! - `refunding`: the stored refund is sent again (same key);
//! - `authorizing`: the cancel is recorded in `cancel_requests` (nothing
//!   on PostgreSQL acts on it yet: there is no payments reconciler here);
//! - an order already ended is returned as it is.

use super::checkout::{insert_attempt, record_attempt, resolve, Answer};
use super::{order, pg_err, stock, PgBackend};
use crate::attempt::{attempt_key, Operation};
use crate::clock::UnixMs;
use crate::error::{CheckoutError, StoreError};
use crate::order::Order;
use crate::state::{OrderState, PaymentState};

pub(super) fn cancel(
    backend: &PgBackend,
    subject: &str,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let current = match backend.read(|client| order::load(client, order_id))? {
        Some(found) if found.subject == subject => found,
        _ => return Err(CheckoutError::NotFound),
    };
    match current.state {
        OrderState::Reserved => {
            let cancelled = backend.write(|tx| {
                let (from, to) = (OrderState::Reserved, OrderState::Cancelled);
                match order::transition(tx, order_id, from, to, now_ms) {
                    Ok(done) => {
                        stock::move_hold(tx, order_id, stock::HoldMove::Release, now_ms)?;
                        Ok(Some(done))
                    }
                    // Lost a race (paid or expired meanwhile): show that.
                    Err(StoreError::IllegalTransition { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })?;
            match cancelled {
                Some(done) => Ok(done),
                None => Ok(backend.read(|client| order::load_existing(client, order_id))?),
            }
        }
        OrderState::Confirmed => {
            let started = backend.write(|tx| {
                let (from, to) = (OrderState::Confirmed, OrderState::Refunding);
                match order::transition(tx, order_id, from, to, now_ms) {
                    Ok(refunding) => {
                        let payment_id = refunding.payment_id.clone();
                        insert_attempt(
                            tx,
                            &refunding,
                            Operation::Refund,
                            payment_id.as_deref(),
                            now_ms,
                        )?;
                        Ok(())
                    }
                    // A concurrent cancel got there first.
                    Err(StoreError::IllegalTransition { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            });
            started?;
            refund(backend, order_id, now_ms)
        }
        OrderState::Refunding => refund(backend, order_id, now_ms),
        OrderState::Authorizing => {
            backend.write(|tx| {
                tx.execute(
                    "INSERT INTO cancel_requests (order_id, requested_at_ms) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&order_id, &now_ms],
                )
                .map_err(pg_err)
            })?;
            Ok(current)
        }
        _ => Ok(current),
    }
}

/// Sends the stored refund of a `refunding` order and records its answer.
fn refund(backend: &PgBackend, order_id: &str, now_ms: UnixMs) -> Result<Order, CheckoutError> {
    let current = backend.read(|client| order::load_existing(client, order_id))?;
    if current.state != OrderState::Refunding {
        return Ok(current);
    }
    let Some(payment_id) = current.payment_id.clone() else {
        return Err(StoreError::Corrupt {
            table: "orders",
            detail: format!("order {order_id} is refunding without a payment id"),
        }
        .into());
    };
    let provider = backend.provider();
    let key = attempt_key(order_id, Operation::Refund);
    let answer = resolve(provider, &key, || {
        provider
            .refund(&key, &payment_id, current.amount_cents)
            .map(|()| Answer::Succeeded(payment_id.clone()))
    });
    match answer {
        Answer::Succeeded(_) => Ok(backend.write(|tx| {
            record_attempt(tx, &key, "succeeded", None, now_ms)?;
            order::set_payment(tx, order_id, PaymentState::Refunded, None, now_ms)?;
            let (from, to) = (OrderState::Refunding, OrderState::Refunded);
            let refunded = order::transition(tx, order_id, from, to, now_ms)?;
            stock::move_hold(tx, order_id, stock::HoldMove::Return, now_ms)?;
            Ok::<_, StoreError>(refunded)
        })?),
        Answer::Refused(reason) => {
            tracing::warn!(order = %order_id, %reason, "refund refused; the order stays refunding");
            backend.write(|tx| record_attempt(tx, &key, "failed", None, now_ms))?;
            Ok(current)
        }
        Answer::Unknown => Ok(current),
    }
}
