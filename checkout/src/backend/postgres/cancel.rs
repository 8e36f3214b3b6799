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
//!
//! The decision is made in one transaction with the order row locked
//! (`FOR UPDATE`, as every settlement does first), so it is made on the
//! state at the commit, never on a read a settlement has since changed.
//! Each store step runs on the caller's [`Blocking`]; the refund's
//! provider calls are awaited between them.

use super::conn::Db;
use super::settle::{drive_on, insert_attempt};
use super::{order, pg_err, stock, PgBackend};
use crate::blocking::{step, Blocking};
use crate::clock::UnixMs;
use crate::core::attempt::{attempt_key, Operation};
use crate::core::order::Order;
use crate::core::state::OrderState;
use crate::error::{CheckoutError, StoreError};

/// What the cancel's transaction left to do.
enum Next {
    /// Answer with this order (its state at the commit).
    Show(Order),
    /// Send the stored refund.
    Refund,
}

pub(super) async fn cancel_on(
    backend: &PgBackend,
    steps: &dyn Blocking,
    subject: &str,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let (b, s, id) = (backend.clone(), subject.to_owned(), order_id.to_owned());
    match step(steps, move || decide(&b, &s, &id, now_ms)).await?? {
        Next::Show(order) => Ok(order),
        Next::Refund => refund_on(backend, steps, order_id, now_ms).await,
    }
}

/// The cancel's transaction.
fn decide(
    backend: &PgBackend,
    subject: &str,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Next, CheckoutError> {
    // One transaction with the order locked: a settlement committing
    // meanwhile is waited for and its state is the one decided on, so a
    // cancel is never recorded against an order already past it.
    backend.write(|tx| {
        let current = match order::load_for_update(tx, order_id)? {
            Some(found) if found.subject == subject => found,
            _ => return Err(CheckoutError::NotFound),
        };
        match current.state {
            OrderState::Reserved => {
                let (from, to) = (OrderState::Reserved, OrderState::Cancelled);
                let done = order::transition(tx, order_id, from, to, now_ms)?;
                stock::move_hold(tx, order_id, stock::HoldMove::Release, now_ms)?;
                Ok(Next::Show(done))
            }
            OrderState::Confirmed => {
                let (from, to) = (OrderState::Confirmed, OrderState::Refunding);
                let refunding = order::transition(tx, order_id, from, to, now_ms)?;
                insert_attempt(
                    tx,
                    order_id,
                    Operation::Refund,
                    refunding.amount_cents,
                    None,
                    refunding.payment_id.as_deref(),
                    now_ms,
                )?;
                Ok(Next::Refund)
            }
            OrderState::Refunding => Ok(Next::Refund),
            OrderState::Authorizing => {
                // Read under the same lock by the settlement of the
                // authorization or capture, which turns it into a void or
                // a refund.
                tx.execute(
                    "INSERT INTO cancel_requests (order_id, requested_at_ms) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&order_id, &now_ms],
                )
                .map_err(pg_err)?;
                Ok(Next::Show(current))
            }
            _ => Ok(Next::Show(current)),
        }
    })
}

/// Sends the stored refund of a `refunding` order; its answer is settled
/// like any other (a refund left unanswered stays `refunding`, for the
/// payments reconciler).
async fn refund_on(
    backend: &PgBackend,
    steps: &dyn Blocking,
    order_id: &str,
    now_ms: UnixMs,
) -> Result<Order, CheckoutError> {
    let load =
        |b: PgBackend, id: String| move || b.read(|client| order::load_existing(client, &id));
    let current = step(steps, load(backend.clone(), order_id.to_owned())).await??;
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
    drive_on(
        backend,
        steps,
        attempt_key(order_id, Operation::Refund),
        false,
        now_ms,
    )
    .await?;
    Ok(step(steps, load(backend.clone(), order_id.to_owned())).await??)
}
