//! The last on-time answer each ticket had, readable without the room's
//! lock: what deciding an early poll needs ([`super::view`]).
//!
//! A direct-mapped table indexed by `seq` modulo its size (a power of two,
//! at most [`DUES_MAX`]): one entry per index, the newest write wins, so
//! `DUES_MAX` consecutive tickets never push each other out and a ticket
//! pushed out only costs one poll through the room. Each entry is a
//! seqlock of eight words (64 bytes, one cache line): the room, under its
//! own lock, is the only writer; readers on any thread copy the words and
//! keep the copy only if the entry's version was even and unchanged
//! around it, so a reader never sees half of a write, and never waits.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::ticket_id::TicketId;

/// Most entries of one room's table: 64 bytes each, 4 MiB.
pub const DUES_MAX: usize = 1 << 16;

/// Where the ticket stands, as its last answer found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueAt {
    /// In line at this place.
    Place(u64),
    /// In the fair-start pre-queue, before the opening.
    PreQueue,
}

/// A ticket's last answer that set its next poll: `seq` with the id the
/// room checked for it, its place, and the slot's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub seq: u64,
    pub ticket_id: TicketId,
    pub at: DueAt,
    /// The slot's `joined_s`, `last_poll_s` and `poll_after_s` (room
    /// seconds) as the room wrote them with this answer.
    pub joined_s: u32,
    pub last_poll_s: u32,
    pub poll_after_s: u8,
    /// The room's generation the answer was given in, and the time-outs
    /// in force in it (see [`super::view::RoomView`]).
    pub generation: u64,
    pub limits: Limits,
}

/// The time-outs that end a waiting slot, in seconds (saturated at
/// `u32::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub ticket_ttl_s: u32,
    pub idle_timeout_s: u32,
}

/// `place` of a pre-queue entry.
const PRE_QUEUE: u64 = u64::MAX;

#[repr(align(64))]
struct Entry {
    /// Odd while being written.
    version: AtomicU64,
    /// `seq + 1`; 0 for an empty entry.
    key: AtomicU64,
    id_hi: AtomicU64,
    id_lo: AtomicU64,
    place: AtomicU64,
    /// `joined_s << 32 | last_poll_s`.
    times: AtomicU64,
    /// `ticket_ttl_s << 32 | idle_timeout_s`.
    limits: AtomicU64,
    /// `generation << 8 | poll_after_s`.
    generation: AtomicU64,
}

impl Entry {
    fn empty() -> Self {
        Self {
            version: AtomicU64::new(0),
            key: AtomicU64::new(0),
            id_hi: AtomicU64::new(0),
            id_lo: AtomicU64::new(0),
            place: AtomicU64::new(0),
            times: AtomicU64::new(0),
            limits: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }
}

/// One room's table of [`Due`]s.
pub struct PollDues {
    entries: Box<[Entry]>,
    mask: u64,
}

impl PollDues {
    /// A table for a line of about `places` tickets: the next power of two,
    /// at most [`DUES_MAX`].
    pub fn new(places: usize) -> Self {
        let size = places.clamp(1, DUES_MAX).next_power_of_two();
        Self {
            entries: (0..size).map(|_| Entry::empty()).collect(),
            mask: size as u64 - 1,
        }
    }

    fn entry(&self, seq: u64) -> &Entry {
        &self.entries[(seq & self.mask) as usize]
    }

    /// Records `due`, replacing whatever its index held. Only the room
    /// writes, under its lock: there is never a second writer.
    pub(crate) fn set(&self, due: &Due) {
        let e = self.entry(due.seq);
        let v = e.version.load(Ordering::Relaxed);
        e.version.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let id = due.ticket_id.as_bytes();
        let hi = u64::from_be_bytes(id[..8].try_into().expect("8 bytes"));
        let lo = u64::from_be_bytes(id[8..].try_into().expect("8 bytes"));
        e.key.store(due.seq.wrapping_add(1), Ordering::Relaxed);
        e.id_hi.store(hi, Ordering::Relaxed);
        e.id_lo.store(lo, Ordering::Relaxed);
        let place = match due.at {
            DueAt::Place(place) => place,
            DueAt::PreQueue => PRE_QUEUE,
        };
        e.place.store(place, Ordering::Relaxed);
        let times = u64::from(due.joined_s) << 32 | u64::from(due.last_poll_s);
        e.times.store(times, Ordering::Relaxed);
        let limits =
            u64::from(due.limits.ticket_ttl_s) << 32 | u64::from(due.limits.idle_timeout_s);
        e.limits.store(limits, Ordering::Relaxed);
        let generation = due.generation << 8 | u64::from(due.poll_after_s);
        e.generation.store(generation, Ordering::Relaxed);
        e.version.store(v.wrapping_add(2), Ordering::Release);
    }

