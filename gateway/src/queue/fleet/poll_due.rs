//! When each waiting ticket polling this gateway may poll next, so an
//! early poll of a fleet room is refused as in the embedded room, without a
//! record per shopper in the store.
//!
//! Kept per room and per gateway, in memory, bounded: two generations of
//! at most [`GENERATION_MAX`] places each; when the newer one is full it
//! becomes the older and the older is dropped. So the gateway remembers at
//! least the last [`GENERATION_MAX`] tickets that polled it, in at most
//! `2 × 131,072` hash buckets of 17 bytes (16 for `seq` and due time, one
//! of control): about 4.3 MiB per room, whatever the line's length. A
//! ticket it forgot (dropped with a generation, or moved here from another
//! gateway by the balancer, or polled before a restart) gets one unchecked
//! poll, whose answer is remembered again.

use std::collections::HashMap;

/// Places per generation: 7/8 of 131,072 buckets, the most such a map
/// holds without growing past them.
pub const GENERATION_MAX: usize = 114_688;

/// `seq` → unix ms from which its next poll is on time.
#[derive(Debug, Default)]
pub struct PollDue {
    newer: HashMap<u64, u64>,
    older: HashMap<u64, u64>,
    max: usize,
}

impl PollDue {
    /// At most `2 × generation_max` places remembered.
    pub fn new(generation_max: usize) -> Self {
        Self {
            newer: HashMap::new(),
            older: HashMap::new(),
            max: generation_max.max(1),
        }
    }

    /// When place `seq` may poll next, if this gateway still remembers.
    pub fn get(&self, seq: u64) -> Option<u64> {
        self.newer
            .get(&seq)
            .or_else(|| self.older.get(&seq))
            .copied()
    }

    /// Place `seq` may poll next from `due_ms`.
    pub fn set(&mut self, seq: u64, due_ms: u64) {
        if self.newer.len() >= self.max && !self.newer.contains_key(&seq) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.older.remove(&seq);
        self.newer.insert(seq, due_ms);
    }

    /// Places remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_latest_and_stays_within_two_generations() {
        let mut due = PollDue::new(4);
        for seq in 0..100 {
            due.set(seq, 1_000 + seq);
            assert!(due.len() <= 8, "{}", due.len());
        }
        for seq in 96..100 {
            assert_eq!(due.get(seq), Some(1_000 + seq));
        }
        assert_eq!(due.get(0), None, "forgotten: one unchecked poll");
        // Polled again: the newer time stands, kept once.
        due.set(97, 5_000);
        assert_eq!(due.get(97), Some(5_000));
        assert!(due.len() <= 8);
    }
}
