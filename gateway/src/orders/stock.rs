//! The waiting room's sold-out hook, answered by the reservation core.
//!
//! A room can still sell while any of its products has units available or
//! held (a held unit comes back if its order is declined, cancelled or
//! expires). Rooms ask on every join and poll, so the answer is a snapshot
//! refreshed by the orders worker and after each checkout from the store's
//! books in memory, never a query.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_admission::StockAuthority;
use sluice_checkout::{Store, StoreError};
use sluice_policies::Config;

#[derive(Default)]
pub struct StoreStock {
    sellable: ArcSwap<HashMap<String, bool>>,
    /// sku → room, from the config in force.
    rooms: ArcSwap<HashMap<String, String>>,
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

    /// Re-reads the store's counts (its books in memory: no I/O).
    pub fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        let rooms = self.rooms.load();
        let mut sellable: HashMap<String, bool> = HashMap::new();
        for level in &store.books().inventory {
            if let Some(room) = rooms.get(&level.sku) {
                *sellable.entry(room.clone()).or_default() |= level.available + level.reserved > 0;
            }
        }
        self.sellable.store(Arc::new(sellable));
        Ok(())
    }
}

impl StockAuthority for StoreStock {
    fn can_sell(&self, room: &str) -> bool {
        // A room without products has nothing to run out of.
        self.sellable.load().get(room).copied().unwrap_or(true)
    }
}
