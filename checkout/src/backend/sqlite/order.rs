//! The durable order: its row, its birth, and its transitions. A transition
//! is one conditional UPDATE on the expected state plus its outbox event, in
//! the caller's transaction, so the event exists if and only if the change
//! does.

use rusqlite::{params, Connection, Row, Transaction};

use crate::clock::UnixMs;
pub use crate::core::order::{Order, OrderView, PaymentView};
use crate::core::state::{transition_allowed, OrderState, PaymentState};
use crate::error::StoreError;
use crate::metrics::Metrics;

const SELECT_ORDER: &str = "SELECT order_id, subject, sku, quantity, payment_method, amount_cents,
    state, payment_state, payment_id, created_at_ms, updated_at_ms, reservation_expires_at_ms
    FROM orders";

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        table: "orders",
        detail,
    }
}

fn order_from_row(row: &Row<'_>) -> Result<Order, StoreError> {
    let state: String = row.get(6)?;
    let payment_state: String = row.get(7)?;
    let quantity: i64 = row.get(3)?;
    let amount_cents: i64 = row.get(5)?;
    Ok(Order {
        order_id: row.get(0)?,
        subject: row.get(1)?,
        sku: row.get(2)?,
        quantity: u32::try_from(quantity).map_err(|_| corrupt(format!("quantity {quantity}")))?,
        payment_method: row.get(4)?,
        amount_cents: u64::try_from(amount_cents)
            .map_err(|_| corrupt(format!("amount_cents {amount_cents}")))?,
        state: OrderState::parse(&state).ok_or_else(|| corrupt(format!("state {state:?}")))?,
        payment_state: PaymentState::parse(&payment_state)
            .ok_or_else(|| corrupt(format!("payment_state {payment_state:?}")))?,
        payment_id: row.get(8)?,
        created_at_ms: row.get(9)?,
        updated_at_ms: row.get(10)?,
        reservation_expires_at_ms: row.get(11)?,
    })
}

pub(crate) fn load(conn: &Connection, order_id: &str) -> Result<Option<Order>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!("{SELECT_ORDER} WHERE order_id = ?1"))?;
    let mut rows = stmt.query([order_id])?;
    match rows.next()? {
        Some(row) => order_from_row(row).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn load_existing(conn: &Connection, order_id: &str) -> Result<Order, StoreError> {
    load(conn, order_id)?.ok_or_else(|| StoreError::UnknownOrder(order_id.to_owned()))
}

/// Orders in `state` last changed at or before `before_ms`, oldest first.
pub(crate) fn load_in_state_before(
    conn: &Connection,
    state: OrderState,
    before_ms: UnixMs,
    limit: usize,
) -> Result<Vec<Order>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT_ORDER} WHERE state = ?1 AND updated_at_ms <= ?2 ORDER BY updated_at_ms LIMIT ?3"
    ))?;
    let mut rows = stmt.query(params![state.as_str(), before_ms, limit as i64])?;
    let mut orders = Vec::new();
    while let Some(row) = rows.next()? {
        orders.push(order_from_row(row)?);
    }
    Ok(orders)
}

/// Writes a new order in its birth state (`reserved` or `rejected`) and the
/// birth's outbox event.
pub(crate) fn insert(tx: &Transaction<'_>, order: &Order) -> Result<(), StoreError> {
    debug_assert!(matches!(
        order.state,
        OrderState::Reserved | OrderState::Rejected
    ));
    let amount_cents = i64::try_from(order.amount_cents)
        .map_err(|_| StoreError::InvalidArgument("amount too large".into()))?;
    tx.prepare_cached(
        "INSERT INTO orders (order_id, subject, sku, quantity, payment_method, amount_cents,
            state, payment_state, payment_id, created_at_ms, updated_at_ms, reservation_expires_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        order.order_id,
        order.subject,
        order.sku,
        order.quantity,
        order.payment_method,
        amount_cents,
        order.state.as_str(),
        order.payment_state.as_str(),
        order.payment_id,
        order.created_at_ms,
        order.updated_at_ms,
        order.reservation_expires_at_ms,
    ])?;
    crate::backend::sqlite::outbox::insert_event(
        tx,
        order,
        order.state.event_type(),
        order.created_at_ms,
    )
}

