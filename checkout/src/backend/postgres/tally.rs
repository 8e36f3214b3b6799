//! Counters a transaction decides on, and the operator's log lines it
//! writes, applied to [`Metrics`] and the log only after its commit: a
//! transaction run again (a deadlock victim, a stale statement) or rolled
//! back counts and logs nothing twice, or at all.

use crate::metrics::Metrics;

/// What one transaction will count once committed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    orphan_charges: u64,
    illegal_transitions: u64,
    compensation_failures: u64,
    /// `(kind, result)` of each compensation settled.
    compensations: Vec<(&'static str, &'static str)>,
    /// `(order, kind)` of each compensation the provider refused (logged).
    refused: Vec<(String, &'static str)>,
    /// `(order, event)` of each provider event for an unknown order
    /// (logged).
    unknown_orders: Vec<(String, String)>,
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

    /// A void or refund (`kind`) of `order` the provider refused: a
    /// failed compensation, and an error logged for an operator.
    pub(crate) fn compensation_refused(&mut self, order: &str, kind: &'static str) {
        self.compensation(kind, "failed");
        self.refused.push((order.to_owned(), kind));
    }

    /// A provider event for an order this store does not have (its money
    /// is given back): an error logged.
    pub(crate) fn unknown_order(&mut self, order: &str, event: &str) {
        self.unknown_orders
            .push((order.to_owned(), event.to_owned()));
    }

    /// Adds everything to `metrics` and writes the log lines: call after
    /// the commit.
    pub(crate) fn apply(self, metrics: &Metrics) {
        for (order, kind) in &self.refused {
            tracing::error!(order = %order, kind, "compensation refused by the provider; an operator must settle it");
        }
        for (order, event) in &self.unknown_orders {
            tracing::error!(order = %order, event = %event, "provider event for an unknown order: its money is given back");
        }
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

    /// Counts the events logged while it is the default subscriber.
    struct Events(std::sync::atomic::AtomicUsize);

    impl tracing::Subscriber for Events {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            if *event.metadata().level() == tracing::Level::ERROR {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn log_lines_are_written_once_when_applied_not_when_decided() {
        let events = std::sync::Arc::new(Events(Default::default()));
        let logged = || events.0.load(std::sync::atomic::Ordering::Relaxed);
        let metrics = Metrics::default();
        tracing::subscriber::with_default(events.clone(), || {
            // A transaction run twice decides twice; only the run that
            // committed is applied.
            for _ in 0..2 {
                let mut tally = Tally::default();
                tally.compensation_refused("ord_1", "refund");
                tally.unknown_order("ord_2", "evt_1");
            }
            assert_eq!(logged(), 0, "nothing logged before the commit");
            let mut tally = Tally::default();
            tally.compensation_refused("ord_1", "refund");
            tally.unknown_order("ord_2", "evt_1");
            tally.apply(&metrics);
        });
        assert_eq!(logged(), 2);
        assert_eq!(Metrics::get(&metrics.compensation_failures), 1);
        assert_eq!(metrics.compensations.get(&["refund", "failed"]), 1);
    }
}
