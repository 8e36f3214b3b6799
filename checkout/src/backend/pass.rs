//! What the back ends' background passes report (the same for both):
//! expiry and stuck orders, retention, payments.

use crate::core::state::OrderState;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileOutcome {
    /// Holds released because they expired (their orders are `expired`).
    pub expired: usize,
    /// Overdue holds kept because the payment may hold money.
    pub kept_for_payment: usize,
    /// Orders resting too long, per state (`sluice_stuck_orders{state}`).
    pub stuck: Vec<(OrderState, usize)>,
    /// Partitioned SKUs whose free units were evened out (logged moves).
    pub rebalanced: usize,
    /// SKUs and partitions whose counts do not add up or disagree with
    /// their holds.
    pub conservation_violations: usize,
    /// Idempotency keys forgotten (also in `pruned`).
    pub keys_purged: usize,
    /// Everything this pass forgot, per kind.
    pub pruned: PruneOutcome,
}

/// Rows one pass deleted, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub idempotency_keys: usize,
    pub outbox_events: usize,
    pub webhook_events: usize,
    pub ended_holds: usize,
}

impl PruneOutcome {
    /// Some kind reached the limit: more may be due (the next pass goes on).
    pub fn more_due(&self, limit: usize) -> bool {
        [
            self.idempotency_keys,
            self.outbox_events,
            self.webhook_events,
            self.ended_holds,
        ]
        .into_iter()
        .any(|n| n >= limit)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentsReconcileOutcome {
    /// Provider events read from its list, and what applying them did.
    pub events_read: usize,
    pub events_processed: usize,
    /// The event list could not be read this pass (ambiguous answer).
    pub events_unavailable: bool,
    /// Unresolved attempts driven, and how many now have an outcome.
    pub attempts_driven: usize,
    pub attempts_resolved: usize,
    /// Compensations past their budget, not succeeded (an operator looks).
    pub stuck_compensations: usize,
}
