//! The release worker's bounded pass.

use super::{
    ActivePass, PendingPass, ReleaseOutcome, Stop, WaitingRoom, CLAIM_SLACK_S,
    SWEEP_PLACES_PER_PASS,
};
use crate::journal::RoomEvent;
use crate::no_show::{claim_window_ms, releasable};
use crate::store::{QueueStore, Slot, SlotState};

impl<S: QueueStore> WaitingRoom<S> {
    /// One release pass at `now_ms`, looking at no more than `limit` places.
    ///
    /// Ends passes that ran out and released places nobody collected in
    /// time (no-shows), then walks the line from the cursor: people who
    /// left or outlived their ticket are passed over for free; the next
    /// live person is let in if the rate limit (made up for the measured
    /// no-show share, see [`crate::no_show`]) has a token and the slots
    /// allow one more released place. Nothing is released while paused, sold
    /// out or before a fair-start opening. Call it often (every 50-100 ms):
    /// each call does a bounded amount of work. With a sink, nobody is
    /// released while it refuses events, and what a pass released is kept
    /// before anyone can collect it.
    pub fn release_once(&mut self, now_ms: u64, limit: usize) -> ReleaseOutcome {
        self.open_if_due(now_ms);
        self.saw(now_ms);
        let cursor_before = self.cursor;
        let expired_passes = self.expire_passes(now_ms) + self.end_idle_passes(now_ms);
        let share = self.share_milli();
        let (rate, burst) = (
            self.policy.release_per_second.get(),
            self.policy.burst.get(),
        );
        self.pace.set(rate, share, burst);
        let mut out = ReleaseOutcome {
            released: 0,
            skipped: 0,
            expired_passes,
            stop: Stop::CaughtUp,
        };
        let now_s = self.room_s(now_ms);
        out.stop = if !self.flush() {
            Stop::StoreUnavailable
        } else if self.before_opening() {
            Stop::NotOpen
        } else if self.paused {
            Stop::Paused
        } else if !self.stock.can_sell(&self.name) {
            Stop::SoldOut
        } else {
            self.walk(now_ms, limit, &mut out)
        };
        // Busy: the rate was what held people back. Seconds in which the
        // slots did measure the slots, which the estimate counts apart
        // (see `crate::wait_estimate`).
        let busy = matches!(out.stop, Stop::RateLimited | Stop::StepLimit);
        if !matches!(
            out.stop,
            Stop::Paused | Stop::NotOpen | Stop::StoreUnavailable
        ) {
            self.meter.record(now_s, out.released, busy);
        }
        let cursor = self.cursor;
        if cursor != cursor_before {
            self.emit(RoomEvent::Cursor { cursor });
        }
        self.store.trim_before(cursor, limit.max(1));
        if out.stop != Stop::StoreUnavailable {
            self.sweep(now_s);
            self.prune_accounts(now_ms);
        }
        self.flush();
        out
    }

    fn walk(&mut self, now_ms: u64, limit: usize, out: &mut ReleaseOutcome) -> Stop {
        let now_s = self.room_s(now_ms);
        let mut steps = 0usize;
        loop {
            if self.cursor >= self.store.end() {
                return Stop::CaughtUp;
            }
            if steps >= limit {
                return Stop::StepLimit;
            }
            let Some(slot) = self.store.get(self.cursor) else {
                // Only a store that lost places can get here: skip them.
                self.cursor = self.cursor.max(self.store.start());
                return Stop::CaughtUp;
            };
            steps += 1;
            if self.settle(self.cursor, slot, now_s) != SlotState::Waiting {
                out.skipped += 1;
                self.cursor += 1;
                continue;
            }
            let max_active = u64::from(self.policy.max_active.get());
            let (held, pending) = (self.active.len() as u64, self.uncollected.len() as u64);
            if releasable(max_active, held, pending, self.share_milli()) == 0 {
                return Stop::Full;
            }
            if !self.pace.try_take(now_ms) {
                return Stop::RateLimited;
            }
            self.admit(slot, now_ms, now_s);
            out.released += 1;
        }
    }

    fn admit(&mut self, slot: Slot, now_ms: u64, now_s: u32) {
        let issued_at_s = Self::unix_s(now_ms);
        let pass = ActivePass {
            number: self.counters.admitted + 1,
            issued_at_s,
            expires_at_s: issued_at_s + self.policy.pass_ttl.as_secs(),
            last_active_s: issued_at_s,
            checkouts_running: 0,
        };
        self.store.set(
            self.cursor,
            Slot {
                state: SlotState::Released,
                ..slot
            },
        );
        // The holder comes back within the claim window from their last
        // poll (and surely by the poll they were told), or is a no-show.
        let last_poll_s = self.epoch_s + u64::from(slot.last_poll_s);
        let due_s = last_poll_s + u64::from(slot.poll_after_s) + CLAIM_SLACK_S;
        let window_s = claim_window_ms(&self.policy) / 1000;
        let claim_by_s = due_s
            .max(last_poll_s + window_s)
            .max(issued_at_s + CLAIM_SLACK_S);
        self.uncollected
            .insert(self.cursor, PendingPass { pass, claim_by_s });
        self.emit(RoomEvent::Released {
            place: self.cursor,
            number: pass.number,
            issued_at_s: pass.issued_at_s,
            expires_at_s: pass.expires_at_s,
        });
        self.counters.admitted += 1;
        self.counters
            .wait
            .observe(u64::from(now_s.saturating_sub(slot.joined_s)));
        self.cursor += 1;
    }

    /// Drops passes whose time is up, and released places whose holder did
    /// not come in time (counted as no-shows); how many passes.
    fn expire_passes(&mut self, now_ms: u64) -> u32 {
        let now_unix_s = Self::unix_s(now_ms);
        let gone: Vec<u64> = self
            .uncollected
            .iter()
            .filter(|(_, p)| p.claim_by_s <= now_unix_s || p.pass.expires_at_s <= now_unix_s)
            .map(|(place, _)| *place)
            .collect();
        for place in &gone {
            self.uncollected.remove(place);
            self.emit(RoomEvent::GaveBack { place: *place });
        }
        self.no_shows.record(now_unix_s, 0, gone.len() as u64);
        let before = self.active.len();
        let mut held = Vec::new();
        self.active.retain(|_, pass| {
            let keep = now_unix_s < pass.expires_at_s;
            if !keep {
                held.push(pass.expires_at_s - pass.issued_at_s);
            }
            keep
        });
        for held_s in held {
            self.observe_hold(held_s);
        }
        (before - self.active.len()) as u32
    }

    /// Writes down people who left, a bounded stretch at a time, so that
    /// `waiting` and "ahead of you" stop counting them within a few passes.
    fn sweep(&mut self, now_s: u32) {
        let end = self.store.end();
        if self.sweep_at < self.cursor || self.sweep_at >= end {
            self.sweep_at = self.cursor;
        }
        let stop = end.min(self.sweep_at + SWEEP_PLACES_PER_PASS as u64);
        for place in self.sweep_at..stop {
            if let Some(slot) = self.store.get(place) {
                self.settle(place, slot, now_s);
            }
        }
        self.sweep_at = stop;
    }
}
