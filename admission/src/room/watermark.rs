//! The room's shared numbers, the same for every ticket: what a client
//! needs to work out its own place from its ticket's `seq` without asking
//! about its ticket (and what a CDN can cache for everyone).

use super::WaitingRoom;
use crate::store::QueueStore;

/// Whether the room lets people in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomState {
    Open,
    /// The kill switch is on.
    Paused,
    SoldOut,
}

impl RoomState {
    /// The state of a room that is `paused` or not and whose stock
    /// `can_sell` or not (the kill switch first).
    pub fn of(paused: bool, can_sell: bool) -> Self {
        if paused {
            RoomState::Paused
        } else if !can_sell {
            RoomState::SoldOut
        } else {
            RoomState::Open
        }
    }

    /// The contract's `state` value of the watermark.
    pub fn as_str(self) -> &'static str {
        match self {
            RoomState::Open => "open",
            RoomState::Paused => "paused",
            RoomState::SoldOut => "sold_out",
        }
    }
}

/// `GET /queue/{room}/watermark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    /// Every place below this has been released or passed over: a ticket
    /// whose place is below it may collect its pass at `/status`. (A
    /// fair-start pre-queue ticket's place is drawn, not its `seq`: such
    /// tickets ask `/status`.)
    pub serving: u64,
    /// Live tickets in line (and in the pre-queue before the opening).
    pub waiting: u64,
    pub release_per_second: u32,
    pub state: RoomState,
    /// How long the numbers stay good enough: the room's `poll_min`.
    pub poll_after_s: u32,
}

impl<S: QueueStore> WaitingRoom<S> {
    /// The room's shared numbers now. Reads only.
    pub fn watermark(&self) -> Watermark {
        let pre = self
            .pre_queue
            .as_ref()
            .filter(|p| !p.opened)
            .map_or(0, |p| p.entrants());
        let state = RoomState::of(self.paused, self.stock.can_sell(&self.name));
        Watermark {
            serving: self.cursor,
            waiting: self.store.live() + pre,
            release_per_second: self.policy.release_per_second.get(),
            state,
            poll_after_s: self.policy.poll_min.as_secs() as u32,
        }
    }
}
