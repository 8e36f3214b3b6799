//! Answering a poll.

use super::view::too_early_by;
use super::{Admitted, PollError, PreQueue, Status, Wait, WaitingRoom, CLAIM_SLACK_S};
use crate::fair_start;
use crate::journal::RoomEvent;
use crate::no_show::claim_window_ms;
use crate::store::{QueueStore, Slot, SlotState};
use crate::ticket_id::TicketId;

impl<S: QueueStore> WaitingRoom<S> {
    /// Where ticket `seq` (with id `ticket_id`, both from its verified JWT)
    /// stands at `now_ms`.
    ///
    /// Once its place has been released the answer is `Admitted` with the
    /// same pass every time, until the pass ends. The first such answer
    /// collects the pass, which then takes a `max_active` slot: only while
    /// one is free; until then the holder is told it is at the front, to
    /// ask again. A waiting ticket that asks
    /// sooner than it was told gets `TooEarly`, and the early poll does not
    /// count as a sign of life.
    ///
    /// The only changes a poll records are time-outs it finds; they are
    /// given to the sink on the way out. An answer that sets the next poll
    /// is also recorded in the room's view, which can then answer the
    /// ticket's early polls without the room ([`super::RoomView`]).
    pub fn status(
        &mut self,
        seq: u64,
        ticket_id: &TicketId,
        now_ms: u64,
    ) -> Result<Status, PollError> {
        let answer = self.poll(seq, ticket_id, now_ms);
        self.flush();
        answer
    }

    fn poll(&mut self, seq: u64, ticket_id: &TicketId, now_ms: u64) -> Result<Status, PollError> {
        self.open_if_due(now_ms);
        self.saw(now_ms);
        if self.ids.derive(&self.name, seq) != *ticket_id {
            return Err(PollError::UnknownTicket);
        }
        if self.before_opening() {
            return self.pre_queue_status(seq, ticket_id, now_ms);
        }
        let place = self.place_of(seq).ok_or(PollError::UnknownTicket)?;
        if place < self.cursor {
            return Ok(self.released_status(seq, ticket_id, place, now_ms));
        }
        let slot = self.store.get(place).ok_or(PollError::UnknownTicket)?;
        let now_s = self.room_s(now_ms);
        match self.settle(place, slot, now_s) {
            SlotState::Waiting => {}
            SlotState::Abandoned | SlotState::Expired => return Ok(Status::Expired),
            SlotState::Released => return Ok(self.released_status(seq, ticket_id, place, now_ms)),
        }
        if !self.stock.can_sell(&self.name) {
            return Ok(Status::SoldOut);
        }
        self.check_on_time(&slot, now_s)?;
        // Released places still waiting for their holder are ahead too,
        // but already let in: the estimate counts them in the slots.
        let in_line = self.store.live_before(place);
        let ahead = in_line + self.uncollected.len() as u64;
        let estimated_wait_s = self.estimate_s(in_line, now_s);
        let poll = self.paced_poll_for(estimated_wait_s, in_line);
        self.store.set(
            place,
            Slot {
                last_poll_s: now_s,
                poll_after_s: poll,
                ..slot
            },
        );
        self.record_due(seq, *ticket_id);
        let wait = Wait {
            position: ahead + 1,
            ahead,
            estimated_wait_s,
            poll_after_s: u32::from(poll),
            expires_at_s: self.expires_at_s(&slot),
        };
        Ok(if self.paused {
            Status::Paused(wait)
        } else {
            Status::Waiting(wait)
        })
    }

