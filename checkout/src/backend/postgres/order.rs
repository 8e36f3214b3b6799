//! The order row in PostgreSQL: birth, guarded transitions (the one table
//! in [`crate::core::state`] decides; the UPDATE is conditional on the expected
//! state), the payment columns, and the outbox event written in the same
//! transaction as each change.

use postgres::Row;

use super::conn::{Conn, Db, Tx};
use super::pg_err;
use crate::clock::UnixMs;
use crate::core::order::Order;
use crate::core::state::{transition_allowed, OrderState, PaymentState};
use crate::error::StoreError;

/// The order row's columns, in [`from_row`]'s order (a macro, so each
/// statement stays one `&'static str`, cached per connection).
macro_rules! columns {
    () => {
        "order_id, subject, sku, quantity, payment_method, amount_cents, state,
    payment_state, payment_id, created_at_ms, updated_at_ms, reservation_expires_at_ms"
    };
}
pub(super) use columns;

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "orders",
        detail,
    }
}

/// A stored row as an [`Order`]; a value this code did not write is refused.
fn from_row(row: &Row) -> Result<Order, StoreError> {
    let state: String = row.get(6);
    let payment_state: String = row.get(7);
    let quantity: i32 = row.get(3);
    let amount: i64 = row.get(5);
    Ok(Order {
        order_id: row.get(0),
        subject: row.get(1),
        sku: row.get(2),
        quantity: u32::try_from(quantity).map_err(|_| corrupt(format!("quantity {quantity}")))?,
        payment_method: row.get(4),
        amount_cents: u64::try_from(amount).map_err(|_| corrupt(format!("amount {amount}")))?,
        state: OrderState::parse(&state).ok_or_else(|| corrupt(format!("state {state:?}")))?,
        payment_state: PaymentState::parse(&payment_state)
            .ok_or_else(|| corrupt(format!("payment state {payment_state:?}")))?,
        payment_id: row.get(8),
        created_at_ms: row.get(9),
        updated_at_ms: row.get(10),
        reservation_expires_at_ms: row.get(11),
    })
}

pub(super) fn load(client: &mut impl Db, order_id: &str) -> Result<Option<Order>, StoreError> {
    client
        .query_opt(
            concat!("SELECT ", columns!(), " FROM orders WHERE order_id = $1"),
            &[&order_id],
        )
        .map_err(pg_err)?
        .map(|row| from_row(&row))
        .transpose()
}

/// The order, its row locked until the transaction ends.
pub(super) fn load_for_update(
    tx: &mut Tx<'_>,
    order_id: &str,
) -> Result<Option<Order>, StoreError> {
    tx.query_opt(
        concat!(
            "SELECT ",
            columns!(),
            " FROM orders WHERE order_id = $1 FOR UPDATE"
        ),
        &[&order_id],
    )
    .map_err(pg_err)?
    .map(|row| from_row(&row))
    .transpose()
}

/// The order the payment attempt `key` is for, its row locked until the
/// transaction ends, in one statement (an attempt's order never changes;
/// the lock's wait re-reads the order row as its last holder left it).
/// `None` when there is no such attempt or no such order.
pub(super) fn load_for_update_by_attempt(
    tx: &mut Tx<'_>,
    key: &str,
) -> Result<Option<Order>, StoreError> {
    tx.query_opt(
        "SELECT o.order_id, o.subject, o.sku, o.quantity, o.payment_method, o.amount_cents,
                o.state, o.payment_state, o.payment_id, o.created_at_ms, o.updated_at_ms,
                o.reservation_expires_at_ms
           FROM payment_attempts a JOIN orders o ON o.order_id = a.order_id
          WHERE a.idempotency_key = $1 FOR UPDATE OF o",
        &[&key],
    )
    .map_err(pg_err)?
    .map(|row| from_row(&row))
    .transpose()
}

pub(super) fn load_existing(client: &mut impl Db, order_id: &str) -> Result<Order, StoreError> {
    load(client, order_id)?.ok_or_else(|| StoreError::UnknownOrder(order_id.to_owned()))
}

