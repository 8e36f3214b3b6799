//! The last few seconds of admitted shoppers' checkouts, bounded, for the
//! adaptive controller.
//!
//! A step judges the checkouts of the last [`WINDOW_MS`]; when those are
//! fewer than [`SAMPLES_WANTED`] (a slow room: at 2 releases a second,
//! with shoppers polling every 10-20 s, three seconds often hold fewer
//! than 5 checkouts), it reaches further back, up to [`HORIZON_MS`], for
//! the newest [`SAMPLES_WANTED`]. Without that, a room at its floor never
//! had enough checkouts in one window to judge, so its rate held there
//! (reason `steady`) after the backend had recovered.
//!
//! Besides the window's count, p99, mean, failures and served rate, a
//! measurement carries what the backend served in the last second alone
//! (the capacity while saturated, without the 3 s window's lag) and the
//! mean latency and p99 over the last [`LONG_MS`] (what CRUISE watches
//! for a recovery; what STARTUP compares its p99 with, to see it rise),
//! and, for a room whose window holds fewer than
//! [`SLOW_ROOM_BELOW`] checkouts, the mean latency of its newest that many
//! (what its base latency is learnt on).

use std::collections::VecDeque;

use super::Measurements;

/// How far back the window reaches.
pub const WINDOW_MS: u64 = 3000;
/// Checkouts a step wants to judge on: with fewer in [`WINDOW_MS`], the
/// window reaches back for the newest this many.
pub const SAMPLES_WANTED: usize = 20;
/// The longer window: its mean latency is what CRUISE watches for a
/// recovery (a 3 s mean swings too much at 25 checkouts a second); its
/// p99 is what STARTUP's 3 s p99 is compared with.
pub const LONG_MS: u64 = 10_000;
/// A room whose window holds fewer checkouts than this (under about 67 a
/// second) learns its base latency on its newest this many...
pub const SLOW_ROOM_BELOW: usize = 200;
/// ...once its horizon spans at least this long.
pub const SLOW_ROOM_SPAN_MS: u64 = 20_000;
/// How far back the window reaches at most, for [`SAMPLES_WANTED`].
pub const HORIZON_MS: u64 = 30_000;
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

    /// The checkouts of the last [`WINDOW_MS`] before `now_ms`, or the
    /// newest [`SAMPLES_WANTED`] of the last [`HORIZON_MS`] when those are
    /// fewer; older ones are dropped.
    pub fn measure(&mut self, now_ms: u64, free_slots: u32) -> Measurements {
        let horizon = now_ms.saturating_sub(HORIZON_MS);
        while self.samples.front().is_some_and(|s| s.at_ms < horizon) {
            self.samples.pop_front();
        }
        let since = now_ms.saturating_sub(WINDOW_MS);
        let recent = self
            .samples
            .iter()
            .rev()
            .take_while(|s| s.at_ms >= since)
            .count();
        let used = recent.max(SAMPLES_WANTED.min(self.samples.len()));
        let window = self.samples.range(self.samples.len() - used..);
        let span_ms = window
            .clone()
            .next()
            .map_or(WINDOW_MS, |s| now_ms.saturating_sub(s.at_ms).max(WINDOW_MS));
        let mut latencies: Vec<u32> = window.clone().map(|s| s.latency_ms).collect();
        let failures = window.filter(|s| s.failed).count();
        let p99_ms = p99(&mut latencies);
        let mean_ms = mean(latencies.iter().copied());
        let last_s = self
            .samples
            .iter()
            .rev()
            .take_while(|s| s.at_ms + 1000 > now_ms)
            .filter(|s| !s.failed)
            .count();
        let mut long: Vec<u32> = self
            .samples
            .iter()
            .rev()
            .take_while(|s| s.at_ms + LONG_MS > now_ms)
            .map(|s| s.latency_ms)
            .collect();
        let long_mean_ms = mean(long.iter().copied());
        let long_p99_ms = p99(&mut long);
        // A room whose window holds fewer than a base needs: the newest
        // SLOW_ROOM_BELOW of its horizon, once that spans SLOW_ROOM_SPAN_MS.
        let slow_room_mean_ms = match self.samples.front() {
            Some(oldest)
                if latencies.len() < SLOW_ROOM_BELOW
                    && self.samples.len() >= SAMPLES_WANTED
                    && now_ms.saturating_sub(oldest.at_ms) >= SLOW_ROOM_SPAN_MS =>
            {
                mean(
                    self.samples
                        .iter()
                        .rev()
                        .take(SLOW_ROOM_BELOW)
                        .map(|s| s.latency_ms),
                )
            }
            _ => None,
        };
        Measurements {
            checkouts: latencies.len() as u32,
            p99_ms,
            mean_ms,
            backend_failures: failures as u32,
            served_per_second: (latencies.len() - failures) as f64 * 1000.0 / span_ms as f64,
            served_last_s: last_s as f64,
            long_mean_ms,
            long_p99_ms,
            slow_room_mean_ms,
            in_flight: None,
            started_per_second: None,
            free_slots,
        }
    }
}

/// Nearest rank: the smallest latency at or above 99 % of them.
fn p99(latencies: &mut [u32]) -> Option<u32> {
    if latencies.is_empty() {
        return None;
    }
    let rank = (latencies.len() * 99).div_ceil(100).max(1) - 1;
    Some(*latencies.select_nth_unstable(rank).1)
}

fn mean(latencies: impl Iterator<Item = u32>) -> Option<f64> {
    let (sum, n) = latencies.fold((0.0, 0u32), |(sum, n), l| (sum + f64::from(l), n + 1));
    (n > 0).then(|| sum / f64::from(n))
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
        let later = w.measure(10_000 + HORIZON_MS + 1, 0);
        assert_eq!(later.checkouts, 0);
        assert_eq!(later.p99_ms, None);
    }

    #[test]
    fn a_slow_room_is_judged_on_its_newest_checkouts() {
        let mut w = CheckoutWindow::new();
        // Two checkouts a second for 20 s, the newest ten fast, the older
        // ones slow; and one failed long ago, past the horizon.
        w.record(0, 9_999, Outcome::Failed);
        for i in 0..40u64 {
            let at = HORIZON_MS + 1 + i * 500;
            w.record(at, if i >= 30 { 10 } else { 2_000 }, Outcome::Served);
        }
        let now = HORIZON_MS + 1 + 40 * 500;
        let m = w.measure(now, 1);
        // Only 6 in the last 3 s: the newest 20 are judged, over 10 s.
        assert_eq!(m.checkouts as usize, SAMPLES_WANTED);
        assert_eq!(m.backend_failures, 0);
        assert_eq!(m.p99_ms, Some(2_000));
        assert!((m.served_per_second - 2.0).abs() < 0.01, "{m:?}");
        // A busy room is judged on its last 3 s alone.
        for i in 0..300u64 {
            w.record(now + 1 + i * 10, 5, Outcome::Served);
        }
        let m = w.measure(now + 3000, 1);
        assert_eq!(m.checkouts, 300);
        assert_eq!(m.p99_ms, Some(5));
        assert!((m.served_per_second - 100.0).abs() < 0.01, "{m:?}");
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