    fn released_status(
        &mut self,
        seq: u64,
        ticket_id: &TicketId,
        place: u64,
        now_ms: u64,
    ) -> Status {
        if let Some(pending) = self.uncollected.get(&place).copied() {
            let now_unix_s = Self::unix_s(now_ms);
            let free = self.active.len() < self.policy.max_active.get() as usize;
            if now_unix_s < pending.pass.expires_at_s && free {
                self.uncollected.remove(&place);
                // Collected now: in use from here (its idle time counts
                // from its collection, not its release).
                let mut pass = pending.pass;
                pass.last_active_s = pass.last_active_s.max(now_unix_s);
                self.active.insert(place, pass);
                self.no_shows.record(now_unix_s, 1, 0);
                self.emit(RoomEvent::Collected { place });
                self.account_collected(seq, pending.pass.expires_at_s);
            } else if now_unix_s < pending.pass.expires_at_s {
                // Here, but no slot to spare: at the front, and
                // not a no-show while it keeps asking.
                let poll_after_s = self.policy.poll_min.as_secs();
                let window_s = claim_window_ms(&self.policy) / 1000;
                if let Some(p) = self.uncollected.get_mut(&place) {
                    p.claim_by_s = now_unix_s + window_s.max(poll_after_s + CLAIM_SLACK_S);
                }
                // Ahead: the released places before it still waiting too.
                let ahead = self.uncollected.range(..place).count() as u64;
                let wait = Wait {
                    position: ahead + 1,
                    ahead,
                    estimated_wait_s: 0,
                    poll_after_s: poll_after_s as u32,
                    expires_at_s: pending.pass.expires_at_s,
                };
                return Status::Waiting(wait);
            }
        }
        let now_unix_s = Self::unix_s(now_ms);
        match self.active.get(&place) {
            Some(pass) if now_unix_s < pass.expires_at_s => {
                // Not the pass's use by itself: the gateway notes the
                // page's status calls as use (`touch_pass`), and a join
                // answered with this place (an account's) is not one.
                Status::Admitted(Admitted {
                    seq,
                    ticket_id: *ticket_id,
                    number: pass.number,
                    issued_at_s: pass.issued_at_s,
                    expires_at_s: pass.expires_at_s,
                })
            }
            _ => Status::Expired,
        }
    }

    fn check_on_time(&mut self, slot: &Slot, now_s: u32) -> Result<(), PollError> {
        match too_early_by(slot.last_poll_s, slot.poll_after_s, now_s) {
            Some(retry_after_s) => {
                self.view.count_too_early();
                Err(PollError::TooEarly { retry_after_s })
            }
            None => Ok(()),
        }
    }

    fn pre_queue_status(
        &mut self,
        seq: u64,
        ticket_id: &TicketId,
        now_ms: u64,
    ) -> Result<Status, PollError> {
        let now_s = self.room_s(now_ms);
        let i = usize::try_from(seq).map_err(|_| PollError::UnknownTicket)?;
        let (opens_at_ms, entrants, slot) = {
            let pre = self.pre_queue.as_ref().ok_or(PollError::UnknownTicket)?;
            let slot = *pre.slots.get(i).ok_or(PollError::UnknownTicket)?;
            (pre.opens_at_ms, pre.entrants(), slot)
        };
        if slot.state != SlotState::Waiting {
            return Ok(Status::Expired);
        }
        // The same rule as in line: silent for longer than `idle_timeout`
        // means gone (the draw then passes the place over for free).
        if u64::from(now_s.saturating_sub(slot.last_poll_s)) > self.policy.idle_timeout.as_secs() {
            if let Some(entry) = self.pre_queue.as_mut().and_then(|p| p.slots.get_mut(i)) {
                entry.state = SlotState::Abandoned;
            }
            self.emit(RoomEvent::PreAbandoned { seq });
            self.counters.abandoned += 1;
            return Ok(Status::Expired);
        }
        if !self.stock.can_sell(&self.name) {
            return Ok(Status::SoldOut);
        }
        self.check_on_time(&slot, now_s)?;
        let poll = self.poll_before_opening(now_ms, opens_at_ms);
        let expires_at_s =
            fair_start::ticket_expires_at_s(opens_at_ms, self.policy.ticket_ttl.as_secs());
        if let Some(entry) = self.pre_queue.as_mut().and_then(|p| p.slots.get_mut(i)) {
            entry.last_poll_s = now_s;
            entry.poll_after_s = poll;
        }
        self.record_due(seq, *ticket_id);
        Ok(Status::PreQueue(PreQueue {
            opens_at_ms,
            entrants,
            poll_after_s: u32::from(poll),
            expires_at_s,
        }))
    }
}
