//! Passes that end before their time: a pass nobody uses gives its slot
//! back after the room's `pass_idle`, and the origin may end the pass that
//! made a request (`Sluice-Pass: end`). Either way the slot goes back to
//! the line at once and the pass is refused until its expiry.
//!
//! What counts as use is the gateway's to report: a request carrying the
//! pass ([`WaitingRoom::touch_pass`]) and a checkout running
//! ([`WaitingRoom::checkout_running`]).

use super::WaitingRoom;
use crate::journal::RoomEvent;
use crate::pass_idle::{is_idle, PassEnd};
use crate::store::QueueStore;
use crate::ticket_id::TicketId;

impl<S: QueueStore> WaitingRoom<S> {
    /// The place of pass `seq`, if `ticket_id` is the one this room derives
    /// for it.
    fn pass_place(&self, seq: u64, ticket_id: &TicketId) -> Option<u64> {
        if self.ids.derive(&self.name, seq) != *ticket_id {
            return None;
        }
        self.place_of(seq)
    }

    /// Notes a request made with pass `seq` at `now_ms`: it is in use.
    pub fn touch_pass(&mut self, seq: u64, ticket_id: &TicketId, now_ms: u64) {
        let Some(place) = self.pass_place(seq, ticket_id) else {
            return;
        };
        if let Some(pass) = self.active.get_mut(&place) {
            pass.last_active_s = pass.last_active_s.max(Self::unix_s(now_ms));
        }
    }

    /// A checkout of pass `seq` started (`true`) or ended (`false`); a pass
    /// is not idle while one runs, and its end counts as use.
    pub fn checkout_running(&mut self, seq: u64, ticket_id: &TicketId, running: bool, now_ms: u64) {
        let Some(place) = self.pass_place(seq, ticket_id) else {
            return;
        };
        if let Some(pass) = self.active.get_mut(&place) {
            pass.checkouts_running = if running {
                pass.checkouts_running.saturating_add(1)
            } else {
                pass.checkouts_running.saturating_sub(1)
            };
            pass.last_active_s = pass.last_active_s.max(Self::unix_s(now_ms));
        }
    }

    /// Ends pass `seq` (expiring at `expires_at_s`, its verified `exp`)
    /// now: its slot goes back to the line and the pass is refused until
    /// its expiry. `true` if it held a slot. A pass whose slot went back
    /// already (its checkouts spent) is refused from now on too (the
    /// store's thank-you page ending the pass after the order is the
    /// common case); one ended already or expired is left as it is.
    pub fn end_pass(
        &mut self,
        seq: u64,
        ticket_id: &TicketId,
        expires_at_s: u64,
        why: PassEnd,
        now_ms: u64,
    ) -> bool {
        let Some(place) = self.pass_place(seq, ticket_id) else {
            return false;
        };
        let freed = self.end_at(place, why, now_ms);
        let live = Self::unix_s(now_ms) < expires_at_s;
        if !freed && live && !self.ended.contains_key(&place) {
            self.ended.insert(place, expires_at_s);
            self.count_ended(why);
            self.emit(RoomEvent::PassEnded {
                place,
                expires_at_s,
            });
        }
        self.flush();
        freed
    }

    fn count_ended(&mut self, why: PassEnd) {
        match why {
            PassEnd::Idle => self.counters.ended_idle += 1,
            PassEnd::Origin => self.counters.ended_origin += 1,
        }
    }

    fn end_at(&mut self, place: u64, why: PassEnd, now_ms: u64) -> bool {
        let Some(pass) = self.active.remove(&place) else {
            return false;
        };
        self.observe_hold(Self::unix_s(now_ms).saturating_sub(pass.issued_at_s));
        self.ended.insert(place, pass.expires_at_s);
        self.count_ended(why);
        self.emit(RoomEvent::PassEnded {
            place,
            expires_at_s: pass.expires_at_s,
        });
        true
    }

    /// Whether pass `seq` was ended before its time and has not expired.
    pub fn pass_ended(&self, seq: u64, now_ms: u64) -> bool {
        self.place_of(seq)
            .and_then(|place| self.ended.get(&place))
            .is_some_and(|&expires_at_s| Self::unix_s(now_ms) < expires_at_s)
    }

    /// The release pass's part: ends every pass idle for the room's
    /// `pass_idle`, and forgets ended passes once they expired. How many
    /// slots came back.
    pub(super) fn end_idle_passes(&mut self, now_ms: u64) -> u32 {
        let now_s = Self::unix_s(now_ms);
        self.ended.retain(|_, expires_at_s| now_s < *expires_at_s);
        let idle_ms = self.policy.pass_idle.as_millis() as u64;
        if idle_ms == 0 {
            return 0;
        }
        // The one rule both back ends apply (`crate::pass_idle`), here in
        // the room's whole seconds.
        let idle: Vec<u64> = self
            .active
            .iter()
            .filter(|(_, p)| {
                is_idle(
                    Some(idle_ms),
                    p.last_active_s.saturating_mul(1000),
                    p.checkouts_running,
                    now_s.saturating_mul(1000),
                )
            })
            .map(|(&place, _)| place)
            .collect();
        for &place in &idle {
            self.end_at(place, PassEnd::Idle, now_ms);
        }
        idle.len() as u32
    }
}
