//! A room's campaign schedule and message, as a (re)loaded config gives
//! them: when joins open (`prequeue_at`), the draw (`opens_at`), when they
//! close (`closes_at`), and what the page tells waiting shoppers
//! (`message`), and whether it tells the units left (`show_units_left`). Where the event stands is `sluice_admission::event_window`'s
//! one decision; the room's HTTP side asks it before either back end is
//! asked, so one gateway and a fleet answer alike.

use sluice_admission::event_window::{join_window, EventTimes, JoinWindow};
use sluice_policies::model::Room;

/// The schedule and message in force for one room.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub times: EventTimes,
    /// Shown on the page and in the status JSON.
    pub message: Option<String>,
    /// The status JSON carries `units_left` (`show_units_left`).
    pub show_units_left: bool,
}

impl Event {
    pub fn of(room: &Room) -> Self {
        Self {
            times: EventTimes::of(room),
            message: room.message.clone(),
            show_units_left: room.show_units_left,
        }
    }

    /// Where the event stands at `now_ms`, for a new join.
    pub fn window(&self, now_ms: u64) -> JoinWindow {
        join_window(self.times, now_ms / 1000)
    }

    /// Whether the event closed at `now_ms`.
    pub fn is_closed(&self, now_ms: u64) -> bool {
        self.window(now_ms) == JoinWindow::Closed
    }

    /// `closes_at`, unix seconds.
    pub fn closes_at_s(&self) -> Option<u64> {
        self.times.closes_at_s
    }
}
