//! A room's campaign schedule and message, as a (re)loaded config gives
//! them: when joins open (`prequeue_at`), when they close (`closes_at`),
//! and what the page tells waiting shoppers (`message`). The decisions are
//! plain functions of the schedule and `now`; both room back ends get the
//! same answers because the HTTP side makes them before either is asked.

use sluice_policies::model::Room;

/// The schedule and message in force for one room.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// Joins open at this unix second; before it `503 not_open`.
    pub prequeue_at_s: Option<u64>,
    /// No new joins from this unix second on (`410 event_closed`); waiting
    /// shoppers are told `closed` and nobody more is released.
    pub closes_at_s: Option<u64>,
    /// Shown on the page and in the status JSON.
    pub message: Option<String>,
}

/// Whether a new join may take a place now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Open,
    /// Before `prequeue_at`: come back in this many seconds (at least 1).
    NotOpen {
        retry_after_s: u64,
    },
    /// At or after `closes_at`.
    Closed,
}

impl Event {
    pub fn of(room: &Room) -> Self {
        Self {
            prequeue_at_s: room.prequeue_at_unix,
            closes_at_s: room.closes_at_unix,
            message: room.message.clone(),
        }
    }

    /// The door for a new join at `now_ms`.
    pub fn door(&self, now_ms: u64) -> Door {
        let now_s = now_ms / 1000;
        if self.is_closed(now_ms) {
            return Door::Closed;
        }
        match self.prequeue_at_s {
            Some(at) if now_s < at => Door::NotOpen {
                retry_after_s: (at - now_s).max(1),
            },
            _ => Door::Open,
        }
    }

    /// Whether the event closed at `now_ms`.
    pub fn is_closed(&self, now_ms: u64) -> bool {
        self.closes_at_s.is_some_and(|at| now_ms / 1000 >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_door_opens_at_prequeue_and_closes_at_close() {
        let e = Event {
            prequeue_at_s: Some(1_000),
            closes_at_s: Some(2_000),
            message: None,
        };
        assert_eq!(e.door(500_000), Door::NotOpen { retry_after_s: 500 });
        assert_eq!(e.door(999_500), Door::NotOpen { retry_after_s: 1 });
        assert_eq!(e.door(1_000_000), Door::Open);
        assert_eq!(e.door(1_999_999), Door::Open);
        assert_eq!(e.door(2_000_000), Door::Closed);
        assert!(!e.is_closed(1_999_999));
        assert!(e.is_closed(2_000_000));
        assert_eq!(Event::default().door(0), Door::Open);
    }
}
