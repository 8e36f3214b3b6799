//! Where the line itself lives: one compact record per place.
//!
//! The room decides; the store remembers. [`QueueStore`] is the whole
//! contract between the embedded room and its line in memory. A fleet's
//! room does not use it: its line lives in Redis behind the gateway's
//! async `RoomStore` (docs/architecture.md says why the two seams differ).
//!
//! A place is the position in release order. It equals the ticket's `seq`
//! except for fair-start pre-queue tickets, whose places are drawn at the
//! opening (see [`crate::fair_start`]).

mod memory;

pub use memory::MemoryStore;

/// What became of a place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    /// In line and alive.
    Waiting,
    /// Stopped polling for longer than `idle_timeout`.
    Abandoned,
    /// Held longer than `ticket_ttl`.
    Expired,
    /// Its turn came: a pass was minted.
    Released,
}

impl SlotState {
    /// The legal transitions: a waiting place ends exactly once (left,
    /// outlived its ticket, or released); an ended place never changes.
    /// Staying `Waiting` (a poll) is allowed.
    pub fn can_become(self, next: SlotState) -> bool {
        matches!(
            (self, next),
            (SlotState::Waiting, _)
                | (SlotState::Abandoned, SlotState::Abandoned)
                | (SlotState::Expired, SlotState::Expired)
                | (SlotState::Released, SlotState::Released)
        )
    }
}

/// One waiting person: 12 bytes. Times are whole seconds since the room's
/// epoch, which is plenty for `idle_timeout` and `ticket_ttl` and keeps the
/// record small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// When the ticket's clock started (join, or the opening for the
    /// pre-queue).
    pub joined_s: u32,
    /// Last poll the room answered (join counts as one).
    pub last_poll_s: u32,
    /// What that answer told the client to wait before polling again.
    pub poll_after_s: u8,
    pub state: SlotState,
}

impl Slot {
    pub fn waiting(now_s: u32, poll_after_s: u8) -> Self {
        Self {
            joined_s: now_s,
            last_poll_s: now_s,
            poll_after_s,
            state: SlotState::Waiting,
        }
    }
}

/// The line of one room, indexed by place.
///
/// Places are handed out in increasing order by [`QueueStore::push`] and
/// dropped from the front by [`QueueStore::trim_before`]; every place in
/// `start()..end()` is present.
pub trait QueueStore: Send {
    /// Appends at the end of the line; the new place, or `None` when the
    /// store is at its hard size limit.
    fn push(&mut self, slot: Slot) -> Option<u64>;
    fn get(&self, place: u64) -> Option<Slot>;
    /// Replaces the record at `place`; `false` if there is none or the
    /// change of state is not one [`SlotState::can_become`] allows.
    fn set(&mut self, place: u64, slot: Slot) -> bool;
    /// The lowest place still held.
    fn start(&self) -> u64;
    /// The place the next push gets.
    fn end(&self) -> u64;
    /// How many places are in state `Waiting`.
    fn live(&self) -> u64;
    /// How many places before `place` are in state `Waiting`.
    fn live_before(&self, place: u64) -> u64;
    /// Drops places before `place`, at most `limit` of them; how many were
    /// dropped.
    fn trim_before(&mut self, place: u64, limit: usize) -> usize;
}

#[cfg(test)]
mod tests {
    use super::SlotState::{self, *};

    #[test]
    fn every_transition_pair_is_decided() {
        let all = [Waiting, Abandoned, Expired, Released];
        let legal: &[(SlotState, SlotState)] = &[
            (Waiting, Waiting),
            (Waiting, Abandoned),
            (Waiting, Expired),
            (Waiting, Released),
            (Abandoned, Abandoned),
            (Expired, Expired),
            (Released, Released),
        ];
        for from in all {
            for to in all {
                assert_eq!(
                    from.can_become(to),
                    legal.contains(&(from, to)),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }
}
