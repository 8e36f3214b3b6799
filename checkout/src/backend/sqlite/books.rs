//! The embedded store's books: the order counts kept by triggers, seeded
//! once at open, and read with the stock rows after each commit (see
//! [`crate::books`]).

use rusqlite::Connection;

use crate::backend::sqlite::stock;
use crate::books::Books;
use crate::core::state::OrderState;
use crate::error::StoreError;

/// Recounts `order_counts` from `orders` (once, at open: this is the only
/// scan of all orders).
pub(crate) fn seed(conn: &Connection) -> Result<(), StoreError> {
    let tx = conn.unchecked_transaction()?;
    tx.execute("DELETE FROM order_counts", [])?;
    for state in OrderState::ALL {
        tx.execute(
            "INSERT INTO order_counts (state, n)
             VALUES (?1, (SELECT COUNT(*) FROM orders WHERE state = ?1))",
            [state.as_str()],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Reads the books (a few dozen rows).
pub(crate) fn read(conn: &Connection) -> Result<Books, StoreError> {
    let inventory = stock::load_all(conn)?;
    let mut orders: Vec<(OrderState, u64)> =
        OrderState::ALL.iter().map(|state| (*state, 0)).collect();
    let mut stmt = conn.prepare_cached("SELECT state, n FROM order_counts")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let name: String = row.get(0)?;
        let n: i64 = row.get(1)?;
        let state = OrderState::parse(&name).ok_or_else(|| StoreError::Corrupt {
            table: "order_counts",
            detail: format!("unknown state {name:?}"),
        })?;
        if let Some(slot) = orders.iter_mut().find(|(s, _)| *s == state) {
            slot.1 = u64::try_from(n).unwrap_or(0);
        }
    }
    Ok(Books { inventory, orders })
}
