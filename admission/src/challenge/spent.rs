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

/// Who spent a challenge: the place its join got (with what its ticket
/// says, so a retry is answered that very ticket), and which solution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SpentBy {
    pub seq: u64,
    /// [`super::VerifiedJoin::solution_tag`] of the join that spent it.
    pub solution_tag: u64,
    /// The place's ticket: its id (the JWT `sub`), `iat` and `exp`.
    pub ticket_id: [u8; 16],
    pub issued_at_s: u64,
    pub expires_at_s: u64,
}

/// What the record holds for a challenge: a join that carries it is being
/// answered (`Pending`), or it was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpentState {
    Pending { solution_tag: u64 },
    Spent(SpentBy),
}

impl SpentState {
    /// The text a shared store keeps (`p <tag>` or
    /// `s <tag> <seq> <ticket id hex> <iat> <exp>`).
    pub fn encode(&self) -> String {
        match self {
            SpentState::Pending { solution_tag } => format!("p {solution_tag}"),
            SpentState::Spent(by) => format!(
                "s {} {} {} {} {}",
                by.solution_tag,
                by.seq,
                hex::encode(by.ticket_id),
                by.issued_at_s,
                by.expires_at_s
            ),
        }
    }

    /// [`Self::encode`]'s text read back; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        let kind = parts.next()?;
        let tag: u64 = parts.next()?.parse().ok()?;
        let state = match kind {
            "p" => SpentState::Pending { solution_tag: tag },
            "s" => {
                let seq = parts.next()?.parse().ok()?;
                let mut ticket_id = [0u8; 16];
                hex::decode_to_slice(parts.next()?, &mut ticket_id).ok()?;
                let issued_at_s = parts.next()?.parse().ok()?;
                let expires_at_s = parts.next()?.parse().ok()?;
                SpentState::Spent(SpentBy {
                    seq,
                    solution_tag: tag,
                    ticket_id,
                    issued_at_s,
                    expires_at_s,
                })
            }
            _ => return None,
        };
        parts.next().is_none().then_some(state)
    }
}

/// What a verified join may do with its challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendDecision {
    /// Never used: join, and record the challenge as spent by the place it
    /// gets (only if it gets one).
    Fresh,
    /// The same solution already got this place: answer it again.
    SamePlace(SpentBy),
    /// The same solution is being answered right now (a retry sent before
    /// the first answer): ask again in a moment (`429` with
    /// `Retry-After: 1`).
    InFlight,
    /// Used by another join: `403 challenge_failed`.
    Replayed,
}

/// The rule: a challenge nobody spent is fresh; one spent with this very
/// solution answers that place; one spent, or being spent, otherwise is
/// replayed. (Whether the place is still live is the caller's question: a
/// place that is gone makes a same-solution retry a replay too.)
pub fn decide_spend(already: Option<SpentState>, solution_tag: u64) -> SpendDecision {
    match already {
        None => SpendDecision::Fresh,
        Some(SpentState::Spent(by)) if by.solution_tag == solution_tag => {
            SpendDecision::SamePlace(by)
        }
        Some(SpentState::Pending { solution_tag: t }) if t == solution_tag => {
            SpendDecision::InFlight
        }
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
/// capped at `capacity` entries (each a 16-byte key and 24 bytes of value
/// in the map, 24 bytes in the queue, plus the map's overhead; not
/// measured).
#[derive(Debug)]
pub struct SpentChallenges {
    by_nonce: HashMap<[u8; 16], (SpentState, u64)>,
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

    /// Who spent the challenge `nonce` (or is spending it), if it is
    /// recorded and not expired at `now_s`.
    pub fn lookup(&mut self, nonce: &[u8; 16], now_s: u64) -> Option<SpentState> {
        self.prune(now_s);
        self.by_nonce
            .get(nonce)
            .filter(|(_, expires)| now_s < *expires)
            .map(|(by, _)| *by)
    }

    /// Marks `nonce` as being spent by the join with `solution_tag` unless
    /// it is recorded already: `Ok(None)` when this join took it, else what
    /// the record holds (for [`decide_spend`]). As a shared store's
    /// `SET NX GET`.
    pub fn reserve(
        &mut self,
        nonce: [u8; 16],
        solution_tag: u64,
        expires_at_s: u64,
        now_s: u64,
    ) -> Result<Option<SpentState>, SpentFull> {
        if let Some(state) = self.lookup(&nonce, now_s) {
            return Ok(Some(state));
        }
        self.insert(
            nonce,
            SpentState::Pending { solution_tag },
            expires_at_s,
            now_s,
        )?;
        Ok(None)
    }

    /// The reserved `nonce` was spent by the place `by` got.
    pub fn confirm(&mut self, nonce: &[u8; 16], by: SpentBy) {
        if let Some((state, _)) = self.by_nonce.get_mut(nonce) {
            *state = SpentState::Spent(by);
        }
    }

    /// The join that reserved `nonce` got no place: the challenge is not
    /// spent (its entry in the expiry queue goes with the next prune).
    pub fn release(&mut self, nonce: &[u8; 16]) {
        if matches!(
            self.by_nonce.get(nonce),
            Some((SpentState::Pending { .. }, _))
        ) {
            self.by_nonce.remove(nonce);
        }
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
        self.insert(nonce, SpentState::Spent(by), expires_at_s, now_s)
    }

    fn insert(
        &mut self,
        nonce: [u8; 16],
        state: SpentState,
        expires_at_s: u64,
        now_s: u64,
    ) -> Result<(), SpentFull> {
        self.prune(now_s);
        if self.by_nonce.contains_key(&nonce) {
            return Ok(());
        }
        // Entries released before they expired still wait in `order`.
        if self.order.len() >= self.capacity.saturating_mul(2) {
            let live = &self.by_nonce;
            self.order.retain(|(n, _)| live.contains_key(n));
        }
        if self.by_nonce.len() >= self.capacity {
            let oldest = self.order.front().map_or(now_s + 1, |(_, e)| *e);
            return Err(SpentFull {
                retry_after_s: oldest.saturating_sub(now_s).max(1),
            });
        }
        self.by_nonce.insert(nonce, (state, expires_at_s));
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
            if self
                .by_nonce
                .get(&nonce)
                .is_some_and(|(_, e)| *e == expires)
            {
                self.by_nonce.remove(&nonce);
            }
        }
    }
}
