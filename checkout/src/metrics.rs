//! Counters the gateway exports as `sluice_*` metrics. Plain atomics so this
//! crate does not pick a metrics library for the gateway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (ms) of the authorization latency buckets; the last bucket
/// is everything above.
pub const AUTH_LATENCY_BUCKETS_MS: [u64; 10] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000];

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
    /// Service transactions a caller waited on until durable (each
    /// `Store::write`): what `docs/orders.md` counts per checkout.
    pub durable_writes: AtomicU64,
    /// Outbox events handed to a sink and acknowledged.
    pub outbox_published: AtomicU64,
    /// `sluice_payment_ambiguous_total`: provider answers that were lost
    /// (timeout, reset, 5xx).
    pub payment_ambiguous: AtomicU64,
    /// `sluice_compensation_failures_total`: compensations past their budget.
    pub compensation_failures: AtomicU64,
    /// Charges found with no live order (refunded or voided by the reconciler).
    pub orphan_charges: AtomicU64,
    /// `sluice_compensations_total{kind,result}`.
    pub compensations: LabeledCounters,
    /// `sluice_webhook_events_total{result}`.
    pub webhook_events: LabeledCounters,
    /// `sluice_payment_auth_seconds{provider,result}`.
    pub auth_latency: AuthLatency,
}

impl Metrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
    pub(crate) fn count_webhook(&self, result: &'static str) {
        self.webhook_events.inc(&[result]);
    }
    pub(crate) fn count_compensation(&self, kind: &'static str, result: &'static str) {
        self.compensations.inc(&[kind, result]);
    }
}

/// Counters keyed by a few static label values (a handful of series).
#[derive(Debug, Default)]
pub struct LabeledCounters(Mutex<Vec<(Vec<&'static str>, u64)>>);

impl LabeledCounters {
    pub(crate) fn inc(&self, labels: &[&'static str]) {
        let mut series = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match series.iter_mut().find(|(l, _)| l.as_slice() == labels) {
            Some((_, n)) => *n += 1,
            None => series.push((labels.to_vec(), 1)),
        }
    }

    /// The count for exactly these label values (0 when never counted).
    pub fn get(&self, labels: &[&str]) -> u64 {
        let series = self.0.lock().unwrap_or_else(|p| p.into_inner());
        series
            .iter()
            .find(|(l, _)| l.as_slice() == labels)
            .map_or(0, |(_, n)| *n)
    }

    /// Every series, label values in declaration order.
    pub fn snapshot(&self) -> Vec<(Vec<&'static str>, u64)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One latency histogram: counts per bucket of [`AUTH_LATENCY_BUCKETS_MS`]
/// (plus one overflow bucket), their sum and count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    pub buckets: [u64; AUTH_LATENCY_BUCKETS_MS.len() + 1],
    pub sum_ms: u64,
    pub count: u64,
}

/// Authorization latency per (provider, result).
#[derive(Debug, Default)]
pub struct AuthLatency(Mutex<Vec<((String, &'static str), LatencyHistogram)>>);

impl AuthLatency {
    pub(crate) fn record(&self, provider: &str, result: &'static str, elapsed_ms: u64) {
        let mut series = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let index = match series
            .iter()
            .position(|((p, r), _)| p == provider && *r == result)
        {
            Some(index) => index,
            None => {
                series.push(((provider.to_owned(), result), LatencyHistogram::default()));
                series.len() - 1
            }
        };
        let histogram = &mut series[index].1;
        let bucket = AUTH_LATENCY_BUCKETS_MS
            .iter()
            .position(|bound| elapsed_ms <= *bound)
            .unwrap_or(AUTH_LATENCY_BUCKETS_MS.len());
        histogram.buckets[bucket] += 1;
        histogram.sum_ms = histogram.sum_ms.saturating_add(elapsed_ms);
        histogram.count += 1;
    }

    /// Every (provider, result) series.
    pub fn snapshot(&self) -> Vec<((String, &'static str), LatencyHistogram)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
