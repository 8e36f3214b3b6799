//! The measured release rate: what the room actually admitted per second
//! while it had people waiting.
//!
//! Seconds in which the line ran dry, or the room was paused, say nothing
//! about how fast people get in when there is a line, so the estimate only
//! averages "busy" seconds.

/// Seconds of history kept; also the longest averaging window.
const HISTORY_SECONDS: usize = 64;
/// Busy seconds needed before the measurement is trusted over the config.
const BUSY_SECONDS_MIN: u64 = 3;

#[derive(Debug, Clone, Copy, Default)]
struct Second {
    /// Which second (room seconds + 1; 0 marks an empty entry).
    tag: u64,
    released: u32,
    busy: bool,
}

#[derive(Debug, Clone)]
pub struct RateMeter {
    seconds: [Second; HISTORY_SECONDS],
}

impl Default for RateMeter {
    fn default() -> Self {
        Self {
            seconds: [Second::default(); HISTORY_SECONDS],
        }
    }
}

impl RateMeter {
    /// Adds `released` admissions at second `now_s`; `busy` when people
    /// were still waiting for a release slot afterwards.
    pub fn record(&mut self, now_s: u32, released: u32, busy: bool) {
        let tag = u64::from(now_s) + 1;
        let entry = &mut self.seconds[now_s as usize % HISTORY_SECONDS];
        if entry.tag != tag {
            *entry = Second {
                tag,
                released: 0,
                busy: false,
            };
        }
        entry.released = entry.released.saturating_add(released);
        entry.busy |= busy;
    }

    fn window(&self, now_s: u32, window_s: u32) -> impl Iterator<Item = &Second> {
        // Whole seconds only: the current one is still filling.
        let now_tag = u64::from(now_s) + 1;
        let from_tag = now_tag.saturating_sub(u64::from(window_s).min(HISTORY_SECONDS as u64 - 1));
        self.seconds
            .iter()
            .filter(move |s| s.tag != 0 && s.tag >= from_tag && s.tag < now_tag)
    }

    /// Admissions per second over the busy seconds of the last `window_s`;
    /// `None` until there are enough of them to trust.
    pub fn busy_rate(&self, now_s: u32, window_s: u32) -> Option<f64> {
        let (mut n, mut sum) = (0u64, 0u64);
        for s in self.window(now_s, window_s).filter(|s| s.busy) {
            n += 1;
            sum += u64::from(s.released);
        }
        (n >= BUSY_SECONDS_MIN && sum > 0).then(|| sum as f64 / n as f64)
    }

    /// Admissions per second over the last `window_s` whole seconds, busy
    /// or not: the `sluice_release_rate` gauge.
    pub fn rate(&self, now_s: u32, window_s: u32) -> f64 {
        let sum: u64 = self
            .window(now_s, window_s)
            .map(|s| u64::from(s.released))
            .sum();
        sum as f64 / f64::from(window_s.clamp(1, HISTORY_SECONDS as u32 - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_busy_seconds_only() {
        let mut m = RateMeter::default();
        assert_eq!(m.busy_rate(10, 30), None);
        for s in 0..10 {
            m.record(s, 5, s % 2 == 0);
        }
        m.record(10, 100, true); // still filling: not counted
        assert_eq!(m.busy_rate(10, 30), Some(5.0));
        assert!((m.rate(10, 10) - 5.0).abs() < 1e-9);
        // Far in the future the history has aged out.
        assert_eq!(m.busy_rate(500, 30), None);
        assert_eq!(m.rate(500, 10), 0.0);
    }
}
