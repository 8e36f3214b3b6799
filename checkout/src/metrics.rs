//! Counters the gateway exports as `sluice_*` metrics. Plain atomics so this
//! crate does not pick a metrics library for the gateway.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    /// `sluice_reservations_total{result="ok"}`.
    pub reservations_ok: AtomicU64,
    /// `sluice_reservations_total{result="sold_out"}`.
    pub reservations_sold_out: AtomicU64,
    /// Transitions refused by the table (or by a stale expected state).
    pub illegal_transitions: AtomicU64,
    /// `sluice_invariant_violations_total`.
    pub invariant_violations: AtomicU64,
    /// Group-commit batches committed (one fsync each).
    pub batches_committed: AtomicU64,
    /// Outbox events handed to a sink and acknowledged.
    pub outbox_published: AtomicU64,
}

impl Metrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
