//! The in-process [`QueueStore`]: a ring of 12-byte slots plus a live count
//! per block of places, so "how many are ahead of me" costs a bounded sum
//! instead of a walk over the line.

use std::collections::VecDeque;

use super::{QueueStore, Slot, SlotState};

/// Places per live-count block. Counting who is ahead sums at most
/// `len / BLOCK_PLACES / 2` blocks and scans at most `BLOCK_PLACES` slots.
const BLOCK_PLACES: u64 = 1024;

#[derive(Debug)]
pub struct MemoryStore {
    slots: VecDeque<Slot>,
    /// Place of `slots[0]`.
    start: u64,
    /// Live (`Waiting`) slots per block; `blocks[0]` is block
    /// `start / BLOCK_PLACES`.
    blocks: VecDeque<u32>,
    live: u64,
    slots_max: usize,
}

impl MemoryStore {
    /// An empty line that will hold at most `slots_max` places.
    pub fn new(slots_max: usize) -> Self {
        Self {
            slots: VecDeque::new(),
            start: 0,
            blocks: VecDeque::new(),
            live: 0,
            slots_max,
        }
    }

    /// Makes an empty store's first place `place` (a line restored from a
    /// snapshot whose front was already released); `false` if not empty.
    pub fn start_at(&mut self, place: u64) -> bool {
        if !self.slots.is_empty() {
            return false;
        }
        self.start = place;
        self.blocks.clear();
        true
    }

    /// Changes the hard size; places already held stay even above it.
    pub fn set_slots_max(&mut self, slots_max: usize) {
        self.slots_max = slots_max;
    }

    /// Places held, from the front to the end.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn end_place(&self) -> u64 {
        self.start + self.slots.len() as u64
    }

    fn block_index(&self, place: u64) -> usize {
        (place / BLOCK_PLACES - self.start / BLOCK_PLACES) as usize
    }

    fn count_live(&self, from: u64, to: u64) -> u64 {
        let (from, to) = (from.max(self.start), to.min(self.end_place()));
        if from >= to {
            return 0;
        }
        let a = (from - self.start) as usize;
        let b = (to - self.start) as usize;
        self.slots
            .range(a..b)
            .filter(|s| s.state == SlotState::Waiting)
            .count() as u64
    }

    fn adjust(&mut self, place: u64, was_live: bool, is_live: bool) {
        if was_live == is_live {
            return;
        }
        let i = self.block_index(place);
        if let Some(block) = self.blocks.get_mut(i) {
            if is_live {
                *block += 1;
                self.live += 1;
            } else {
                *block = block.saturating_sub(1);
                self.live = self.live.saturating_sub(1);
            }
        }
    }
}

impl QueueStore for MemoryStore {
    fn push(&mut self, slot: Slot) -> Option<u64> {
        if self.slots.len() >= self.slots_max {
            return None;
        }
        let place = self.end_place();
        if self.block_index(place) == self.blocks.len() {
            self.blocks.push_back(0);
        }
        self.slots.push_back(slot);
        if slot.state == SlotState::Waiting {
            self.adjust(place, false, true);
        }
        Some(place)
    }

    fn get(&self, place: u64) -> Option<Slot> {
        let i = place.checked_sub(self.start)?;
        self.slots.get(usize::try_from(i).ok()?).copied()
    }

    fn set(&mut self, place: u64, slot: Slot) -> bool {
        let Some(old) = self.get(place) else {
            return false;
        };
        if !old.state.can_become(slot.state) {
            return false;
        }
        self.adjust(
            place,
            old.state == SlotState::Waiting,
            slot.state == SlotState::Waiting,
        );
        let i = (place - self.start) as usize;
        self.slots[i] = slot;
        true
    }

    fn start(&self) -> u64 {
        self.start
    }

    fn end(&self) -> u64 {
        self.end_place()
    }

    fn live(&self) -> u64 {
        self.live
    }

    fn live_before(&self, place: u64) -> u64 {
        let place = place.clamp(self.start, self.end_place());
        let first_block = self.start / BLOCK_PLACES;
        let block = place / BLOCK_PLACES;
        let block_start = block * BLOCK_PLACES;
        let i = (block - first_block) as usize;
        // Sum whichever side of `place` has fewer blocks.
        if i <= self.blocks.len() / 2 {
            let full: u64 = self.blocks.range(..i).map(|&n| u64::from(n)).sum();
            full + self.count_live(block_start, place)
        } else {
            let after: u64 = self
                .blocks
                .range((i + 1).min(self.blocks.len())..)
                .map(|&n| u64::from(n))
                .sum();
            let tail = self.count_live(place, block_start + BLOCK_PLACES);
            self.live.saturating_sub(after + tail)
        }
    }

    fn trim_before(&mut self, place: u64, limit: usize) -> usize {
        let mut dropped = 0;
        while self.start < place && dropped < limit {
            let Some(front) = self.slots.front().copied() else {
                break;
            };
            self.adjust(self.start, front.state == SlotState::Waiting, false);
            self.slots.pop_front();
            self.start += 1;
            dropped += 1;
            if self.start.is_multiple_of(BLOCK_PLACES) {
                self.blocks.pop_front();
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_at(i: u64) -> SlotState {
        match i % 3 {
            0 => SlotState::Waiting,
            1 => SlotState::Abandoned,
            _ => {
                if i.is_multiple_of(7) {
                    SlotState::Waiting
                } else {
                    SlotState::Expired
                }
            }
        }
    }

    #[test]
    fn live_before_matches_a_walk_everywhere() {
        let mut store = MemoryStore::new(10_000);
        for i in 0..5000u64 {
            let place = store
                .push(Slot {
                    state: state_at(i),
                    ..Slot::waiting(0, 2)
                })
                .unwrap();
            assert_eq!(place, i);
        }
        store.trim_before(1500, 100_000);
        assert_eq!(store.start(), 1500);
        let walk = |p: u64| {
            (1500..p)
                .filter(|&i| state_at(i) == SlotState::Waiting)
                .count() as u64
        };
        assert_eq!(store.live(), walk(5000));
        for p in (1500..=5000)
            .step_by(37)
            .chain([1500, 2047, 2048, 4999, 5000])
        {
            assert_eq!(store.live_before(p), walk(p), "place {p}");
        }
        let mut s = store.get(3000).unwrap();
        s.state = SlotState::Released;
        assert!(store.set(3000, s));
        s.state = SlotState::Waiting;
        assert!(!store.set(3000, s), "a released place never waits again");
        assert_eq!(store.live_before(3001), walk(3001) - 1);
        assert!(store.get(1499).is_none());
        assert!(!store.set(9999, s));
    }

    #[test]
    fn push_stops_at_the_hard_limit_and_trim_respects_limit() {
        let mut store = MemoryStore::new(3);
        for _ in 0..3 {
            assert!(store.push(Slot::waiting(0, 2)).is_some());
        }
        assert_eq!(store.push(Slot::waiting(0, 2)), None);
        assert_eq!(store.trim_before(3, 2), 2);
        assert_eq!(store.live(), 1);
        assert_eq!(store.push(Slot::waiting(0, 2)), Some(3));
    }
}
