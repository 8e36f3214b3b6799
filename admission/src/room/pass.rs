//! A pass's right to start checkouts, as the room holds it.

use super::WaitingRoom;
use crate::journal::RoomEvent;
use crate::pass_orders::PassOrders;
use crate::store::QueueStore;
use crate::ticket_id::TicketId;

impl<S: QueueStore> WaitingRoom<S> {
    /// Whether pass `seq` (with `ticket_id`, both from its verified JWT)
    /// still holds an active slot at `now_ms`, and so may start a checkout.
    ///
    /// `false` once the slot was given back ([`Self::give_back_if_spent`]),
    /// once the pass expired, and for passes this room never released (a
    /// pass of an earlier process: its ticket id does not derive here).
    /// The signature alone is never enough: that is how `max_active`
    /// bounds the passes able to buy at once.
    pub fn may_start(&self, seq: u64, ticket_id: &TicketId, now_ms: u64) -> bool {
        if self.ids.derive(&self.name, seq) != *ticket_id {
            return false;
        }
        let Some(place) = self.place_of(seq) else {
            return false;
        };
        self.active
            .get(&place)
            .is_some_and(|pass| Self::unix_s(now_ms) < pass.expires_at_s)
    }

    /// Gives pass `seq`'s active slot back to the line if `orders` shows it
    /// can start no more checkouts and none is still running. `true` if a
    /// slot was freed. Once given back, the pass never gets it again.
    pub fn give_back_if_spent(&mut self, seq: u64, orders: PassOrders) -> bool {
        if !orders.spent(self.policy.max_orders_per_pass.get()) {
            return false;
        }
        let Some(place) = self.place_of(seq) else {
            return false;
        };
        let Some(pass) = self.active.remove(&place) else {
            return false;
        };
        self.observe_hold(self.view.seen_s().saturating_sub(pass.issued_at_s));
        self.emit(RoomEvent::GaveBack { place });
        // A slot given back and then restored would only let one person
        // fewer in until the pass expires: not worth refusing over.
        self.flush();
        true
    }
}
