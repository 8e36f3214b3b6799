//! The store's books in memory: every SKU's stock counts and the number of
//! orders in each state, as of the last commit.
//!
//! Metrics scrapes, `/admin/state` and the sold-out hook read these instead
//! of querying the store. On the embedded store (`backend/sqlite/books.rs`)
//! the order counts are kept by triggers in the
//! `order_counts` table, inside the same transactions that change orders
//! (so a rolled-back job leaves them right), and were seeded from `orders`
//! once when the store opened; after each committed batch the writer reads
//! that table and the `stock` rows (one row per SKU and per state, a few
//! dozen rows) on its own connection and publishes them here.

use std::sync::{Arc, Mutex};

use crate::core::state::OrderState;
use crate::core::stock::StockLevel;

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
