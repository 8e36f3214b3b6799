//! The fair-start pre-queue of a room: tickets taken before the opening,
//! then drawn into places (see [`crate::fair_start`]).

use crate::fair_start::{commitment, draw_order, places_of_arrivals, FairStartInfo};
use crate::store::{QueueStore, Slot};

#[derive(Debug)]
pub(crate) struct PreQueueState {
    pub opens_at_ms: u64,
    seed: [u8; 32],
    /// Before the draw: slots by arrival number (= `seq`).
    pub slots: Vec<Slot>,
    /// After the draw: place offset of each arrival number.
    place_of_seq: Vec<u32>,
    pub opened: bool,
}

impl PreQueueState {
    pub fn new(opens_at_ms: u64, seed: [u8; 32]) -> Self {
        Self {
            opens_at_ms,
            seed,
            slots: Vec::new(),
            place_of_seq: Vec::new(),
            opened: false,
        }
    }

    /// Arrivals in the pre-queue.
    pub fn entrants(&self) -> u64 {
        if self.opened {
            self.place_of_seq.len() as u64
        } else {
            self.slots.len() as u64
        }
    }

    /// Draws the pre-queue into `store` (which must be empty, so places
    /// start at 0); every ticket's clock restarts at `opening_s`.
    pub fn open(&mut self, store: &mut impl QueueStore, opening_s: u32) {
        let n = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        let order = draw_order(&self.seed, n);
        self.place_of_seq = vec![0; order.len()];
        for (place, &arrival) in order.iter().enumerate() {
            let Some(mut slot) = self.slots.get(arrival as usize).copied() else {
                continue;
            };
            slot.joined_s = opening_s;
            // The store is sized for twice the queue capacity and the
            // pre-queue holds at most the capacity, so this fits.
            if store.push(slot).is_some() {
                self.place_of_seq[arrival as usize] = place as u32;
            }
        }
        self.slots = Vec::new();
        self.opened = true;
    }

    /// After a restart: the draw of `entrants` was made before; only the
    /// map from arrival to place is needed again (the places themselves
    /// come back from the snapshot).
    pub fn restore_drawn(&mut self, entrants: u32) {
        self.place_of_seq = places_of_arrivals(&self.seed, entrants);
        self.slots = Vec::new();
        self.opened = true;
    }

    /// The place of a pre-queue `seq` after the draw.
    pub fn place_of(&self, seq: u64) -> Option<u64> {
        let i = usize::try_from(seq).ok()?;
        self.place_of_seq.get(i).map(|&p| u64::from(p))
    }

    pub fn info(&self) -> FairStartInfo {
        FairStartInfo {
            opens_at_ms: self.opens_at_ms,
            commitment_hex: hex::encode(commitment(&self.seed)),
            seed_hex: self.opened.then(|| hex::encode(self.seed)),
            entrants: self.entrants(),
        }
    }
}