    /// The last [`Due`] recorded for `seq`, if its entry still holds it and
    /// no write was under way while it was read.
    pub fn get(&self, seq: u64) -> Option<Due> {
        let e = self.entry(seq);
        let v1 = e.version.load(Ordering::Acquire);
        if v1 & 1 == 1 {
            return None;
        }
        let key = e.key.load(Ordering::Relaxed);
        let hi = e.id_hi.load(Ordering::Relaxed);
        let lo = e.id_lo.load(Ordering::Relaxed);
        let place = e.place.load(Ordering::Relaxed);
        let times = e.times.load(Ordering::Relaxed);
        let limits = e.limits.load(Ordering::Relaxed);
        let generation = e.generation.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if e.version.load(Ordering::Relaxed) != v1 || key != seq.wrapping_add(1) {
            return None;
        }
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&hi.to_be_bytes());
        id[8..].copy_from_slice(&lo.to_be_bytes());
        Some(Due {
            seq,
            ticket_id: TicketId::from_bytes(id),
            at: if place == PRE_QUEUE {
                DueAt::PreQueue
            } else {
                DueAt::Place(place)
            },
            joined_s: (times >> 32) as u32,
            last_poll_s: times as u32,
            poll_after_s: generation as u8,
            generation: generation >> 8,
            limits: Limits {
                ticket_ttl_s: (limits >> 32) as u32,
                idle_timeout_s: limits as u32,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn due(seq: u64, n: u8) -> Due {
        Due {
            seq,
            ticket_id: TicketId::from_bytes([n; 16]),
            at: DueAt::Place(seq * 2),
            joined_s: u32::from(n) * 3,
            last_poll_s: u32::from(n) * 5,
            poll_after_s: n,
            generation: u64::from(n) * 7,
            limits: Limits {
                ticket_ttl_s: u32::from(n) * 11,
                idle_timeout_s: u32::from(n) * 13,
            },
        }
    }

    #[test]
    fn keeps_the_newest_per_index_and_answers_only_for_its_seq() {
        let dues = PollDues::new(4);
        assert_eq!(
            dues.get(0),
            None,
            "an empty entry holds nobody, seq 0 included"
        );
        dues.set(&due(1, 1));
        assert_eq!(dues.get(1), Some(due(1, 1)));
        dues.set(&due(1, 2));
        assert_eq!(dues.get(1), Some(due(1, 2)));
        // Seq 5 shares seq 1's index in a table of 4: it replaces it.
        dues.set(&due(5, 3));
        assert_eq!(dues.get(5), Some(due(5, 3)));
        assert_eq!(dues.get(1), None);
        let pre = Due {
            at: DueAt::PreQueue,
            ..due(2, 4)
        };
        dues.set(&pre);
        assert_eq!(dues.get(2), Some(pre));
        assert_eq!(PollDues::new(100_000_000).entries.len(), DUES_MAX);
        assert_eq!(PollDues::new(0).entries.len(), 1);
    }

    #[test]
    fn a_reader_never_sees_half_of_a_write() {
        // Every due written has all its fields derived from one byte: a
        // torn read would mix two of them.
        let dues = Arc::new(PollDues::new(1));
        // The writer writes until the reader has checked enough reads, so
        // a busy machine that runs one thread long before the other still
        // leaves reads to check (a fixed number of writes did not: the
        // writer sometimes finished before the reader's first look).
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (dues, stop) = (dues.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    dues.set(&due(0, (n % 251) as u8));
                    n = n.wrapping_add(1);
                }
                n
            })
        };
        let mut seen = 0u32;
        while seen < 100_000 {
            if let Some(d) = dues.get(0) {
                let n = d.poll_after_s;
                assert_eq!(d, due(0, n));
                seen += 1;
            } else {
                std::thread::yield_now();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let written = writer.join().unwrap();
        assert!(written > 0);
    }
}
