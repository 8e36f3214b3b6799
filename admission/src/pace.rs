//! The release pace of both back ends: GCRA (the generic cell rate
//! algorithm), `release_per_second` with up to `burst` at once. The fleet's
//! Redis Function runs the same arithmetic on Redis's clock (`sluice.lua`
//! mirrors [`gcra`]); the embedded room keeps its state in a [`Pacer`].
//!
//! GCRA keeps one number, the theoretical arrival time `tat`: a grant is
//! allowed while `tat - now < burst · step`, and moves `tat` on by `step`.
//! Over any window of `t` seconds it grants at most `t / step + burst`.
//! The step is rounded up to whole microseconds, so rounding never lets one
//! more through than the rate.
//!
//! Not `governor`: its limiter's quota is fixed when it is made, and the
//! room's rate changes while the state must stay (the no-show make-up at
//! every release pass, adaptive release once a second, a reload); a new
//! limiter would start with a whole burst each time. `governor` keeps the
//! per-client join limit ([`crate::join_limiter`]), whose quota is fixed.

use crate::no_show::interval_us;

/// How many of `wanted` grants the GCRA allows at `now_us` with `step_us`
/// between grants and up to `burst` at once, and the new `tat_us`.
pub fn gcra(tat_us: u64, now_us: u64, step_us: u64, burst: u64, wanted: u64) -> (u64, u64) {
    let step = step_us.max(1);
    let tat = tat_us.max(now_us);
    let allowed = (now_us + burst * step).saturating_sub(tat) / step;
    let granted = allowed.min(wanted);
    (granted, tat + granted * step)
}

/// The embedded room's release pace.
#[derive(Debug, Clone)]
pub struct Pacer {
    tat_us: u64,
    step_us: u64,
    burst: u64,
}

impl Pacer {
    /// A pace whose whole burst is available at once.
    pub fn new(rate_per_s: u32, burst: u32) -> Self {
        Self {
            tat_us: 0,
            step_us: interval_us(rate_per_s, 0),
            burst: u64::from(burst.max(1)),
        }
    }

    /// A new rate (made up for a no-show share of `share_milli`, see
    /// [`crate::no_show`]) and burst; the state stays, so a change never
    /// hands out a fresh burst.
    pub fn set(&mut self, rate_per_s: u32, share_milli: u32, burst: u32) {
        self.step_us = interval_us(rate_per_s, share_milli);
        self.burst = u64::from(burst.max(1));
    }

    /// One grant at `now_ms` if the pace allows it. A clock that goes
    /// backwards grants nothing it would not have granted then.
    pub fn try_take(&mut self, now_ms: u64) -> bool {
        let (granted, tat) = gcra(self.tat_us, now_ms * 1000, self.step_us, self.burst, 1);
        if granted == 1 {
            self.tat_us = tat;
        }
        granted == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_burst_then_the_rate() {
        let mut p = Pacer::new(10, 3);
        let first = (0..10).filter(|_| p.try_take(0)).count();
        assert_eq!(first, 3);
        let granted = (1..=1000).filter(|ms| p.try_take(*ms)).count();
        assert_eq!(granted, 10);
    }

    #[test]
    fn a_made_up_rate_need_not_be_whole_and_a_change_keeps_the_state() {
        let mut p = Pacer::new(1, 2);
        assert!(p.try_take(0) && p.try_take(0));
        p.set(1, 333, 2);
        let granted = (1..=10_000).filter(|ms| p.try_take(*ms)).count();
        // The two taken at 0 moved the state on by 1 s each (the old
        // rate); then about 1.5/s.
        assert_eq!(granted, 13);
        while p.try_take(20_000) {}
        p.set(2, 0, 2);
        assert!(!p.try_take(20_000), "no fresh burst on a change");
        assert!(p.try_take(21_000), "the new rate from then on");
    }

    #[test]
    fn backwards_clock_adds_nothing() {
        let mut p = Pacer::new(1, 1);
        assert!(p.try_take(10_000));
        assert!(!p.try_take(0));
        assert!(!p.try_take(10_999));
        assert!(p.try_take(11_000));
    }

    #[test]
    fn the_rate_is_never_rounded_up() {
        // 3/s: a step of 333,334 µs, never 333,333.
        let mut p = Pacer::new(3, 1);
        let granted = (0..=3_000_000u64)
            .step_by(7)
            .filter(|ms| p.try_take(*ms))
            .count() as u64;
        assert!(granted <= 3 * 3_000 + 1, "{granted}");
    }
}
