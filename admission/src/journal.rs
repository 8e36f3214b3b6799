//! The room's changes as events, so a store outside the process can keep
//! them: the room stays pure (it only emits [`RoomEvent`]s to an
//! [`EventSink`] the caller injects), and a room rebuilt from its events
//! ([`crate::WaitingRoom::restore`]) holds every place, ticket and pass it
//! held before.
//!
//! What is recorded is what cannot be worked out again: who joined when,
//! who ended how, which places were released as which pass, which passes
//! were collected and which gave their slot back (or were never collected),
//! how far the release went. What is not: polls (a
//! restart gives every waiting ticket a fresh idle window, which costs a
//! shopper nothing), rates, counters for metrics.
//!
//! Each event encodes to [`RECORD_BYTES`] bytes with a CRC-32, so a reader
//! can tell a torn last record (a crash mid-write: dropped) from a damaged
//! one in the middle (refused).

use thiserror::Error;

use crate::store::SlotState;

/// Bytes of one encoded event: kind, state, two spare bytes, the CRC-32 of
/// the rest, four 64-bit fields.
pub const RECORD_BYTES: usize = 40;

/// One change of a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomEvent {
    /// The room began; room second 0 is unix second `epoch_s`.
    Created { epoch_s: u64 },
    /// A ticket took place `place` at room second `joined_s`.
    Joined { place: u64, joined_s: u32 },
    /// A fair-start ticket `seq` joined the pre-queue.
    PreJoined { seq: u64, joined_s: u32 },
    /// The pre-queue was drawn into places at room second `opening_s`.
    Opened { opening_s: u32 },
    /// A waiting place ended without a pass (`Abandoned` or `Expired`).
    Ended { place: u64, state: SlotState },
    /// A pre-queue ticket stopped polling before the opening.
    PreAbandoned { seq: u64 },
    /// Place `place` was released as the room's pass `number`.
    Released {
        place: u64,
        number: u64,
        issued_at_s: u64,
        expires_at_s: u64,
    },
    /// The pass of place `place` gave its active slot back (or, never
    /// collected, its claim window ended: a no-show).
    GaveBack { place: u64 },
    /// The pass of released place `place` was collected: it holds a slot.
    Collected { place: u64 },
    /// Every place before `cursor` has been released or passed over.
    Cursor { cursor: u64 },
    /// A snapshot begins: the line starts at `start`, the release is at
    /// `cursor`, `admitted` passes were minted so far.
    Base {
        start: u64,
        cursor: u64,
        admitted: u64,
    },
    /// A snapshot's place, with its fate so far.
    Place {
        place: u64,
        joined_s: u32,
        state: SlotState,
    },
    /// A snapshot's pass that still holds its slot (`collected`), or a
    /// released place still waiting for its holder.
    Active {
        place: u64,
        number: u64,
        issued_at_s: u64,
        expires_at_s: u64,
        collected: bool,
    },
    /// A snapshot of a room whose pre-queue of `entrants` was drawn.
    Drawn { entrants: u64 },
    /// The pass of place `place` was ended before its time (idle, or by the
    /// origin): its slot is free, and it is refused until `expires_at_s`.
    PassEnded { place: u64, expires_at_s: u64 },
    /// Ticket `seq` (expiring at `expires_at_s`) was given to an account
    /// (the keyed hash of an enqueue token's `sub`, never the id): a join
    /// with the same account answers this place while it is live.
    Account {
        account: [u8; 16],
        seq: u64,
        expires_at_s: u64,
    },
    /// The account place `seq` collected its pass, which holds the
    /// account's place until `until_s`.
    AccountPass { seq: u64, until_s: u64 },
}

/// Where the room's events go. Called once per operation with everything
/// it changed, before the operation's answer is given.
pub trait EventSink: Send {
    fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError>;
}

/// The events could not be kept.
#[derive(Debug, Error)]
#[error("the room's journal could not be written: {0}")]
pub struct SinkError(pub String);

