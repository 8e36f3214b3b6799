//! A room that outlives its process: rebuilt from its events
//! ([`WaitingRoom::restore`]) and summarised into a snapshot of events
//! ([`WaitingRoom::snapshot`]) so the record of it stays bounded.

use std::sync::Arc;

use rand::rngs::StdRng;
use thiserror::Error;

use super::pre_queue::PreQueueState;
use super::{store_places_max, ActivePass, PendingPass, WaitingRoom, CLAIM_SLACK_S};
use crate::journal::{EventSink, RoomEvent};
use crate::no_show::claim_window_ms;
use crate::policy::{Policy, PolicyError};
use crate::stock::StockAuthority;
use crate::store::{MemoryStore, QueueStore, Slot, SlotState};
use crate::ticket_id::TicketIdKey;

/// Why a room's events do not make a room.
#[derive(Debug, Error)]
pub enum RestoreError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("event {index} ({event:?}) does not follow from the ones before it: {why}")]
    Inconsistent {
        index: usize,
        event: RoomEvent,
        why: &'static str,
    },
    #[error("the room's first event is not its creation")]
    NoCreation,
    #[error(transparent)]
    Sink(#[from] crate::journal::SinkError),
}

impl WaitingRoom<MemoryStore> {
    /// The room `events` describe (a new one when there are none), whose
    /// changes from now on go to `sink`.
    ///
    /// `key` is the gateway's ticket-id key, kept across restarts: ticket
    /// ids and the fair-start seed derive from it. Every place, ticket and
    /// pass of the events is held again; waiting tickets get a fresh idle
    /// window from `now_ms` and may poll at once (the restart was not their
    /// doing). The release pace starts with its whole burst.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        name: &str,
        policy: Policy,
        stock: Arc<dyn StockAuthority>,
        key: [u8; 32],
        rng: StdRng,
        now_ms: u64,
        events: impl IntoIterator<Item = RoomEvent>,
        sink: Box<dyn EventSink>,
    ) -> Result<Self, RestoreError> {
        let ids = TicketIdKey::new(key);
        let seed = policy
            .opens_at_ms
            .map_or([0; 32], |at| ids.fair_start_seed(name, at));
        let places_max = store_places_max(&policy);
        // While replaying, a line longer than today's capacity (a lowered
        // `queue_capacity`) is still restored whole.
        let store = MemoryStore::new(usize::MAX);
        let mut room = Self::build(name, policy, store, stock, ids, seed, rng, now_ms)?;
        let mut created = false;
        for (index, event) in events.into_iter().enumerate() {
            if !created && !matches!(event, RoomEvent::Created { .. }) {
                return Err(RestoreError::NoCreation);
            }
            created = true;
            room.apply(event, now_ms)
                .map_err(|why| RestoreError::Inconsistent { index, event, why })?;
        }
        room.store.set_slots_max(places_max);
        room.sweep_at = room.cursor;
        let now_s = Self::unix_s(now_ms);
        room.active.retain(|_, pass| now_s < pass.expires_at_s);
        room.uncollected.retain(|_, p| now_s < p.pass.expires_at_s);
        room.sink = Some(sink);
        room.publish();
        if !created {
            room.emit(RoomEvent::Created {
                epoch_s: room.epoch_s,
            });
            if !room.flush() {
                return Err(RestoreError::Sink(crate::journal::SinkError(
                    "the room's creation could not be recorded".into(),
                )));
            }
        }
        Ok(room)
    }

    /// Replays one event onto the room being restored.
    fn apply(&mut self, event: RoomEvent, now_ms: u64) -> Result<(), &'static str> {
        let now_s = self.room_s(now_ms);
        let restored = |joined_s: u32, state: SlotState| Slot {
            joined_s,
            last_poll_s: now_s.max(joined_s),
            poll_after_s: 0,
            state,
        };
        match event {
            RoomEvent::Created { epoch_s } => {
                if self.store.end() != 0 || self.cursor != 0 {
                    return Err("a room is created only once");
                }
                self.epoch_s = epoch_s;
            }
            RoomEvent::Joined { place, joined_s } => {
                self.push_at(place, restored(joined_s, SlotState::Waiting))?
            }
            RoomEvent::Place {
                place,
                joined_s,
                state,
            } => self.push_at(place, restored(joined_s, state))?,
            RoomEvent::PreJoined { seq, joined_s } => {
                let pre = self.pre_queue_waiting()?;
                if seq != pre.entrants() {
                    return Err("pre-queue arrivals come in order");
                }
                pre.slots.push(restored(joined_s, SlotState::Waiting));
            }
            RoomEvent::PreAbandoned { seq } => {
                let pre = self.pre_queue_waiting()?;
                let slot = usize::try_from(seq)
                    .ok()
                    .and_then(|i| pre.slots.get_mut(i))
                    .ok_or("no such pre-queue arrival")?;
                slot.state = SlotState::Abandoned;
            }
            RoomEvent::Opened { opening_s } => {
                self.pre_queue_waiting()?;
                if let Some(pre) = self.pre_queue.as_mut() {
                    pre.open(&mut self.store, opening_s);
                }
            }
            RoomEvent::Drawn { entrants } => {
                let entrants = u32::try_from(entrants).map_err(|_| "too many entrants")?;
                self.pre_queue_waiting()?.restore_drawn(entrants);
            }
            RoomEvent::Ended { place, state } => {
                if !matches!(state, SlotState::Abandoned | SlotState::Expired) {
                    return Err("a place ends abandoned or expired");
                }
                // A place already trimmed ended long ago.
                if let Some(slot) = self.store.get(place) {
                    if !self.store.set(place, Slot { state, ..slot }) {
                        return Err("an ended place ends once");
                    }
                }
            }
            RoomEvent::Released {
                place,
                number,
                issued_at_s,
                expires_at_s,
            } => {
                if let Some(slot) = self.store.get(place) {
                    let released = Slot {
                        state: SlotState::Released,
                        ..slot
                    };
                    if !self.store.set(place, released) {
                        return Err("only a waiting place is released");
                    }
                }
                self.release_pending(place, number, issued_at_s, expires_at_s, now_ms);
                self.counters.admitted = self.counters.admitted.max(number);
                self.cursor = self.cursor.max(place + 1);
            }
            RoomEvent::Active {
                place,
                number,
                issued_at_s,
                expires_at_s,
                collected: true,
            } => self.activate(place, number, issued_at_s, expires_at_s),
            RoomEvent::Active {
                place,
                number,
                issued_at_s,
                expires_at_s,
                collected: false,
            } => self.release_pending(place, number, issued_at_s, expires_at_s, now_ms),
            RoomEvent::Collected { place } => {
                let pending = self
                    .uncollected
                    .remove(&place)
                    .ok_or("only a released place is collected")?;
                self.active.insert(place, pending.pass);
            }
            RoomEvent::GaveBack { place } => {
                self.active.remove(&place);
                self.uncollected.remove(&place);
            }
            RoomEvent::PassEnded {
                place,
                expires_at_s,
            } => {
                self.active.remove(&place);
                self.ended.insert(place, expires_at_s);
            }
            RoomEvent::Account {
                account,
                seq,
                expires_at_s,
            } => self.accounts.insert(
                crate::enqueue::AccountHash(account),
                super::accounts::AccountPlace {
                    seq,
                    ticket_expires_s: expires_at_s,
                    pass_until_s: None,
                },
            ),
            RoomEvent::AccountPass { seq, until_s } => self.accounts.set_pass(seq, until_s),
            RoomEvent::Cursor { cursor } => {
                self.cursor = self.cursor.max(cursor);
                self.store.trim_before(self.cursor, usize::MAX);
            }
            RoomEvent::Base {
                start,
                cursor,
                admitted,
            } => {
                if !self.store.start_at(start) {
                    return Err("a snapshot starts an empty line");
                }
                self.cursor = cursor;
                self.counters.admitted = admitted;
            }
        }
        Ok(())
    }

    fn push_at(&mut self, place: u64, slot: Slot) -> Result<(), &'static str> {
        if place != self.store.end() {
            return Err("places are given in order");
        }
        self.store
            .push(slot)
            .ok_or("the line is over its hard size")?;
        Ok(())
    }

    fn activate(&mut self, place: u64, number: u64, issued_at_s: u64, expires_at_s: u64) {
        self.active.insert(
            place,
            ActivePass {
                number,
                issued_at_s,
                expires_at_s,
                // Idle counts from the restart, not from before it.
                last_active_s: self.view.seen_s().max(issued_at_s),
                checkouts_running: 0,
            },
        );
    }

    /// A released place waiting for its holder, who gets a fresh claim
    /// window from the restart (like a waiting ticket's idle window).
    fn release_pending(
        &mut self,
        place: u64,
        number: u64,
        issued_at_s: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) {
        let pass = ActivePass {
            number,
            issued_at_s,
            expires_at_s,
            last_active_s: Self::unix_s(now_ms).max(issued_at_s),
            checkouts_running: 0,
        };
        let window_s = claim_window_ms(&self.policy) / 1000;
        let claim_by_s = Self::unix_s(now_ms) + window_s.max(CLAIM_SLACK_S);
        self.uncollected
            .insert(place, PendingPass { pass, claim_by_s });
    }

    fn pre_queue_waiting(&mut self) -> Result<&mut PreQueueState, &'static str> {
        match self.pre_queue.as_mut() {
            Some(pre) if !pre.opened => Ok(pre),
            Some(_) => Err("the pre-queue was already drawn"),
            None => Err("this room has no fair start (was `opens_at` removed?)"),
        }
    }

    /// Events enough to rebuild the room as it is now, for `visit`, in
    /// replay order. About [`Self::snapshot_records`] of them.
    pub fn snapshot(&self, visit: &mut dyn FnMut(RoomEvent)) {
        visit(RoomEvent::Created {
            epoch_s: self.epoch_s,
        });
        visit(RoomEvent::Base {
            start: self.store.start(),
            cursor: self.cursor,
            admitted: self.counters.admitted,
        });
        if let Some(pre) = &self.pre_queue {
            if pre.opened {
                visit(RoomEvent::Drawn {
                    entrants: pre.entrants(),
                });
            } else {
                for (seq, slot) in pre.slots.iter().enumerate() {
                    let seq = seq as u64;
                    visit(RoomEvent::PreJoined {
                        seq,
                        joined_s: slot.joined_s,
                    });
                    if slot.state != SlotState::Waiting {
                        visit(RoomEvent::PreAbandoned { seq });
                    }
                }
            }
        }
        for place in self.store.start()..self.store.end() {
            if let Some(slot) = self.store.get(place) {
                visit(RoomEvent::Place {
                    place,
                    joined_s: slot.joined_s,
                    state: slot.state,
                });
            }
        }
        let held = self.active.iter().map(|(p, pass)| (p, pass, true));
        let pending = self.uncollected.iter().map(|(p, pp)| (p, &pp.pass, false));
        for (&place, pass, collected) in held.chain(pending) {
            visit(RoomEvent::Active {
                place,
                number: pass.number,
                issued_at_s: pass.issued_at_s,
                expires_at_s: pass.expires_at_s,
                collected,
            });
        }
        for (&place, &expires_at_s) in &self.ended {
            visit(RoomEvent::PassEnded {
                place,
                expires_at_s,
            });
        }
        let now_ms = self.view.seen_s().saturating_mul(1000);
        for (account, place) in self.accounts.iter() {
            if !self.account_place_live(place, now_ms) {
                continue;
            }
            visit(RoomEvent::Account {
                account: account.0,
                seq: place.seq,
                expires_at_s: place.ticket_expires_s,
            });
            if let Some(until_s) = place.pass_until_s {
                visit(RoomEvent::AccountPass {
                    seq: place.seq,
                    until_s,
                });
            }
        }
    }

    /// How many events [`Self::snapshot`] gives, about.
    pub fn snapshot_records(&self) -> u64 {
        let pre = self
            .pre_queue
            .as_ref()
            .filter(|p| !p.opened)
            .map_or(0, |p| p.entrants());
        2 + pre
            + self.store.len() as u64
            + (self.active.len() + self.uncollected.len() + self.ended.len()) as u64
            + 2 * self.accounts.len() as u64
    }
}
