//! The fair-start draw of a room on a fleet's shared line: where a ticket
//! stands, from the draw the shared store holds. Plain functions, no I/O.
//!
//! The store keeps no record per entrant: the pre-queue's tickets are the
//! seqs `first .. first + entrants` in arrival order (every gateway's joins
//! take numbers from the one counter, so a gateway that dies loses none),
//! the seed (and its commitment) is the first one a gateway proposed, and
//! the entrants are frozen by the first store call at or after the opening
//! (the store's clock). The places are then [`crate::fair_start`]'s draw,
//! exactly as one gateway draws them: pre-queue arrival `a` gets place
//! `first + places_of_arrivals(seed, entrants)[a]`, and the line releases
//! places in order, as it releases seqs on a room without a draw. A seq
//! outside the pre-queue is its own place.

use crate::fair_start::{commitment, places_of_arrivals, FairStartInfo};
use crate::room::{PreQueue, Status};

/// The draw as the store holds it (checked: the commitment is the seed's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDraw {
    /// The opening (unix ms) the store keeps: the first proposed.
    pub opens_at_ms: u64,
    /// The first pre-queue seq.
    pub first: u64,
    pub seed: [u8; 32],
    /// The pre-queue's tickets, once frozen at the opening.
    pub entrants: Option<u64>,
}

/// Why a stored draw is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrawError {
    #[error("the stored seed is not 64 hex digits")]
    BadSeed,
    #[error("the stored commitment is not SHA-256 of the stored seed")]
    CommitmentMismatch,
    #[error("the stored entrants ({0}) exceed what a draw can hold")]
    TooMany(u64),
}

impl StoredDraw {
    /// The draw from the store's hex seed and commitment.
    pub fn parse(
        opens_at_ms: u64,
        first: u64,
        seed_hex: &str,
        commitment_hex: &str,
        entrants: Option<u64>,
    ) -> Result<Self, DrawError> {
        let seed: [u8; 32] = hex::decode(seed_hex)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(DrawError::BadSeed)?;
        if hex::encode(commitment(&seed)) != commitment_hex.to_ascii_lowercase() {
            return Err(DrawError::CommitmentMismatch);
        }
        if let Some(n) = entrants.filter(|&n| n > u64::from(u32::MAX)) {
            return Err(DrawError::TooMany(n));
        }
        Ok(Self {
            opens_at_ms,
            first,
            seed,
            entrants,
        })
    }
}

/// Where a ticket of a room with a draw stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Located {
    /// In the pre-queue, not drawn yet.
    PreQueue,
    /// Its place in the line.
    Place(u64),
}

/// A stored draw with its places computed once it is frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drawn {
    pub stored: StoredDraw,
    /// `places[arrival] = place offset`, once frozen (empty before).
    places: Vec<u32>,
}

impl Drawn {
    pub fn new(stored: StoredDraw) -> Self {
        let places = match stored.entrants {
            Some(n) => places_of_arrivals(&stored.seed, n as u32),
            None => Vec::new(),
        };
        Self { stored, places }
    }

    pub fn opened(&self) -> bool {
        self.stored.entrants.is_some()
    }

    /// Where ticket `seq` stands.
    pub fn locate(&self, seq: u64) -> Located {
        let first = self.stored.first;
        if seq < first {
            return Located::Place(seq);
        }
        match self.stored.entrants {
            None => Located::PreQueue,
            Some(n) if seq - first < n => {
                let place = self.places[(seq - first) as usize];
                Located::Place(first + u64::from(place))
            }
            Some(_) => Located::Place(seq),
        }
    }

    /// What the room publishes: the commitment always, the seed once the
    /// pre-queue is frozen; `next` is the store's next seq (the entrants
    /// so far, before the freeze).
    pub fn info(&self, next: u64) -> FairStartInfo {
        FairStartInfo {
            opens_at_ms: self.stored.opens_at_ms,
            commitment_hex: hex::encode(commitment(&self.stored.seed)),
            seed_hex: self.opened().then(|| hex::encode(self.stored.seed)),
            entrants: self
                .stored
                .entrants
                .unwrap_or_else(|| next.saturating_sub(self.stored.first)),
        }
    }
}

/// The answer to a pre-queue ticket (`entrants` so far), as one gateway's
/// pre-queue gives it: come back around the opening.
pub fn pre_queue_status(
    opens_at_ms: u64,
    entrants: u64,
    poll_after_s: u8,
    ticket_ttl_s: u64,
) -> Status {
    Status::PreQueue(PreQueue {
        opens_at_ms,
        entrants,
        poll_after_s: u32::from(poll_after_s),
        expires_at_s: crate::fair_start::ticket_expires_at_s(opens_at_ms, ticket_ttl_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fair_start::draw_order;

    fn stored(first: u64, entrants: Option<u64>) -> StoredDraw {
        let seed = [5u8; 32];
        StoredDraw::parse(
            1_000,
            first,
            &hex::encode(seed),
            &hex::encode(commitment(&seed)),
            entrants,
        )
        .unwrap()
    }

    #[test]
    fn the_places_are_the_published_draw_shifted_by_the_first_seq() {
        let d = Drawn::new(stored(10, Some(50)));
        let order = draw_order(&[5u8; 32], 50);
        for (place, &arrival) in order.iter().enumerate() {
            assert_eq!(
                d.locate(10 + u64::from(arrival)),
                Located::Place(10 + place as u64)
            );
        }
        // Before the pre-queue and after it, a seq is its place.
        assert_eq!(d.locate(3), Located::Place(3));
        assert_eq!(d.locate(60), Located::Place(60));
        assert_eq!(d.info(70).entrants, 50);
        assert_eq!(d.info(70).seed_hex, Some(hex::encode([5u8; 32])));
    }

    #[test]
    fn before_the_freeze_the_seed_stays_hidden() {
        let d = Drawn::new(stored(0, None));
        assert_eq!(d.locate(7), Located::PreQueue);
        let info = d.info(9);
        assert_eq!(info.seed_hex, None);
        assert_eq!(info.entrants, 9);
        assert_eq!(info.commitment_hex, hex::encode(commitment(&[5u8; 32])));
    }

    #[test]
    fn a_stored_seed_that_is_not_its_commitment_is_refused() {
        let seed = hex::encode([5u8; 32]);
        let other = hex::encode(commitment(&[6u8; 32]));
        assert_eq!(
            StoredDraw::parse(0, 0, &seed, &other, None),
            Err(DrawError::CommitmentMismatch)
        );
        assert_eq!(
            StoredDraw::parse(0, 0, "zz", &other, None),
            Err(DrawError::BadSeed)
        );
    }
}
