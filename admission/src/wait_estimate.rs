//! The estimated wait, whichever limit holds people back: the release rate
//! or the `max_active` slots.
//!
//! Admission `i` (0 for the next person let in) cannot come before
//! `i / rate`, nor before a slot is free for it. The first `free` slots are
//! free now; the next ones free when the passes holding them end (their
//! expected ends, in release order); after that each slot comes back
//! `hold_s` after the admission that took it, so admission `i >= M` (with
//! `M = max_active`) waits for admission `i - M` plus `hold_s`:
//!
//! ```text
//! T(i) = max(i / rate, base(i))                 for i < M
//! T(i) = max(i / rate, T(i - M) + hold_s)       for i >= M
//! base(r) = 0 for r < free, else the (r - free)-th expected end
//! ```
//!
//! Unrolled, the recursion has a closed form: with `q = i / M`, `r = i % M`,
//! `T(i) = max(i / rate, T(r) + q * hold_s)` (the terms between are linear
//! in the number of unrollings, so one of the two ends is the largest).
//! Slots bind exactly when `hold_s > M / rate`; then the second term wins.

/// What the slots will do, for the estimate.
pub trait SlotOutlook {
    /// `max_active`.
    fn slots(&self) -> u64;
    /// Slots free now.
    fn free(&self) -> u64;
    /// Seconds from now until the `n`-th (0-based, in release order) of
    /// the passes holding a slot is expected to give it back; `None` past
    /// the last.
    fn end_in_s(&self, n: u64) -> Option<f64>;
    /// Seconds a pass is expected to hold its slot.
    fn hold_s(&self) -> f64;
}

/// Seconds until the turn of someone with `ahead` live people in front, at
/// `rate_per_s` admissions per second and the slots `slots` foresees.
pub fn estimated_wait_s(ahead: u64, rate_per_s: f64, slots: &impl SlotOutlook) -> u64 {
    if rate_per_s <= 0.0 {
        return u64::MAX;
    }
    let m = slots.slots().max(1);
    let (q, r) = (ahead / m, ahead % m);
    let free = slots.free().min(m);
    let base = if r < free {
        0.0
    } else {
        // A pass without an expected end (fewer held than counted) frees
        // its slot now.
        slots.end_in_s(r - free).unwrap_or(0.0).max(0.0)
    };
    let first = (r as f64 / rate_per_s).max(base);
    let wait = (ahead as f64 / rate_per_s).max(first + q as f64 * slots.hold_s().max(0.0));
    wait.ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Slots {
        m: u64,
        free: u64,
        ends: Vec<f64>,
        hold_s: f64,
    }

    impl SlotOutlook for Slots {
        fn slots(&self) -> u64 {
            self.m
        }
        fn free(&self) -> u64 {
            self.free
        }
        fn end_in_s(&self, n: u64) -> Option<f64> {
            self.ends.get(n as usize).copied()
        }
        fn hold_s(&self) -> f64 {
            self.hold_s
        }
    }

    /// The recursion itself, step by step.
    fn walk(ahead: u64, rate: f64, s: &Slots) -> f64 {
        let mut t = Vec::new();
        for i in 0..=ahead {
            let m = s.m as usize;
            let i_us = i as usize;
            let slot = if i_us < m {
                if i < s.free {
                    0.0
                } else {
                    s.ends.get(i_us - s.free as usize).copied().unwrap_or(0.0)
                }
            } else {
                t[i_us - m] + s.hold_s
            };
            t.push((i as f64 / rate).max(slot));
        }
        t[ahead as usize]
    }

    #[test]
    fn the_closed_form_is_the_recursion() {
        for (m, free, rate, hold) in [
            (3, 0, 10.0, 6.0),
            (3, 2, 10.0, 6.0),
            (10, 4, 1.0, 2.0),
            (100, 100, 20.0, 3600.0),
            (7, 0, 0.5, 30.0),
        ] {
            let s = Slots {
                m,
                free,
                ends: (0..m - free).map(|k| 0.5 + k as f64).collect(),
                hold_s: hold,
            };
            for ahead in 0..200 {
                let closed = estimated_wait_s(ahead, rate, &s);
                let walked = walk(ahead, rate, &s).ceil() as u64;
                assert_eq!(
                    closed, walked,
                    "m {m} free {free} rate {rate} hold {hold} ahead {ahead}"
                );
            }
        }
    }

    #[test]
    fn slots_that_turn_over_slowly_set_the_wait() {
        // The issue's case: 3 slots, passes living 6 s, 10/s: the twelfth
        // joiner waits for three rounds of passes, not 1.1 s.
        let s = Slots {
            m: 3,
            free: 3,
            ends: vec![],
            hold_s: 6.0,
        };
        assert_eq!(estimated_wait_s(0, 10.0, &s), 0);
        assert_eq!(estimated_wait_s(11, 10.0, &s), 19);
        // Plenty of slots: the rate alone.
        let many = Slots {
            m: 1_000_000,
            free: 1_000_000,
            ends: vec![],
            hold_s: 600.0,
        };
        assert_eq!(estimated_wait_s(101, 10.0, &many), 11);
        assert_eq!(estimated_wait_s(5, 0.0, &many), u64::MAX);
    }
}
