//! Odds, told honestly: the stock left for a room and whether a waiting
//! shopper's place is likely beyond it.
//!
//! The number is informative, never a reservation: units left are the
//! units nobody holds now (held units come back when an order is declined,
//! cancelled or expires, and shoppers ahead may buy less than the mean or
//! nothing). The warning is `ahead × units per order > units left`, where
//! units per order is the mean of the orders confirmed so far
//! ([`units_per_order`]), and 1 until [`MEAN_AFTER_ORDERS`] have been
//! confirmed: the smallest order anyone makes, so the page never warns
//! early on a guess.

/// Confirmed orders needed before their mean size is used.
pub const MEAN_AFTER_ORDERS: u64 = 10;

/// A room's stock as the waiting room tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitsLeft {
    /// Units of the room's products nobody holds now.
    pub units: u64,
    /// Mean units per confirmed order ([`units_per_order`]).
    pub units_per_order: f64,
}

/// The mean units of a confirmed order, from `units_sold` over `orders`
/// confirmed; 1 until [`MEAN_AFTER_ORDERS`] orders were confirmed, and
/// never under 1 (an order buys at least one unit).
pub fn units_per_order(units_sold: u64, orders: u64) -> f64 {
    if orders < MEAN_AFTER_ORDERS {
        return 1.0;
    }
    (units_sold as f64 / orders as f64).max(1.0)
}

/// Whether a shopper with `ahead` people in front is likely to find
/// nothing left: those ahead would buy more than `left` at the mean order
/// size.
pub fn likely_beyond_stock(ahead: u64, left: UnitsLeft) -> bool {
    ahead as f64 * left.units_per_order > left.units as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(units: u64, units_per_order: f64) -> UnitsLeft {
        UnitsLeft {
            units,
            units_per_order,
        }
    }

    #[test]
    fn the_mean_waits_for_enough_orders_and_is_never_under_one() {
        assert_eq!(units_per_order(0, 0), 1.0);
        assert_eq!(units_per_order(90, MEAN_AFTER_ORDERS - 1), 1.0);
        assert_eq!(units_per_order(25, 10), 2.5);
        assert_eq!(units_per_order(5, 10), 1.0);
    }

    #[test]
    fn a_place_is_beyond_the_stock_only_when_those_ahead_would_buy_more() {
        // 10 units, one a order: the 10 ahead take them all, not more.
        assert!(!likely_beyond_stock(10, left(10, 1.0)));
        assert!(likely_beyond_stock(11, left(10, 1.0)));
        // Two units an order: 5 ahead take the 10.
        assert!(!likely_beyond_stock(5, left(10, 2.0)));
        assert!(likely_beyond_stock(6, left(10, 2.0)));
        // Nothing left: anyone behind somebody is beyond it.
        assert!(!likely_beyond_stock(0, left(0, 1.0)));
        assert!(likely_beyond_stock(1, left(0, 1.0)));
    }
}
