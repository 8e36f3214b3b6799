//! What a room publishes for readers that do not take its lock: the shared
//! numbers of its watermark, and what an early poll needs.
//!
//! The room writes its [`RoomView`] before every operation of its own
//! returns, still under its lock, so a reader sees the room as the last
//! operation left it, or as one under way leaves it: a read that overlaps
//! an operation is answered as if it came just before or just after it.
//!
//! [`RoomView::early_poll`] answers a poll that comes sooner than its last
//! answer told it (`429`) with neither the room's lock nor the ticket id's
//! HMAC: under a refresh storm most polls are early. It answers only when
//! the room itself would give the very same answer, and otherwise says
//! nothing (the poll then goes through the room, as before):
//!
//! - the ticket's last on-time answer is in [`PollDues`], recorded by the
//!   room with the ticket id it had checked for that `seq`; the id
//!   presented must be that one (so an id the room would refuse is never
//!   answered here);
//! - nothing since could have ended its slot other than time: the room
//!   bumps its generation whenever its time-outs change, and the answer
//!   must be of the current one; a release moves the cursor past the
//!   place, which is read here; the fair-start pre-queue's entries stop
//!   answering at the opening;
//! - time has not ended it either: idle and TTL time-outs are judged at the
//!   latest time the room has seen (never earlier than any time-out it may
//!   already have written down), with the time-outs of that generation;
//! - the room's sink holds every change (with changes left pending, a poll
//!   through the room offers them again), and the stock can still sell
//!   (the room answers `sold_out` before `429`).
//!
//! Like the room's own early answer it counts in `too_early_total` and
//! moves the room's latest time seen, and records nothing: an early poll is
//! no sign of life.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::poll_dues::{Due, DueAt, Limits, PollDues};
use super::{RoomState, Watermark, POLL_SLACK_S};
use crate::stock::StockAuthority;
use crate::ticket_id::TicketId;

/// One room as readers without its lock see it.
pub struct RoomView {
    name: String,
    stock: Arc<dyn StockAuthority>,
    pub(super) dues: PollDues,
    /// Unix second of room second 0.
    epoch_s: AtomicU64,
    /// Every place below it was released or passed over.
    cursor: AtomicU64,
    /// Live tickets, in line and in the pre-queue.
    waiting: AtomicU64,
    release_per_second: AtomicU32,
    poll_min_s: AtomicU32,
    paused: AtomicBool,
    /// While the pre-queue still takes entries, the opening (unix ms);
    /// 0 otherwise.
    pre_queue_until_ms: AtomicU64,
    /// No change is pending for the sink.
    synced: AtomicBool,
    /// Bumped whenever the time-outs change.
    generation: AtomicU64,
    /// The latest unix second an operation or an early poll was given.
    seen_s: AtomicU64,
    too_early: AtomicU64,
}

/// The room's numbers a [`RoomView`] publishes, as the room hands them over.
pub(super) struct Published {
    pub epoch_s: u64,
    pub cursor: u64,
    pub waiting: u64,
    pub release_per_second: u32,
    pub poll_min_s: u32,
    pub paused: bool,
    pub pre_queue_until_ms: u64,
    pub synced: bool,
}

/// How many seconds too early a poll at room second `now_s` is, for a slot
/// last answered at `last_poll_s` and told to wait `poll_after_s`; `None`
/// when it is on time (up to [`POLL_SLACK_S`] sooner counts as on time).
pub(super) fn too_early_by(last_poll_s: u32, poll_after_s: u8, now_s: u32) -> Option<u64> {
    let due_s = last_poll_s.saturating_add(u32::from(poll_after_s));
    (now_s.saturating_add(POLL_SLACK_S) < due_s).then(|| u64::from(due_s - now_s))
}

/// Room seconds (since `epoch_s`) of unix second `unix_s`.
pub(super) fn room_s(unix_s: u64, epoch_s: u64) -> u32 {
    u32::try_from(unix_s.saturating_sub(epoch_s)).unwrap_or(u32::MAX)
}

impl RoomView {
    pub(super) fn new(
        name: &str,
        stock: Arc<dyn StockAuthority>,
        places: usize,
        now_s: u64,
    ) -> Self {
        Self {
            name: name.to_owned(),
            stock,
            dues: PollDues::new(places),
            epoch_s: AtomicU64::new(now_s),
            cursor: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            release_per_second: AtomicU32::new(0),
            poll_min_s: AtomicU32::new(0),
            paused: AtomicBool::new(false),
            pre_queue_until_ms: AtomicU64::new(0),
            synced: AtomicBool::new(true),
            generation: AtomicU64::new(0),
            seen_s: AtomicU64::new(now_s),
            too_early: AtomicU64::new(0),
        }
    }

