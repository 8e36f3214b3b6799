//! Released places whose holder never comes back for the pass (no-shows),
//! and how the release makes up for them. The same decisions for both back
//! ends: the embedded room and the fleet's store.
//!
//! A released place takes no `max_active` slot until its pass is
//! collected; it only *counts* toward the slots as the share of released
//! places that do get collected. The measured no-show share `s` over the
//! last [`WINDOW_S`] seconds (no-shows ÷ released places whose fate is
//! known), bounded by [`SHARE_MAX_MILLI`], then sets:
//!
//! - the release pace: `rate / (1 - s)` places per second, so the passes
//!   actually collected come at `rate` ([`interval_us`]);
//! - how many uncollected places may be out: the slots not held by
//!   collected passes, divided by `1 - s` ([`releasable`]).
//!
//! Collection is where the limits are hard: a pass is handed over only
//! while a slot is free and the collection pace (`rate`, `burst`) allows;
//! otherwise the holder stays at the front and asks again. So the make-up
//! can only move the offer, never let more than `max_active` passes buy
//! nor more than `rate · t + burst` passes out.
//!
//! Shares are in thousandths so that the Redis Function computes exactly
//! what these functions do.

use std::collections::VecDeque;
use std::time::Duration;

use crate::Policy;

/// Seconds of outcomes behind the measured share.
pub const WINDOW_S: u64 = 60;
/// Outcomes needed before the measurement is trusted (before: share 0).
pub const OUTCOMES_MIN: u64 = 20;
/// The bound on the share made up for: at most half the released places
/// are taken as no-shows, so the release runs at most twice the rate.
pub const SHARE_MAX_MILLI: u32 = 500;

/// Collected and not collected released places, per second.
#[derive(Debug, Clone, Default)]
pub struct NoShowMeter {
    /// (second, shows, no-shows), oldest first.
    seconds: VecDeque<(u64, u64, u64)>,
    /// Cumulative totals last seen ([`Self::observe_totals`]).
    totals: Option<(u64, u64)>,
}

impl NoShowMeter {
    /// `shows` passes collected and `no_shows` released places given up at
    /// unix second `now_s`.
    pub fn record(&mut self, now_s: u64, shows: u64, no_shows: u64) {
        if shows == 0 && no_shows == 0 {
            return;
        }
        match self.seconds.back_mut() {
            Some(last) if last.0 >= now_s => {
                last.1 += shows;
                last.2 += no_shows;
            }
            _ => self.seconds.push_back((now_s, shows, no_shows)),
        }
        while self
            .seconds
            .front()
            .is_some_and(|s| s.0 + WINDOW_S <= now_s)
        {
            self.seconds.pop_front();
        }
    }

    /// Records the change of a store's cumulative totals (a fleet's
    /// gateway reads them at every tick). Totals going backwards (a store
    /// that lost its data) start the count again.
    pub fn observe_totals(&mut self, now_s: u64, shows_total: u64, no_shows_total: u64) {
        if let Some((shows, no_shows)) = self.totals {
            if shows_total >= shows && no_shows_total >= no_shows {
                self.record(now_s, shows_total - shows, no_shows_total - no_shows);
            }
        }
        self.totals = Some((shows_total, no_shows_total));
    }

    /// The measured share of no-shows at `now_s`, in thousandths, bounded
    /// by [`SHARE_MAX_MILLI`]; 0 until [`OUTCOMES_MIN`] outcomes are in.
    pub fn share_milli(&self, now_s: u64) -> u32 {
        let (shows, no_shows) = self
            .seconds
            .iter()
            .filter(|s| s.0 + WINDOW_S > now_s)
            .fold((0, 0), |(a, b), s| (a + s.1, b + s.2));
        let outcomes = shows + no_shows;
        if outcomes < OUTCOMES_MIN {
            return 0;
        }
        ((no_shows * 1000 / outcomes) as u32).min(SHARE_MAX_MILLI)
    }
}

