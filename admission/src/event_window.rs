//! Whether a room takes joins now: the event's pre-queue, opening and
//! close, as one decision both back ends (and the challenge route) ask.
//!
//! - before `prequeue_at`: not open yet (`503 not_open`, `Retry-After`
//!   until then); no challenge is issued either;
//! - from `prequeue_at` (or always, without it) until `opens_at`: the
//!   pre-queue, whose joins enter the fair-start draw;
//! - from `opens_at` (or `prequeue_at`, or always) until `closes_at`: open;
//! - from `closes_at` on: closed (`410 event_closed`; waiting shoppers see
//!   `closed`, passes already out finish their checkouts).

/// A room's event times, unix seconds (from `sluice_policies::model::Room`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventTimes {
    pub prequeue_at_s: Option<u64>,
    pub opens_at_s: Option<u64>,
    pub closes_at_s: Option<u64>,
}

impl EventTimes {
    pub fn of(room: &sluice_policies::model::Room) -> Self {
        Self {
            prequeue_at_s: room.prequeue_at_unix,
            opens_at_s: room.opens_at_unix,
            closes_at_s: room.closes_at_unix,
        }
    }
}

/// Where the event stands at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinWindow {
    /// Joins are refused until `prequeue_at`, `retry_after_s` from now
    /// (at least 1).
    NotOpen { retry_after_s: u64 },
    /// Joins are taken into the draw at `opens_at`.
    PreQueue,
    /// Joins are taken in arrival order.
    Open,
    /// No new joins: the event is over.
    Closed,
}

impl JoinWindow {
    /// Whether a join (or a challenge for one) is taken now.
    pub fn takes_joins(self) -> bool {
        matches!(self, JoinWindow::PreQueue | JoinWindow::Open)
    }
}

/// The window at `now_s`.
pub fn join_window(times: EventTimes, now_s: u64) -> JoinWindow {
    if times.closes_at_s.is_some_and(|c| now_s >= c) {
        return JoinWindow::Closed;
    }
    if let Some(pre) = times.prequeue_at_s.filter(|&p| now_s < p) {
        return JoinWindow::NotOpen {
            retry_after_s: (pre - now_s).max(1),
        };
    }
    if times.opens_at_s.is_some_and(|o| now_s < o) {
        return JoinWindow::PreQueue;
    }
    JoinWindow::Open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_moves_from_not_open_to_closed() {
        let t = EventTimes {
            prequeue_at_s: Some(100),
            opens_at_s: Some(200),
            closes_at_s: Some(300),
        };
        assert_eq!(
            join_window(t, 0),
            JoinWindow::NotOpen { retry_after_s: 100 }
        );
        assert_eq!(join_window(t, 99), JoinWindow::NotOpen { retry_after_s: 1 });
        assert_eq!(join_window(t, 100), JoinWindow::PreQueue);
        assert_eq!(join_window(t, 199), JoinWindow::PreQueue);
        assert_eq!(join_window(t, 200), JoinWindow::Open);
        assert_eq!(join_window(t, 299), JoinWindow::Open);
        assert_eq!(join_window(t, 300), JoinWindow::Closed);
        assert!(!JoinWindow::Closed.takes_joins() && JoinWindow::PreQueue.takes_joins());
    }

    #[test]
    fn each_time_alone_and_none_at_all() {
        assert_eq!(join_window(EventTimes::default(), 0), JoinWindow::Open);
        let only_open = EventTimes {
            opens_at_s: Some(50),
            ..Default::default()
        };
        assert_eq!(
            join_window(only_open, 10),
            JoinWindow::PreQueue,
            "today's fair start"
        );
        let only_close = EventTimes {
            closes_at_s: Some(50),
            ..Default::default()
        };
        assert_eq!(join_window(only_close, 49), JoinWindow::Open);
        assert_eq!(join_window(only_close, 50), JoinWindow::Closed);
        let only_pre = EventTimes {
            prequeue_at_s: Some(50),
            ..Default::default()
        };
        assert_eq!(join_window(only_pre, 50), JoinWindow::Open);
    }
}
