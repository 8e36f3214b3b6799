//! The join rate the adaptive difficulty reads: joins counted in one-second
//! buckets over the last [`RATE_WINDOW_S`] seconds, the current one
//! included. One gateway counts its own joins here; a fleet adds every
//! gateway's buckets in its shared store and reads the sum back
//! ([`per_second`] of that sum), so the law sees the fleet's rate.

/// Seconds the rate is averaged over.
pub const RATE_WINDOW_S: u64 = 5;

/// Joins per second from the joins counted over the window.
pub fn per_second(joins_in_window: u64) -> f64 {
    joins_in_window as f64 / RATE_WINDOW_S as f64
}

/// One gateway's joins, by second.
#[derive(Debug, Default, Clone)]
pub struct JoinRate {
    /// `(unix second, joins)`, one slot per second modulo the window.
    buckets: [(u64, u64); RATE_WINDOW_S as usize],
}

impl JoinRate {
    /// Counts a join at `now_ms`.
    pub fn add(&mut self, now_ms: u64) {
        let s = now_ms / 1000;
        let slot = &mut self.buckets[(s % RATE_WINDOW_S) as usize];
        if slot.0 != s {
            *slot = (s, 0);
        }
        slot.1 += 1;
    }

    /// Joins counted in the window ending at `now_ms`.
    pub fn in_window(&self, now_ms: u64) -> u64 {
        let s = now_ms / 1000;
        self.buckets
            .iter()
            .filter(|(at, _)| *at + RATE_WINDOW_S > s && *at <= s)
            .map(|(_, n)| n)
            .sum()
    }

    /// Joins per second over the window ending at `now_ms`.
    pub fn per_second(&self, now_ms: u64) -> f64 {
        per_second(self.in_window(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_counts_the_last_five_seconds_only() {
        let mut r = JoinRate::default();
        let t0 = 1_800_000_000_000u64;
        for i in 0..50 {
            r.add(t0 + i * 10);
        }
        assert_eq!(r.in_window(t0 + 999), 50);
        assert_eq!(r.per_second(t0), 10.0);
        r.add(t0 + 4_000);
        assert_eq!(r.in_window(t0 + 4_500), 51);
        // Five seconds on, the first second has left the window.
        assert_eq!(r.in_window(t0 + 5_000), 1);
        // A slot reused a window later starts again from zero.
        r.add(t0 + 10_000);
        assert_eq!(r.in_window(t0 + 10_000), 1);
        assert_eq!(r.in_window(t0 + 60_000), 0);
    }
}