/// How long a released place waits for its holder before it is a
/// no-show, counted from the holder's last poll: two of the longest poll
/// intervals the room tells a waiting ticket, plus [`CLAIM_SLACK`] for the
/// network (a live page asks at least that often), never longer than the
/// idle timeout (the room's own rule for having left) nor a pass. The
/// place takes no slot meanwhile; a shorter window only measures no-shows
/// sooner.
pub fn claim_window_ms(policy: &Policy) -> u64 {
    (policy.poll_max * 2 + CLAIM_SLACK)
        .min(policy.idle_timeout)
        .min(policy.pass_ttl)
        .as_millis() as u64
}

/// Added to two poll intervals in [`claim_window_ms`].
pub const CLAIM_SLACK: Duration = Duration::from_secs(5);

/// Microseconds between two releases at `rate` per second made up for a
/// no-show share of `share_milli`: `(1 - s) / rate`.
/// Rounded up: never faster than that.
pub fn interval_us(rate: u32, share_milli: u32) -> u64 {
    let show = u64::from(1000 - share_milli.min(SHARE_MAX_MILLI));
    (show * 1000).div_ceil(u64::from(rate.max(1))).max(1)
}

/// Releases per second that [`interval_us`] paces.
pub fn make_up_rate(rate: u32, share_milli: u32) -> f64 {
    1_000_000.0 / interval_us(rate, share_milli) as f64
}

/// How many more places may be released now: uncollected places count as
/// the share of them expected to be collected, and collected passes plus
/// that expectation stay within `max_active`:
/// `pending + n ≤ (max_active - passes) / (1 - s)`.
pub fn releasable(max_active: u64, passes: u64, pending: u64, share_milli: u32) -> u64 {
    let free = max_active.saturating_sub(passes);
    let show = u64::from(1000 - share_milli.min(SHARE_MAX_MILLI));
    (free * 1000 / show).saturating_sub(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_measured_over_the_window_and_bounded() {
        let mut m = NoShowMeter::default();
        assert_eq!(m.share_milli(100), 0);
        for s in 100..110 {
            m.record(s, 2, 1);
        }
        assert_eq!(m.share_milli(110), 333);
        // Old outcomes leave the window.
        assert_eq!(m.share_milli(110 + WINDOW_S), 0);
        for s in 200..230 {
            m.record(s, 0, 1);
        }
        assert_eq!(m.share_milli(230), SHARE_MAX_MILLI, "bounded");
        let mut few = NoShowMeter::default();
        few.record(1, 0, OUTCOMES_MIN - 1);
        assert_eq!(few.share_milli(1), 0, "too few to trust");
    }

    #[test]
    fn totals_are_turned_into_outcomes_and_a_reset_starts_again() {
        let mut m = NoShowMeter::default();
        m.observe_totals(10, 1000, 1000);
        assert_eq!(m.share_milli(10), 0, "the first totals are the base");
        m.observe_totals(11, 1030, 1010);
        assert_eq!(m.share_milli(12), 250);
        m.observe_totals(12, 5, 0);
        m.observe_totals(13, 5, 0);
        assert_eq!(m.share_milli(13), 250, "a reset adds nothing");
    }

    #[test]
    fn the_release_makes_up_for_the_share_within_the_bound() {
        assert_eq!(interval_us(10, 0), 100_000);
        assert_eq!(interval_us(10, 333), 66_700);
        assert_eq!(interval_us(3, 0), 333_334, "rounded up");
        assert_eq!(interval_us(10, 900), 50_000, "never past twice the rate");
        assert!((make_up_rate(30, 333) - 45.0).abs() < 0.1);
        assert_eq!(releasable(10, 4, 0, 0), 6);
        assert_eq!(releasable(10, 4, 0, 500), 12);
        assert_eq!(releasable(10, 4, 12, 500), 0);
        assert_eq!(releasable(10, 12, 0, 500), 0);
    }
}
