//! Whether anything is left to sell: the stock authority's answer.

use std::collections::HashSet;
use std::sync::RwLock;

use crate::odds::UnitsLeft;

/// The reservation core implements this; the room asks it before letting
/// anyone join or wait. Implementations must be cheap (the room asks on
/// every join and poll): cache in the implementation if needed.
pub trait StockAuthority: Send + Sync {
    /// `false` once nothing is left to sell for `room`.
    fn can_sell(&self, room: &str) -> bool;

    /// The units left for `room` and the mean order size, where the
    /// implementation knows them (informative: [`crate::odds`]).
    fn units_left(&self, _room: &str) -> Option<UnitsLeft> {
        None
    }
}

/// Until the reservation core lands: rooms are sellable until marked sold
/// out by hand (or by a test).
#[derive(Debug, Default)]
pub struct InMemoryStock {
    sold_out: RwLock<HashSet<String>>,
}

impl InMemoryStock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `room` sold out (`true`) or sellable again (`false`).
    pub fn set_sold_out(&self, room: &str, sold_out: bool) {
        // A poisoned lock only means a writer panicked mid-insert; the set
        // itself is still a valid set.
        let mut set = self.sold_out.write().unwrap_or_else(|e| e.into_inner());
        if sold_out {
            set.insert(room.to_owned());
        } else {
            set.remove(room);
        }
    }
}

impl StockAuthority for InMemoryStock {
    fn can_sell(&self, room: &str) -> bool {
        let set = self.sold_out.read().unwrap_or_else(|e| e.into_inner());
        !set.contains(room)
    }
}
