//! `POST /orders/{id}/cancel` on PostgreSQL, idempotent:
//! - `reserved`: `cancelled` and the hold released, in one transaction;
//! - `confirmed`: `refunding` with the refund attempt stored, the refund
//!   sent with no transaction open, then `refunded` with the sold units
//!   back on sale (a refund left unanswered stays `refunding`);
//! - `refunding`: the stored refund is sent again (same key);
//! - `authorizing`: the cancel is recorded in `cancel_requests`; the
//!   authorization's answer then turns the capture into a void, or a
//!   capture already under way into a refund (`settle`);
//! - an order already ended is returned as it is.

use super::settle::{drive, insert_attempt};
use super::{order, pg_err, stock, PgBackend};
use crate::attempt::{attempt_key, Operation};
use crate::clock::UnixMs;
use crate::error::{CheckoutError, StoreError};
use crate::order::Order;
use crate::state::OrderState;

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
                        insert_attempt(
                            tx,
                            order_id,
                            Operation::Refund,
                            refunding.amount_cents,
                            None,
                            refunding.payment_id.as_deref(),
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

/// Sends the stored refund of a `refunding` order; its answer is settled
/// like any other (a refund left unanswered stays `refunding`, for the
/// payments reconciler).
fn refund(backend: &PgBackend, order_id: &str, now_ms: UnixMs) -> Result<Order, CheckoutError> {
    let current = backend.read(|client| order::load_existing(client, order_id))?;
    if current.state != OrderState::Refunding {
        return Ok(current);
    }
    if current.payment_id.is_none() {
        return Err(StoreError::Corrupt {
            table: "orders",
            detail: format!("order {order_id} is refunding without a payment id"),
        }
        .into());
    }
    drive(
        backend,
        attempt_key(order_id, Operation::Refund),
        false,
        now_ms,
    )?;
    Ok(backend.read(|client| order::load_existing(client, order_id))?)
}