/// A record that is not an event.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("record checksum does not match")]
    Checksum,
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("unknown place state {0}")]
    State(u8),
    #[error("record field out of range")]
    Range,
}

const CRC_AT: usize = 4;
const FIELDS_AT: usize = 8;

fn state_byte(state: SlotState) -> u8 {
    state as u8
}

fn state_of(byte: u8) -> Result<SlotState, DecodeError> {
    Ok(match byte {
        0 => SlotState::Waiting,
        1 => SlotState::Abandoned,
        2 => SlotState::Expired,
        3 => SlotState::Released,
        other => return Err(DecodeError::State(other)),
    })
}

fn seconds(field: u64) -> Result<u32, DecodeError> {
    u32::try_from(field).map_err(|_| DecodeError::Range)
}

impl RoomEvent {
    /// The event as one fixed-size record.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        use RoomEvent::*;
        let (kind, state, fields): (u8, u8, [u64; 4]) = match *self {
            Created { epoch_s } => (1, 0, [epoch_s, 0, 0, 0]),
            Joined { place, joined_s } => (2, 0, [place, joined_s.into(), 0, 0]),
            PreJoined { seq, joined_s } => (3, 0, [seq, joined_s.into(), 0, 0]),
            Opened { opening_s } => (4, 0, [opening_s.into(), 0, 0, 0]),
            Ended { place, state } => (5, state_byte(state), [place, 0, 0, 0]),
            PreAbandoned { seq } => (6, 0, [seq, 0, 0, 0]),
            Released {
                place,
                number,
                issued_at_s,
                expires_at_s,
            } => (7, 0, [place, number, issued_at_s, expires_at_s]),
            GaveBack { place } => (8, 0, [place, 0, 0, 0]),
            Cursor { cursor } => (9, 0, [cursor, 0, 0, 0]),
            Base {
                start,
                cursor,
                admitted,
            } => (10, 0, [start, cursor, admitted, 0]),
            Place {
                place,
                joined_s,
                state,
            } => (11, state_byte(state), [place, joined_s.into(), 0, 0]),
            Active {
                place,
                number,
                issued_at_s,
                expires_at_s,
                collected,
            } => (
                12,
                u8::from(!collected),
                [place, number, issued_at_s, expires_at_s],
            ),
            Drawn { entrants } => (13, 0, [entrants, 0, 0, 0]),
            Collected { place } => (14, 0, [place, 0, 0, 0]),
            PassEnded {
                place,
                expires_at_s,
            } => (15, 0, [place, expires_at_s, 0, 0]),
            Account {
                account,
                seq,
                expires_at_s,
            } => {
                let (hi, lo) = account.split_at(8);
                let word = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
                (16, 0, [word(hi), word(lo), seq, expires_at_s])
            }
            AccountPass { seq, until_s } => (17, 0, [seq, until_s, 0, 0]),
        };
        let mut out = [0u8; RECORD_BYTES];
        out[0] = kind;
        out[1] = state;
        for (i, f) in fields.iter().enumerate() {
            let at = FIELDS_AT + i * 8;
            out[at..at + 8].copy_from_slice(&f.to_le_bytes());
        }
        let crc = checksum(&out);
        out[CRC_AT..FIELDS_AT].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The event of one record.
    pub fn decode(record: &[u8; RECORD_BYTES]) -> Result<Self, DecodeError> {
        let stored = u32::from_le_bytes([record[4], record[5], record[6], record[7]]);
        if stored != checksum(record) {
            return Err(DecodeError::Checksum);
        }
        let field = |i: usize| {
            let at = FIELDS_AT + i * 8;
            let mut b = [0u8; 8];
            b.copy_from_slice(&record[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let [a, b, c, d] = [field(0), field(1), field(2), field(3)];
        use RoomEvent::*;
        Ok(match record[0] {
            1 => Created { epoch_s: a },
            2 => Joined {
                place: a,
                joined_s: seconds(b)?,
            },
            3 => PreJoined {
                seq: a,
                joined_s: seconds(b)?,
            },
            4 => Opened {
                opening_s: seconds(a)?,
            },
            5 => Ended {
                place: a,
                state: state_of(record[1])?,
            },
            6 => PreAbandoned { seq: a },
            7 => Released {
                place: a,
                number: b,
                issued_at_s: c,
                expires_at_s: d,
            },
            8 => GaveBack { place: a },
            9 => Cursor { cursor: a },
            10 => Base {
                start: a,
                cursor: b,
                admitted: c,
            },
            11 => Place {
                place: a,
                joined_s: seconds(b)?,
                state: state_of(record[1])?,
            },
            // Snapshots written before collection was kept say 0:
            // collected, as every released pass then held its slot.
            12 => Active {
                place: a,
                number: b,
                issued_at_s: c,
                expires_at_s: d,
                collected: match record[1] {
                    0 => true,
                    1 => false,
                    other => return Err(DecodeError::State(other)),
                },
            },
            13 => Drawn { entrants: a },
            14 => Collected { place: a },
            15 => PassEnded {
                place: a,
                expires_at_s: b,
            },
            16 => {
                let mut account = [0u8; 16];
                account[..8].copy_from_slice(&a.to_be_bytes());
                account[8..].copy_from_slice(&b.to_be_bytes());
                Account {
                    account,
                    seq: c,
                    expires_at_s: d,
                }
            }
            17 => AccountPass { seq: a, until_s: b },
            other => return Err(DecodeError::Kind(other)),
        })
    }
}

/// CRC-32 of a record with its checksum field taken as zero.
fn checksum(record: &[u8; RECORD_BYTES]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&record[..CRC_AT]);
    h.update(&[0; FIELDS_AT - CRC_AT]);
    h.update(&record[FIELDS_AT..]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_round_trips_and_damage_is_caught() {
        let all = [
            RoomEvent::Created { epoch_s: 1 << 40 },
            RoomEvent::Joined {
                place: 7,
                joined_s: u32::MAX,
            },
            RoomEvent::PreJoined {
                seq: 3,
                joined_s: 9,
            },
            RoomEvent::Opened { opening_s: 60 },
            RoomEvent::Ended {
                place: 2,
                state: SlotState::Abandoned,
            },
            RoomEvent::PreAbandoned { seq: 4 },
            RoomEvent::Released {
                place: 1,
                number: 2,
                issued_at_s: 3,
                expires_at_s: 4,
            },
            RoomEvent::GaveBack { place: 5 },
            RoomEvent::Cursor { cursor: 6 },
            RoomEvent::Base {
                start: 1,
                cursor: 2,
                admitted: 3,
            },
            RoomEvent::Place {
                place: 8,
                joined_s: 1,
                state: SlotState::Released,
            },
            RoomEvent::Active {
                place: 8,
                number: 1,
                issued_at_s: 2,
                expires_at_s: 3,
                collected: true,
            },
            RoomEvent::Active {
                place: 9,
                number: 2,
                issued_at_s: 2,
                expires_at_s: 3,
                collected: false,
            },
            RoomEvent::Drawn { entrants: 10 },
            RoomEvent::Collected { place: 9 },
            RoomEvent::Account {
                account: *b"0123456789abcdef",
                seq: 11,
                expires_at_s: 1 << 33,
            },
            RoomEvent::AccountPass {
                seq: 11,
                until_s: 12,
            },
        ];
        for event in all {
            let mut record = event.encode();
            assert_eq!(RoomEvent::decode(&record), Ok(event));
            record[FIELDS_AT] ^= 1;
            assert_eq!(RoomEvent::decode(&record), Err(DecodeError::Checksum));
        }
        let mut bad_kind = [0u8; RECORD_BYTES];
        bad_kind[0] = 99;
        let crc = checksum(&bad_kind);
        bad_kind[CRC_AT..FIELDS_AT].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(RoomEvent::decode(&bad_kind), Err(DecodeError::Kind(99)));
    }
}
