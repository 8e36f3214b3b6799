//! The store's books in memory: every SKU's stock counts and the number of
//! orders in each state, as of the last commit.
//!
//! Metrics scrapes, `/admin/state` and the sold-out hook read these instead
//! of querying SQLite. The order counts are kept by triggers in the
//! `order_counts` table, inside the same transactions that change orders
//! (so a rolled-back job leaves them right), and were seeded from `orders`
//! once when the store opened; after each committed batch the writer reads
//! that table and the `stock` rows (one row per SKU and per state, a few
//! dozen rows) on its own connection and publishes them here.

use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::backend::sqlite::stock::{self, StockLevel};
use crate::core::state::OrderState;
use crate::error::StoreError;

/// The books as of one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Books {
    /// By SKU.
    pub inventory: Vec<StockLevel>,
    /// Every state, in [`OrderState::ALL`] order.
    pub orders: Vec<(OrderState, u64)>,
}

/// The last published books.
#[derive(Debug, Default)]
pub struct BooksCell(Mutex<Arc<Books>>);

impl BooksCell {
    pub fn get(&self) -> Arc<Books> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn publish(&self, books: Books) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(books);
    }
}

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

/// The store's backlog gauges, read when asked (the orders worker's pass).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Outbox events not yet acknowledged by a sink.
    pub outbox_pending: u64,
    /// Age of the oldest unpublished outbox event, 0 when none.
    pub outbox_lag_ms: i64,
    /// Age of the oldest hold still reserved, 0 when none.
    pub oldest_hold_age_ms: i64,
}
