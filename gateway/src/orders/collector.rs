//! Prometheus view of the reservation core at scrape time, from memory:
//! inventory and orders by state (the books as last read: stock after each
//! write, orders per state by the orders worker's pass), outbox backlog,
//! reservation age, stuck orders, and the back end's counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};
use sluice_checkout::metrics::AUTH_LATENCY_BUCKETS_MS;
use sluice_checkout::LatencyHistogram;
use sluice_checkout::OrderState;

use super::Orders;
use crate::scrape::{assemble, descs, labels, sample, Family};

const FAMILIES: [Family; 15] = [
    Family::new(
        "sluice_inventory_units",
        "Units per sku by state (available, reserved, committed).",
        MetricType::GAUGE,
    ),
    Family::new("sluice_orders", "Orders by state.", MetricType::GAUGE),
    Family::new(
        "sluice_outbox_pending",
        "Outbox events not yet acknowledged by the sink.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_outbox_lag_seconds",
        "Age of the oldest unpublished outbox event.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_reservation_age_seconds",
        "Age of the oldest reservation still holding stock.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_stuck_orders",
        "Orders resting in one state longer than the threshold, at the last reconciler pass.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_invariant_violations_total",
        "Stock conservation checks that failed.",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_illegal_transitions_total",
        "Order transitions refused by the state table.",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_store_batches_total",
        "Group-commit batches written (one fsync each).",
        MetricType::COUNTER,
    ),
    Family::new("sluice_webhook_events_total", "Provider events received, by result (processed, duplicate, invalid_signature, stale, rejected_transition, ...).", MetricType::COUNTER),
    Family::new("sluice_payment_ambiguous_total", "Provider answers that did not prove an outcome (timeout, reset, 5xx).", MetricType::COUNTER),
    Family::new("sluice_compensations_total", "Voids and refunds, by kind and result.", MetricType::COUNTER),
    Family::new("sluice_compensation_failures_total", "Compensations past their retry budget (stuck until resolved).", MetricType::COUNTER),
    Family::new("sluice_orphan_charges_total", "Money taken with no live order, found and compensated.", MetricType::COUNTER),
    Family::new("sluice_payment_auth_seconds", "Authorization time at the provider, by provider and result.", MetricType::HISTOGRAM),
];

pub struct OrdersCollector {
    orders: Arc<Orders>,
    descs: Vec<Desc>,
}

impl OrdersCollector {
    pub fn new(orders: Arc<Orders>) -> Self {
        let descs = descs(&FAMILIES);
        Self { orders, descs }
    }
}

/// A millisecond histogram as a Prometheus histogram in seconds.
fn latency(provider: &str, result: &str, h: &LatencyHistogram) -> Metric {
    let mut cumulative = 0;
    let buckets = AUTH_LATENCY_BUCKETS_MS
        .iter()
        .zip(h.buckets.iter())
        .map(|(bound_ms, n)| {
            cumulative += n;
            let mut b = Bucket::default();
            b.set_upper_bound(*bound_ms as f64 / 1000.0);
            b.set_cumulative_count(cumulative);
            b
        })
        .collect();
    let mut histogram = Histogram::default();
    histogram.set_bucket(buckets);
    histogram.set_sample_count(h.count);
    histogram.set_sample_sum(h.sum_ms as f64 / 1000.0);
    let mut metric = Metric::default();
    metric.set_label(labels(&[("provider", provider), ("result", result)]));
    metric.set_histogram(histogram);
    metric
}

impl Collector for OrdersCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // Memory only: the books as last read, the gauges by the orders
        // worker's pass.
        let books = self.orders.books();
        let gauges = self.orders.gauges();
        let mut metrics: Vec<Vec<Metric>> = vec![Vec::new(); FAMILIES.len()];
        for l in &books.inventory {
            for (state, n) in [
                ("available", l.available),
                ("reserved", l.reserved),
                ("committed", l.committed),
            ] {
                metrics[0].push(sample(
                    &[("sku", &l.sku), ("state", state)],
                    MetricType::GAUGE,
                    n as f64,
                ));
            }
        }
        for (state, n) in &books.orders {
            metrics[1].push(sample(
                &[("state", state.as_str())],
                MetricType::GAUGE,
                *n as f64,
            ));
        }
        if let Some(n) = gauges.outbox_pending {
            metrics[2].push(sample(&[], MetricType::GAUGE, n as f64));
        }
        if let Some(ms) = gauges.outbox_lag_ms {
            metrics[3].push(sample(&[], MetricType::GAUGE, ms as f64 / 1000.0));
        }
        if let Some(ms) = gauges.oldest_hold_age_ms {
            metrics[4].push(sample(&[], MetricType::GAUGE, ms as f64 / 1000.0));
        }
        let stuck = self.orders.stuck();
        for state in [
            OrderState::Reserved,
            OrderState::Authorizing,
            OrderState::Refunding,
        ] {
            let n = stuck
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, n)| *n);
            metrics[5].push(sample(
                &[("state", state.as_str())],
                MetricType::GAUGE,
                n as f64,
            ));
        }
        let m = self.orders.backend().metrics();
        metrics[6].push(sample(
            &[],
            MetricType::COUNTER,
            m.invariant_violations.load(Ordering::Relaxed) as f64,
        ));
        metrics[7].push(sample(
            &[],
            MetricType::COUNTER,
            m.illegal_transitions.load(Ordering::Relaxed) as f64,
        ));
        metrics[8].push(sample(
            &[],
            MetricType::COUNTER,
            m.batches_committed.load(Ordering::Relaxed) as f64,
        ));
        for (labels, n) in m.webhook_events.snapshot() {
            let result = labels.first().copied().unwrap_or("unknown");
            metrics[9].push(sample(&[("result", result)], MetricType::COUNTER, n as f64));
        }
        metrics[10].push(sample(
            &[],
            MetricType::COUNTER,
            m.payment_ambiguous.load(Ordering::Relaxed) as f64,
        ));
        for (labels, n) in m.compensations.snapshot() {
            let (kind, result) = (
                labels.first().copied().unwrap_or(""),
                labels.get(1).copied().unwrap_or(""),
            );
            metrics[11].push(sample(
                &[("kind", kind), ("result", result)],
                MetricType::COUNTER,
                n as f64,
            ));
        }
        metrics[12].push(sample(
            &[],
            MetricType::COUNTER,
            m.compensation_failures.load(Ordering::Relaxed) as f64,
        ));
        metrics[13].push(sample(
            &[],
            MetricType::COUNTER,
            m.orphan_charges.load(Ordering::Relaxed) as f64,
        ));
        for ((provider, result), h) in m.auth_latency.snapshot() {
            metrics[14].push(latency(&provider, result, &h));
        }
        assemble(&FAMILIES, metrics)
    }
}