/// The outbox event of `order`'s change (its state now), in the same
/// transaction as the change.
fn event(tx: &mut Tx<'_>, order: &Order, now_ms: UnixMs) -> Result<(), StoreError> {
    let (event_id, payload) = event_of(order)?;
    tx.execute(
        "INSERT INTO outbox (event_id, order_id, event_type, payload, created_at_ms)
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &event_id,
            &order.order_id,
            &order.state.event_type(),
            &payload,
            &now_ms,
        ],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// A new event id and the payload of `order`'s event (its state now).
pub(super) fn event_of(order: &Order) -> Result<(String, String), StoreError> {
    let event_id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let payload = serde_json::to_string(&order.view())
        .map_err(|e| StoreError::InvalidArgument(format!("order not serializable: {e}")))?;
    Ok((event_id, payload))
}

/// `from → to` if the table allows it and the order is still `from`;
/// `IllegalTransition` otherwise (naming the state it is really in).
pub(super) fn transition(
    tx: &mut Tx<'_>,
    order_id: &str,
    from: OrderState,
    to: OrderState,
    now_ms: UnixMs,
) -> Result<Order, StoreError> {
    transition_paying(tx, order_id, from, to, None, false, now_ms)
}

/// [`transition`], setting the payment's state (and its provider id,
/// once known) in the same UPDATE, as [`set_payment`] would before it,
/// and with `complete_key`, completing the checkout's key once the order
/// moved, in the same statement (as `settle::complete_key_of` would
/// after it).
pub(super) fn transition_paying(
    tx: &mut Tx<'_>,
    order_id: &str,
    from: OrderState,
    to: OrderState,
    payment: Option<(PaymentState, Option<&str>)>,
    complete_key: bool,
    now_ms: UnixMs,
) -> Result<Order, StoreError> {
    if !transition_allowed(from, to) {
        return Err(StoreError::IllegalTransition { from, to });
    }
    let payment_state = payment.map(|(state, _)| state.as_str());
    let payment_id = payment.and_then(|(_, id)| id);
    let row = tx
        .query_opt(
            concat!(
                "WITH moved AS (UPDATE orders SET state = $3, updated_at_ms = $4,
                        payment_state = COALESCE($5, payment_state),
                        payment_id = COALESCE($6, payment_id)
                  WHERE order_id = $1 AND state = $2 RETURNING ",
                columns!(),
                "), completed AS (UPDATE idempotency SET completed_at_ms = $4
                  WHERE $7 AND order_id = $1 AND completed_at_ms IS NULL
                    AND EXISTS (SELECT 1 FROM moved))
                 SELECT * FROM moved"
            ),
            &[
                &order_id,
                &from.as_str(),
                &to.as_str(),
                &now_ms,
                &payment_state,
                &payment_id,
                &complete_key,
            ],
        )
        .map_err(pg_err)?;
    let Some(row) = row else {
        let current = load_existing(tx, order_id)?;
        return Err(StoreError::IllegalTransition {
            from: current.state,
            to,
        });
    };
    let order = from_row(&row)?;
    event(tx, &order, now_ms)?;
    Ok(order)
}

/// Sets the payment's state (and its provider id, once known).
pub(super) fn set_payment(
    tx: &mut Tx<'_>,
    order_id: &str,
    state: PaymentState,
    payment_id: Option<&str>,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE orders SET payment_state = $2, payment_id = COALESCE($3, payment_id),
                updated_at_ms = $4 WHERE order_id = $1",
        &[&order_id, &state.as_str(), &payment_id, &now_ms],
    )
    .map_err(pg_err)?;
    Ok(())
}

/// Orders of `subject`: created, and still `reserved` or `authorizing`.
pub(super) fn subject_orders(tx: &mut impl Db, subject: &str) -> Result<(u32, u32), StoreError> {
    let row = tx
        .query_one(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE state IN ('reserved', 'authorizing'))
             FROM orders WHERE subject = $1",
            &[&subject],
        )
        .map_err(pg_err)?;
    let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    Ok((count(row.get(0)), count(row.get(1))))
}

/// Orders per state, every state listed.
pub(super) fn counts(client: &mut Conn) -> Result<Vec<(OrderState, u64)>, StoreError> {
    let mut counts: Vec<(OrderState, u64)> =
        OrderState::ALL.iter().map(|state| (*state, 0)).collect();
    let rows = client
        .query("SELECT state, COUNT(*) FROM orders GROUP BY state", &[])
        .map_err(pg_err)?;
    for row in rows {
        let name: String = row.get(0);
        let n: i64 = row.get(1);
        let state = OrderState::parse(&name).ok_or_else(|| corrupt(format!("state {name:?}")))?;
        if let Some(slot) = counts.iter_mut().find(|(s, _)| *s == state) {
            slot.1 = u64::try_from(n).unwrap_or(0);
        }
    }
    Ok(counts)
}
