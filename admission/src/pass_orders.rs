//! What a pass has done with its right to buy, and the one rule that says
//! when that right is spent.
//!
//! A pass may start `max_orders_per_pass` checkouts. Its active slot in the
//! room is held until it can start no more: it has started them all and
//! every one has ended (or the pass expired, which the room sees by
//! itself). Counting what a pass started is the checkout store's job (it is
//! counted in the same transaction that creates the order, so concurrent
//! requests cannot race past it); this is the decision over that count.

/// The checkouts of one pass, as the order store counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassOrders {
    /// Checkouts the pass started (orders created under its subject).
    pub started: u32,
    /// Of those, the ones whose outcome is still open (reserved or
    /// authorizing).
    pub open: u32,
}

impl PassOrders {
    /// The pass can start no more checkouts and none of its checkouts is
    /// still running: its slot can go to the next person in line.
    pub fn spent(self, max_orders_per_pass: u32) -> bool {
        self.started >= max_orders_per_pass && self.open == 0
    }

    /// The pass may start one more checkout.
    pub fn may_start(self, max_orders_per_pass: u32) -> bool {
        self.started < max_orders_per_pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_only_when_every_checkout_was_started_and_ended() {
        let p = |started, open| PassOrders { started, open };
        assert!(!p(0, 0).spent(1), "nothing started yet");
        assert!(!p(1, 1).spent(1), "its checkout still runs");
        assert!(p(1, 0).spent(1));
        assert!(!p(1, 0).spent(2), "it may start another");
        assert!(!p(2, 1).spent(2));
        assert!(p(2, 0).spent(2));
        assert!(p(3, 0).spent(2), "over the limit (lowered by a reload)");
    }

    #[test]
    fn may_start_below_the_limit_only() {
        let p = |started| PassOrders { started, open: 0 };
        assert!(p(0).may_start(1));
        assert!(!p(1).may_start(1));
        assert!(p(1).may_start(2));
        assert!(!p(5).may_start(2));
    }
}