/// Moves `order_id` from `from` to `to` if the table allows it and the order
/// is still in `from`; writes the outbox event. Refusals are counted.
pub(crate) fn transition(
    tx: &Transaction<'_>,
    metrics: &Metrics,
    order_id: &str,
    from: OrderState,
    to: OrderState,
    now_ms: UnixMs,
) -> Result<Order, StoreError> {
    if !transition_allowed(from, to) {
        Metrics::inc(&metrics.illegal_transitions);
        return Err(StoreError::IllegalTransition { from, to });
    }
    let changed = tx
        .prepare_cached(
            "UPDATE orders SET state = ?3, updated_at_ms = ?4 WHERE order_id = ?1 AND state = ?2",
        )?
        .execute(params![order_id, from.as_str(), to.as_str(), now_ms])?;
    let order = load_existing(tx, order_id)?;
    if changed == 0 {
        // Someone else moved it first; from where it really is, `to` may
        // not be legal at all.
        Metrics::inc(&metrics.illegal_transitions);
        return Err(StoreError::IllegalTransition {
            from: order.state,
            to,
        });
    }
    debug_assert_eq!(order.state, to);
    crate::backend::sqlite::outbox::insert_event(tx, &order, to.event_type(), now_ms)?;
    Ok(order)
}

/// Records the payment's state (and the provider's id, once known).
pub(crate) fn set_payment(
    tx: &Transaction<'_>,
    order_id: &str,
    payment_state: PaymentState,
    payment_id: Option<&str>,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached(
            "UPDATE orders SET payment_state = ?2, payment_id = COALESCE(?3, payment_id),
                updated_at_ms = ?4
             WHERE order_id = ?1",
        )?
        .execute(params![
            order_id,
            payment_state.as_str(),
            payment_id,
            now_ms
        ])?;
    if changed == 0 {
        return Err(StoreError::UnknownOrder(order_id.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sqlite::store::Store;
    use std::sync::atomic::Ordering;

    fn order_in(store: &Store, order_id: &str, state: OrderState) -> Order {
        let order = Order {
            order_id: order_id.into(),
            subject: "sub".into(),
            sku: "sku".into(),
            quantity: 1,
            payment_method: "pm_ok".into(),
            amount_cents: 100,
            state: OrderState::Reserved,
            payment_state: PaymentState::None,
            payment_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            reservation_expires_at_ms: Some(1),
        };
        let inserted = order.clone();
        let id = order.order_id.clone();
        store.write(move |tx, _| insert(tx, &inserted)).unwrap();
        store
            .write(move |tx, _| {
                tx.execute(
                    "UPDATE orders SET state = ?1 WHERE order_id = ?2",
                    [state.as_str(), &id],
                )?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        Order { state, ..order }
    }

    fn events(store: &Store) -> i64 {
        store
            .read(|conn| Ok(conn.query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))?))
            .unwrap()
    }

    /// Every pair through the real store: a legal one changes the row and
    /// writes exactly one event of the target's type; an illegal one is
    /// refused, counted, and changes nothing.
    #[test]
    fn every_pair_through_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for from in OrderState::ALL {
            for to in OrderState::ALL {
                let order = order_in(&store, &format!("ord_{from}_{to}"), from);
                let events_before = events(&store);
                let refused_before = store.metrics().illegal_transitions.load(Ordering::Relaxed);
                let id = order.order_id.clone();
                let result = store.write(move |tx, m| transition(tx, m, &id, from, to, 5));
                let stored = store
                    .read(|conn| load_existing(conn, &order.order_id))
                    .unwrap();
                if transition_allowed(from, to) {
                    let moved = result.unwrap();
                    assert_eq!((moved.state, stored.state), (to, to), "{from} -> {to}");
                    assert_eq!(events(&store), events_before + 1, "{from} -> {to}");
                    let event_type: String = store
                        .read(|conn| {
                            Ok(conn.query_row(
                                "SELECT type FROM outbox ORDER BY seq DESC LIMIT 1",
                                [],
                                |r| r.get(0),
                            )?)
                        })
                        .unwrap();
                    assert_eq!(event_type, to.event_type());
                } else {
                    assert!(
                        matches!(result, Err(StoreError::IllegalTransition { .. })),
                        "{from} -> {to}"
                    );
                    assert_eq!(stored.state, from, "{from} -> {to}");
                    assert_eq!(events(&store), events_before, "{from} -> {to}");
                    assert_eq!(
                        store.metrics().illegal_transitions.load(Ordering::Relaxed),
                        refused_before + 1
                    );
                }
            }
        }
    }

    /// A transition from a state the order has already left is refused even
    /// when the table allows it: the expected state is part of the UPDATE.
    #[test]
    fn stale_expected_state_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let order = order_in(&store, "ord_test", OrderState::Expired);
        let id = order.order_id.clone();
        let result = store.write(move |tx, metrics| {
            transition(
                tx,
                metrics,
                &id,
                OrderState::Reserved,
                OrderState::Cancelled,
                5,
            )
        });
        assert!(matches!(
            result,
            Err(StoreError::IllegalTransition {
                from: OrderState::Expired,
                to: OrderState::Cancelled
            })
        ));
        assert_eq!(
            store.metrics().illegal_transitions.load(Ordering::Relaxed),
            1
        );
    }
}