    /// The room's state after an operation (the room calls this, under its
    /// lock, before the operation returns).
    pub(super) fn publish(&self, p: Published) {
        self.epoch_s.store(p.epoch_s, Ordering::Release);
        self.waiting.store(p.waiting, Ordering::Relaxed);
        self.release_per_second
            .store(p.release_per_second, Ordering::Relaxed);
        self.poll_min_s.store(p.poll_min_s, Ordering::Relaxed);
        self.paused.store(p.paused, Ordering::Relaxed);
        self.pre_queue_until_ms
            .store(p.pre_queue_until_ms, Ordering::Release);
        self.synced.store(p.synced, Ordering::Release);
        self.cursor.store(p.cursor, Ordering::Release);
    }

    /// The time-outs changed: no answer recorded before counts any more.
    pub(super) fn next_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The ticket's answer that set its next poll.
    pub(super) fn record(
        &self,
        seq: u64,
        ticket_id: TicketId,
        at: DueAt,
        slot: &crate::store::Slot,
        limits: Limits,
    ) {
        self.dues.set(&Due {
            seq,
            ticket_id,
            at,
            joined_s: slot.joined_s,
            last_poll_s: slot.last_poll_s,
            poll_after_s: slot.poll_after_s,
            generation: self.generation(),
            limits,
        });
    }

    /// Moves the latest time seen to `now_ms` if it is later.
    pub(super) fn saw(&self, now_ms: u64) {
        let now_s = now_ms / 1000;
        if self.seen_s.load(Ordering::Relaxed) < now_s {
            self.seen_s.fetch_max(now_s, Ordering::AcqRel);
        }
    }

    /// The latest unix second an operation or early poll was given.
    pub(super) fn seen_s(&self) -> u64 {
        self.seen_s.load(Ordering::Acquire)
    }

    pub(super) fn count_too_early(&self) {
        self.too_early.fetch_add(1, Ordering::Relaxed);
    }

    /// Polls answered too early, by the room and here.
    pub fn too_early_total(&self) -> u64 {
        self.too_early.load(Ordering::Relaxed)
    }

    /// `Some(retry_after_s)` when the poll of ticket `seq` with id
    /// `ticket_id` (both from its verified JWT) at `now_ms` is early and
    /// the room would say so with this very `retry_after_s`; `None` when
    /// only the room can answer it (see the module's rules).
    pub fn early_poll(&self, seq: u64, ticket_id: &TicketId, now_ms: u64) -> Option<u64> {
        let due = self.dues.get(seq)?;
        if due.ticket_id != *ticket_id || due.generation != self.generation() {
            return None;
        }
        if !self.synced.load(Ordering::Acquire) {
            return None;
        }
        let epoch_s = self.epoch_s.load(Ordering::Acquire);
        let now_s = room_s(now_ms / 1000, epoch_s);
        let latest_s = now_s.max(room_s(self.seen_s(), epoch_s));
        if latest_s.saturating_sub(due.last_poll_s) > due.limits.idle_timeout_s {
            return None;
        }
        match due.at {
            DueAt::PreQueue => {
                if now_ms >= self.pre_queue_until_ms.load(Ordering::Acquire) {
                    return None;
                }
            }
            DueAt::Place(place) => {
                if place < self.cursor.load(Ordering::Acquire)
                    || latest_s.saturating_sub(due.joined_s) >= due.limits.ticket_ttl_s
                {
                    return None;
                }
            }
        }
        let retry_after_s = too_early_by(due.last_poll_s, due.poll_after_s, now_s)?;
        if !self.stock.can_sell(&self.name) {
            return None;
        }
        self.saw(now_ms);
        self.count_too_early();
        Some(retry_after_s)
    }

    /// The room's shared numbers as its last operation left them
    /// ([`super::WaitingRoom::watermark`] without the lock).
    pub fn watermark(&self) -> Watermark {
        let state = RoomState::of(
            self.paused.load(Ordering::Relaxed),
            self.stock.can_sell(&self.name),
        );
        Watermark {
            serving: self.cursor.load(Ordering::Acquire),
            waiting: self.waiting.load(Ordering::Relaxed),
            release_per_second: self.release_per_second.load(Ordering::Relaxed),
            state,
            poll_after_s: self.poll_min_s.load(Ordering::Relaxed),
        }
    }
}
