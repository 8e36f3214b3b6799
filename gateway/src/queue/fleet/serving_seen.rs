//! The room's `serving` as this gateway saw it over time, so that after
//! the store lost the room it can say which released places could still be
//! collected: those released less than one claim window before the loss
//! ([`ServingSeen::at`]). An older place is a no-show, or a pass that
//! ended or was given back, and must not be handed a pass again.

use std::collections::VecDeque;

/// Samples kept at most (one per tick that saw `serving` move).
pub const SAMPLES_MAX: usize = 4_096;

#[derive(Debug, Default)]
pub struct ServingSeen {
    /// `(local unix ms, serving)`, oldest first; `serving` never falls.
    samples: VecDeque<(u64, u64)>,
}

impl ServingSeen {
    /// A tick at `at_ms` read `serving`. Only a rise is kept; samples
    /// older than `keep_ms` before `at_ms` go, but the newest of them stays
    /// (it says what `serving` was at the start of the span kept).
    pub fn saw(&mut self, at_ms: u64, serving: u64, keep_ms: u64) {
        if self.samples.back().is_none_or(|&(_, s)| serving > s) {
            self.samples.push_back((at_ms, serving));
        }
        let horizon = at_ms.saturating_sub(keep_ms);
        while self.samples.len() > 1
            && (self.samples.len() > SAMPLES_MAX || self.samples[1].0 <= horizon)
        {
            self.samples.pop_front();
        }
    }

    /// `serving` as seen at `at_ms`: the last sample at or before it. With
    /// none that old, the oldest one (higher than the truth: a place may be
    /// lost, never handed out twice); `None` before any tick.
    pub fn at(&self, at_ms: u64) -> Option<u64> {
        let older = self.samples.iter().rev().find(|&&(t, _)| t <= at_ms);
        older.or(self.samples.front()).map(|&(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_at_a_time_is_the_last_sample_before_it() {
        let mut seen = ServingSeen::default();
        assert_eq!(seen.at(0), None);
        seen.saw(1_000, 0, 10_000);
        seen.saw(2_000, 5, 10_000);
        seen.saw(2_500, 5, 10_000); // no rise: not kept
        seen.saw(3_000, 9, 10_000);
        assert_eq!(seen.at(999), Some(0), "before the first: the oldest");
        assert_eq!(seen.at(1_500), Some(0));
        assert_eq!(seen.at(2_000), Some(5));
        assert_eq!(seen.at(2_999), Some(5));
        assert_eq!(seen.at(60_000), Some(9));
        assert_eq!(seen.samples.len(), 3);
    }

    #[test]
    fn old_samples_go_but_the_span_kept_still_has_its_start() {
        let mut seen = ServingSeen::default();
        for i in 0..100u64 {
            seen.saw(i * 1_000, i, 10_000);
        }
        // Kept: 10 s back from 99 s, and the sample that starts the span.
        assert_eq!(seen.at(89_000), Some(89));
        assert_eq!(seen.at(89_500), Some(89));
        assert!(seen.samples.len() <= 12, "{}", seen.samples.len());
        for i in 0..(2 * SAMPLES_MAX as u64) {
            seen.saw(200_000 + i, 100 + i, u64::MAX);
        }
        assert_eq!(seen.samples.len(), SAMPLES_MAX);
    }
}
