//! Taking a place in line.

use super::{JoinError, Joined, PreQueue, Status, Wait, WaitingRoom};
use crate::fair_start;
use crate::journal::RoomEvent;
use crate::no_show::releasable;
use crate::poll::paced_poll_after_s;
use crate::store::{QueueStore, Slot, SlotState};

impl<S: QueueStore> WaitingRoom<S> {
    /// A new ticket at the end of the line, or in the pre-queue before a
    /// fair-start opening.
    ///
    /// Refused while paused, once sold out, and when `queue_capacity` live
    /// tickets are already waiting.
    ///
    /// With a sink, the join is kept before it is answered: if the sink
    /// refuses it the answer is `StoreUnavailable` and the place it would
    /// have had is written off (nobody holds it).
    pub fn join(&mut self, now_ms: u64) -> Result<Joined, JoinError> {
        self.join_then(now_ms, |_, _| {})
    }

    /// [`Self::join`], with `kept` run on the new place before the join's
    /// events are given to the sink (its own events are kept with them).
    pub(super) fn join_then(
        &mut self,
        now_ms: u64,
        kept: impl FnOnce(&mut Self, &Joined),
    ) -> Result<Joined, JoinError> {
        self.open_if_due(now_ms);
        self.saw(now_ms);
        if !self.flush() {
            self.counters.joins.store_unavailable += 1;
            return Err(JoinError::StoreUnavailable {
                retry_after_s: self.retry_after_s(),
            });
        }
        if self.paused {
            self.counters.joins.paused += 1;
            return Err(JoinError::Paused {
                retry_after_s: self.retry_after_s(),
            });
        }
        if !self.stock.can_sell(&self.name) {
            self.counters.joins.sold_out += 1;
            return Err(JoinError::SoldOut);
        }
        let waiting = self.store.live()
            + self
                .pre_queue
                .as_ref()
                .filter(|p| !p.opened)
                .map_or(0, |p| p.entrants());
        if waiting >= u64::from(self.policy.queue_capacity.get()) {
            self.counters.joins.queue_full += 1;
            return Err(JoinError::QueueFull {
                retry_after_s: self.retry_after_s(),
            });
        }
        let joined = if self.before_opening() {
            self.join_pre_queue(now_ms)
        } else {
            self.join_line(now_ms)
        };
        if let Some(joined) = &joined {
            kept(self, joined);
        }
        match joined {
            Some(joined) if !self.flush() => {
                self.write_off(joined.seq);
                self.publish();
                self.counters.joins.store_unavailable += 1;
                Err(JoinError::StoreUnavailable {
                    retry_after_s: self.retry_after_s(),
                })
            }
            Some(joined) => {
                self.counters.joins.queued += 1;
                // Kept: its early polls can be answered without the room.
                self.record_due(joined.seq, joined.ticket_id);
                Ok(joined)
            }
            None => {
                self.counters.joins.queue_full += 1;
                Err(JoinError::QueueFull {
                    retry_after_s: self.retry_after_s(),
                })
            }
        }
    }

    fn join_line(&mut self, now_ms: u64) -> Option<Joined> {
        let now_s = self.room_s(now_ms);
        // Everyone live is ahead of a newcomer.
        // Released places still waiting for their holder are ahead too,
        // but already let in: the estimate counts them in the slots.
        let in_line = self.store.live();
        let ahead = in_line + self.uncollected.len() as u64;
        let estimated_wait_s = self.estimate_s(in_line, now_s);
        let poll = self.paced_poll_for(estimated_wait_s, in_line);
        let slot = Slot::waiting(now_s, poll);
        let place = self.store.push(slot)?;
        self.emit(RoomEvent::Joined {
            place,
            joined_s: now_s,
        });
        // Without a pre-queue, and after one, later places are their seq.
        let seq = place;
        let expires_at_s = self.expires_at_s(&slot);
        Some(Joined {
            seq,
            ticket_id: self.ids.derive(&self.name, seq),
            issued_at_s: Self::unix_s(now_ms),
            expires_at_s,
            status: Status::Waiting(Wait {
                position: ahead + 1,
                ahead,
                estimated_wait_s,
                poll_after_s: u32::from(poll),
                expires_at_s,
            }),
        })
    }

    fn join_pre_queue(&mut self, now_ms: u64) -> Option<Joined> {
        let now_s = self.room_s(now_ms);
        let opens_at_ms = self.pre_queue.as_ref()?.opens_at_ms;
        let poll = self.poll_before_opening(now_ms, opens_at_ms);
        let ticket_ttl_s = self.policy.ticket_ttl.as_secs();
        let pre = self.pre_queue.as_mut()?;
        let seq = pre.entrants();
        pre.slots.push(Slot::waiting(now_s, poll));
        self.emit(RoomEvent::PreJoined {
            seq,
            joined_s: now_s,
        });
        let expires_at_s = fair_start::ticket_expires_at_s(opens_at_ms, ticket_ttl_s);
        Some(Joined {
            seq,
            ticket_id: self.ids.derive(&self.name, seq),
            issued_at_s: Self::unix_s(now_ms),
            expires_at_s,
            status: Status::PreQueue(PreQueue {
                opens_at_ms,
                entrants: seq + 1,
                poll_after_s: u32::from(poll),
                expires_at_s,
            }),
        })
    }

    /// A join the sink did not keep: its place is nobody's. The write-off
    /// is itself an event, so the record agrees once the sink is back.
    fn write_off(&mut self, seq: u64) {
        if self.before_opening() {
            if let Some(slot) = self
                .pre_queue
                .as_mut()
                .and_then(|p| p.slots.get_mut(seq as usize))
            {
                slot.state = SlotState::Abandoned;
            }
            self.emit(RoomEvent::PreAbandoned { seq });
        } else if let Some(slot) = self.store.get(seq) {
            let state = SlotState::Expired;
            self.store.set(seq, Slot { state, ..slot });
            self.emit(RoomEvent::Ended { place: seq, state });
        }
    }

    /// The poll interval for someone in line `wait_s` from their turn with
    /// `in_line` live places before theirs, paced at the front
    /// ([`crate::poll`]) while the line moves at the rate: not paused, and
    /// the slots free now would take them too.
    pub(super) fn paced_poll_for(&mut self, wait_s: u64, in_line: u64) -> u8 {
        let min = self.policy.poll_min.as_secs() as u8;
        let max = self.policy.poll_max.as_secs() as u8;
        let max_active = u64::from(self.policy.max_active.get());
        let (held, pending) = (self.active.len() as u64, self.uncollected.len() as u64);
        let free = releasable(max_active, held, pending, self.share_milli());
        let releasing = !self.paused && in_line < free;
        paced_poll_after_s(wait_s, min, max, releasing, &mut self.rng)
    }

    /// Before the opening: come back around the opening, never sooner than
    /// `poll_min` nor later than `poll_max`.
    pub(super) fn poll_before_opening(&mut self, now_ms: u64, opens_at_ms: u64) -> u8 {
        let min = self.policy.poll_min.as_secs() as u8;
        let max = self.policy.poll_max.as_secs() as u8;
        fair_start::poll_before_opening_s(now_ms, opens_at_ms, min, max, &mut self.rng)
    }
}
