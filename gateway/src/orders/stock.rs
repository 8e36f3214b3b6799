//! The store's books as the gateway last read them, and the waiting
//! room's sold-out hook answered from them.
//!
//! A room can still sell while any of its products has units available or
//! held (a held unit comes back if its order is declined, cancelled or
//! expires). Rooms ask on every join and poll, so the answer is a snapshot,
//! never a query: its stock counts are re-read after each write this
//! gateway makes on SQLite (from memory), after a cancel, adjustment,
//! webhook or sold-out checkout on PostgreSQL (one query over the partition
//! rows), and, with the orders per state, by the orders worker's pass each
//! second (so another gateway's sales on a shared PostgreSQL show within
//! one pass).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_admission::odds::{self, UnitsLeft};
use sluice_admission::StockAuthority;
use sluice_checkout::books::Books;
use sluice_checkout::{OrderBackend, OrderState, StockLevel, StoreError};
use sluice_policies::Config;

#[derive(Default)]
pub struct StoreStock {
    sellable: ArcSwap<HashMap<String, bool>>,
    /// room → units available (nobody holds them), for `units_left`.
    available: ArcSwap<HashMap<String, u64>>,
    /// sku → room, from the config in force.
    rooms: ArcSwap<HashMap<String, String>>,
    /// The books as last read (stock after each write, orders per pass).
    books: ArcSwap<Books>,
}

impl StoreStock {
    pub fn apply(&self, config: &Config) {
        let rooms = config
            .products
            .iter()
            .map(|p| (p.sku.clone(), p.room.clone()))
            .collect();
        self.rooms.store(Arc::new(rooms));
    }

    /// Re-reads every SKU's counts (blocking on PostgreSQL: call it inside
    /// a pool call or the worker's pass).
    pub fn refresh(&self, backend: &dyn OrderBackend) -> Result<(), StoreError> {
        let inventory = backend.stock_levels()?;
        self.publish_inventory(inventory);
        Ok(())
    }

    /// Re-reads the whole books: counts and orders per state.
    pub fn refresh_books(&self, backend: &dyn OrderBackend) -> Result<(), StoreError> {
        let books = backend.books()?;
        self.sell_from(&books.inventory);
        self.books.store(Arc::new(books));
        Ok(())
    }

    fn publish_inventory(&self, inventory: Vec<StockLevel>) {
        self.sell_from(&inventory);
        let orders = self.books.load().orders.clone();
        self.books.store(Arc::new(Books { inventory, orders }));
    }

    fn sell_from(&self, inventory: &[StockLevel]) {
        let rooms = self.rooms.load();
        let mut sellable: HashMap<String, bool> = HashMap::new();
        let mut available: HashMap<String, u64> = HashMap::new();
        for level in inventory {
            if let Some(room) = rooms.get(&level.sku) {
                *sellable.entry(room.clone()).or_default() |= level.available + level.reserved > 0;
                *available.entry(room.clone()).or_default() +=
                    u64::try_from(level.available).unwrap_or(0);
            }
        }
        self.sellable.store(Arc::new(sellable));
        self.available.store(Arc::new(available));
    }

    /// The books as last read (no I/O).
    pub fn books(&self) -> Arc<Books> {
        self.books.load_full()
    }
}

impl StockAuthority for StoreStock {
    fn can_sell(&self, room: &str) -> bool {
        // A room without products has nothing to run out of.
        self.sellable.load().get(room).copied().unwrap_or(true)
    }

    /// The room's available units, and the mean size of the store's
    /// confirmed orders (store-wide: orders are not kept per room).
    fn units_left(&self, room: &str) -> Option<UnitsLeft> {
        let units = *self.available.load().get(room)?;
        let books = self.books.load();
        let sold: i64 = books.inventory.iter().map(|l| l.committed).sum();
        let confirmed = books
            .orders
            .iter()
            .find(|(state, _)| *state == OrderState::Confirmed)
            .map_or(0, |(_, n)| *n);
        Some(UnitsLeft {
            units,
            units_per_order: odds::units_per_order(u64::try_from(sold).unwrap_or(0), confirmed),
        })
    }
}
