//! The last few seconds of admitted shoppers' checkouts, bounded, for the
//! adaptive controller.

use std::collections::VecDeque;

use super::Measurements;

/// How far back the window reaches.
pub const WINDOW_MS: u64 = 3000;
/// Checkouts it holds at most; past this the oldest are forgotten, so the
/// p99 is over the newest `SAMPLES_MAX` (plenty for a p99).
pub const SAMPLES_MAX: usize = 8192;

/// How a checkout ended, as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The backend did its job (whatever the order's outcome: paid,
    /// declined card, sold out).
    Served,
    /// The backend failed: a store error, or the provider did not answer.
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: u64,
    latency_ms: u32,
    failed: bool,
}

#[derive(Debug, Default)]
pub struct CheckoutWindow {
    samples: VecDeque<Sample>,
}

impl CheckoutWindow {
    pub fn new() -> Self {
        Self::default()
    }

    /// A checkout that ended at `at_ms` after `latency_ms`.
    pub fn record(&mut self, at_ms: u64, latency_ms: u32, outcome: Outcome) {
        if self.samples.len() >= SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at_ms,
            latency_ms,
            failed: outcome == Outcome::Failed,
        });
    }

    /// The checkouts of the last [`WINDOW_MS`] before `now_ms`; older ones
    /// are dropped.
    pub fn measure(&mut self, now_ms: u64, free_slots: u32) -> Measurements {
        let since = now_ms.saturating_sub(WINDOW_MS);
        while self.samples.front().is_some_and(|s| s.at_ms < since) {
            self.samples.pop_front();
        }
        let mut latencies: Vec<u32> = self.samples.iter().map(|s| s.latency_ms).collect();
        let failures = self.samples.iter().filter(|s| s.failed).count();
        let p99_ms = if latencies.is_empty() {
            None
        } else {
            // Nearest rank: the smallest latency at or above 99 % of them.
            let rank = (latencies.len() * 99).div_ceil(100).max(1) - 1;
            Some(*latencies.select_nth_unstable(rank).1)
        };
        Measurements {
            checkouts: latencies.len() as u32,
            p99_ms,
            backend_failures: failures as u32,
            served_per_second: (latencies.len() - failures) as f64 * 1000.0 / WINDOW_MS as f64,
            free_slots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_failures_and_age() {
        let mut w = CheckoutWindow::new();
        for i in 0..100u32 {
            let outcome = if i < 3 {
                Outcome::Failed
            } else {
                Outcome::Served
            };
            w.record(10_000, i + 1, outcome);
        }
        let m = w.measure(10_500, 7);
        assert_eq!(m.checkouts, 100);
        assert_eq!(m.p99_ms, Some(99));
        assert_eq!(m.backend_failures, 3);
        assert_eq!(m.free_slots, 7);
        let later = w.measure(10_000 + WINDOW_MS + 1, 0);
        assert_eq!(later.checkouts, 0);
        assert_eq!(later.p99_ms, None);
    }

    #[test]
    fn holds_at_most_samples_max() {
        let mut w = CheckoutWindow::new();
        for i in 0..(SAMPLES_MAX as u32 + 10) {
            w.record(5, if i < 10 { 1_000_000 } else { 1 }, Outcome::Served);
        }
        let m = w.measure(5, 0);
        assert_eq!(m.checkouts as usize, SAMPLES_MAX);
        assert_eq!(m.p99_ms, Some(1), "the oldest (slow) ones were forgotten");
    }
}
