//! Counters a transaction decides on, applied to [`Metrics`] only after
//! its commit: a transaction run again (a deadlock victim) or rolled back
//! counts nothing twice, or at all.

use crate::metrics::Metrics;

/// What one transaction will count once committed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    orphan_charges: u64,
    illegal_transitions: u64,
    compensation_failures: u64,
    /// `(kind, result)` of each compensation settled.
    compensations: Vec<(&'static str, &'static str)>,
}

impl Tally {
    /// Money with no live order (its compensation is stored).
    pub(crate) fn orphan_charge(&mut self) {
        self.orphan_charges += 1;
    }

    /// A provider event contradicting the order, refused.
    pub(crate) fn illegal_transition(&mut self) {
        self.illegal_transitions += 1;
    }

    /// A void or refund settled: `result` is `ok` or `failed` (a failed
    /// one is also a compensation failure, for an operator).
    pub(crate) fn compensation(&mut self, kind: &'static str, result: &'static str) {
        self.compensations.push((kind, result));
        if result == "failed" {
            self.compensation_failures += 1;
        }
    }

    /// Adds everything to `metrics`: call after the commit.
    pub(crate) fn apply(self, metrics: &Metrics) {
        metrics
            .orphan_charges
            .fetch_add(self.orphan_charges, std::sync::atomic::Ordering::Relaxed);
        metrics.illegal_transitions.fetch_add(
            self.illegal_transitions,
            std::sync::atomic::Ordering::Relaxed,
        );
        metrics.compensation_failures.fetch_add(
            self.compensation_failures,
            std::sync::atomic::Ordering::Relaxed,
        );
        for (kind, result) in self.compensations {
            metrics.count_compensation(kind, result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reach_the_metrics_only_when_applied() {
        let metrics = Metrics::default();
        let mut tally = Tally::default();
        tally.orphan_charge();
        tally.compensation("refund", "failed");
        tally.compensation("void", "ok");
        tally.illegal_transition();
        assert_eq!(Metrics::get(&metrics.orphan_charges), 0);
        tally.apply(&metrics);
        assert_eq!(Metrics::get(&metrics.orphan_charges), 1);
        assert_eq!(Metrics::get(&metrics.illegal_transitions), 1);
        assert_eq!(Metrics::get(&metrics.compensation_failures), 1);
        assert_eq!(metrics.compensations.get(&["refund", "failed"]), 1);
        assert_eq!(metrics.compensations.get(&["void", "ok"]), 1);
    }
}
