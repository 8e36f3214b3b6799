//! Each challenge admits one join, once, fleet-wide.
//!
//! A challenge is spent only by a join that got a place; the record keeps
//! which place (`seq`) and which solution, so a retry whose answer was lost
//! (the same challenge and solution again) gets the same place, while any
//! other use is refused. The record of a challenge is kept until the
//! challenge expires, no longer.
//!
//! [`decide_spend`] is the one rule; [`SpentChallenges`] is the record of
//! one gateway (bounded), and the fleet keeps the same pair
//! ([`SpentBy`]) in Redis with the challenge's expiry as its TTL and asks
//! the same function.

use std::collections::{HashMap, VecDeque};

/// Who spent a challenge: the place its join got, and which solution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpentBy {
    pub seq: u64,
    /// [`super::VerifiedJoin::solution_tag`] of the join that spent it.
    pub solution_tag: u64,
}

/// What a verified join may do with its challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendDecision {
    /// Never used: join, and record the challenge as spent by the place it
    /// gets (only if it gets one).
    Fresh,
    /// The same solution already got this place: answer it again.
    SamePlace { seq: u64 },
    /// Used by another join: `403 challenge_failed`.
    Replayed,
}

/// The rule: a challenge nobody spent is fresh; one spent with this very
/// solution answers that place; one spent otherwise is replayed. (Whether
/// the place is still live is the caller's question: a place that is gone
/// makes a same-solution retry a replay too.)
pub fn decide_spend(already: Option<SpentBy>, solution_tag: u64) -> SpendDecision {
    match already {
        None => SpendDecision::Fresh,
        Some(by) if by.solution_tag == solution_tag => SpendDecision::SamePlace { seq: by.seq },
        Some(_) => SpendDecision::Replayed,
    }
}

/// The record is full of challenges that have not expired yet: the join
/// cannot be made single-use, so it is refused for now (`503` with
/// `Retry-After` of `retry_after_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the record of spent challenges is full for another {retry_after_s} s")]
pub struct SpentFull {
    pub retry_after_s: u64,
}

/// One gateway's record of spent challenges, kept until each expires and
/// capped at `capacity` entries (about 100 bytes each).
#[derive(Debug)]
pub struct SpentChallenges {
    by_nonce: HashMap<[u8; 16], (SpentBy, u64)>,
    /// Nonces in the order they were recorded, with their expiry; with
    /// one TTL per room this is also expiry order, so pruning the front
    /// is enough (an entry recorded under a longer TTL before a reload
    /// only delays the ones behind it, within the cap).
    order: VecDeque<([u8; 16], u64)>,
    capacity: usize,
}

impl SpentChallenges {
    /// A record holding at most `capacity` (at least 1) unexpired entries.
    pub fn new(capacity: usize) -> Self {
        Self {
            by_nonce: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Who spent the challenge `nonce`, if it is recorded and not expired
    /// at `now_s`.
    pub fn lookup(&mut self, nonce: &[u8; 16], now_s: u64) -> Option<SpentBy> {
        self.prune(now_s);
        self.by_nonce
            .get(nonce)
            .filter(|(_, expires)| now_s < *expires)
            .map(|(by, _)| *by)
    }

    /// Records `nonce` as spent by `by` until `expires_at_s`. Refused when
    /// the record is full of unexpired entries; recording a nonce already
    /// there keeps the first record (the first join that got a place).
    pub fn record(
        &mut self,
        nonce: [u8; 16],
        by: SpentBy,
        expires_at_s: u64,
        now_s: u64,
    ) -> Result<(), SpentFull> {
        self.prune(now_s);
        if self.by_nonce.contains_key(&nonce) {
            return Ok(());
        }
        if self.by_nonce.len() >= self.capacity {
            let oldest = self.order.front().map_or(now_s + 1, |(_, e)| *e);
            return Err(SpentFull {
                retry_after_s: oldest.saturating_sub(now_s).max(1),
            });
        }
        self.by_nonce.insert(nonce, (by, expires_at_s));
        self.order.push_back((nonce, expires_at_s));
        Ok(())
    }

    /// Unexpired entries held.
    pub fn len(&self) -> usize {
        self.by_nonce.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_nonce.is_empty()
    }

    fn prune(&mut self, now_s: u64) {
        while let Some(&(nonce, expires)) = self.order.front() {
            if expires > now_s {
                break;
            }
            self.order.pop_front();
            self.by_nonce.remove(&nonce);
        }
    }
}
