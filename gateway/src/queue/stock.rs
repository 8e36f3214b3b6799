//! Whether a room still has anything to sell, from the config's products.
//!
//! This is the stock authority until the reservation core answers instead:
//! a room whose products all have `stock = 0` is sold out; a room without
//! products is never sold out.

use std::collections::HashMap;

use arc_swap::ArcSwap;
use sluice_admission::StockAuthority;
use sluice_policies::Config;

#[derive(Default)]
pub struct ConfigStock {
    sellable: ArcSwap<HashMap<String, bool>>,
}

impl ConfigStock {
    pub fn apply(&self, config: &Config) {
        let mut sellable: HashMap<String, bool> = HashMap::new();
        for product in &config.products {
            *sellable.entry(product.room.clone()).or_default() |= product.stock > 0;
        }
        self.sellable.store(std::sync::Arc::new(sellable));
    }
}

impl StockAuthority for ConfigStock {
    fn can_sell(&self, room: &str) -> bool {
        self.sellable.load().get(room).copied().unwrap_or(true)
    }
}
