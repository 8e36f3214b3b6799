//! Prometheus view of the reservation core, read from the store at scrape
//! time: inventory, orders by state, outbox backlog, reservation age,
//! stuck orders and invariant checks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Metric, MetricFamily, MetricType};
use sluice_checkout::OrderState;

use super::Orders;
use crate::queue::now_ms;
use crate::scrape::{assemble, descs, sample, Family};

const FAMILIES: [Family; 9] = [
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

impl Collector for OrdersCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let store = self.orders.store();
        let now = now_ms() as i64;
        let mut metrics: Vec<Vec<Metric>> = vec![Vec::new(); FAMILIES.len()];
        if let Ok(levels) = store.inventory() {
            for l in levels {
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
        }
        if let Ok(counts) = store.order_counts() {
            for (state, n) in counts {
                metrics[1].push(sample(
                    &[("state", state.as_str())],
                    MetricType::GAUGE,
                    n as f64,
                ));
            }
        }
        if let Ok(n) = store.outbox_pending() {
            metrics[2].push(sample(&[], MetricType::GAUGE, n as f64));
        }
        if let Ok(ms) = store.outbox_lag_ms(now) {
            metrics[3].push(sample(&[], MetricType::GAUGE, ms as f64 / 1000.0));
        }
        if let Ok(ms) = store.oldest_hold_age_ms(now) {
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
        let m = store.metrics();
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
        assemble(&FAMILIES, metrics)
    }
}
