//! Prometheus view of the reservation core, read from the store at scrape
//! time: inventory, orders by state, outbox backlog, reservation age,
//! stuck orders and invariant checks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use sluice_checkout::OrderState;

use super::Orders;
use crate::queue::now_ms;

struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const FAMILIES: [Family; 9] = [
    Family {
        name: "sluice_inventory_units",
        help: "Units per sku by state (available, reserved, committed).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_orders",
        help: "Orders by state.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_outbox_pending",
        help: "Outbox events not yet acknowledged by the sink.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_outbox_lag_seconds",
        help: "Age of the oldest unpublished outbox event.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_reservation_age_seconds",
        help: "Age of the oldest reservation still holding stock.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_stuck_orders",
        help: "Orders resting in one state longer than the threshold, at the last reconciler pass.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_invariant_violations_total",
        help: "Stock conservation checks that failed.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: "sluice_illegal_transitions_total",
        help: "Order transitions refused by the state table.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: "sluice_store_batches_total",
        help: "Group-commit batches written (one fsync each).",
        kind: MetricType::COUNTER,
    },
];

pub struct OrdersCollector {
    orders: Arc<Orders>,
    descs: Vec<Desc>,
}

impl OrdersCollector {
    pub fn new(orders: Arc<Orders>) -> Self {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                Desc::new(f.name.into(), f.help.into(), vec![], Default::default())
                    .expect("valid metric name")
            })
            .collect();
        Self { orders, descs }
    }
}

fn metric(pairs: &[(&str, &str)], kind: MetricType, v: f64) -> Metric {
    let mut labels: Vec<LabelPair> = pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).into());
            l.set_value((*v).into());
            l
        })
        .collect();
    labels.sort_by(|a, b| a.name().cmp(b.name()));
    let mut m = Metric::default();
    m.set_label(labels);
    if kind == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(v);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(v);
        m.set_gauge(g);
    }
    m
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
                    metrics[0].push(metric(
                        &[("sku", &l.sku), ("state", state)],
                        MetricType::GAUGE,
                        n as f64,
                    ));
                }
            }
        }
        if let Ok(counts) = store.order_counts() {
            for (state, n) in counts {
                metrics[1].push(metric(
                    &[("state", state.as_str())],
                    MetricType::GAUGE,
                    n as f64,
                ));
            }
        }
        if let Ok(n) = store.outbox_pending() {
            metrics[2].push(metric(&[], MetricType::GAUGE, n as f64));
        }
        if let Ok(ms) = store.outbox_lag_ms(now) {
            metrics[3].push(metric(&[], MetricType::GAUGE, ms as f64 / 1000.0));
        }
        if let Ok(ms) = store.oldest_hold_age_ms(now) {
            metrics[4].push(metric(&[], MetricType::GAUGE, ms as f64 / 1000.0));
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
            metrics[5].push(metric(
                &[("state", state.as_str())],
                MetricType::GAUGE,
                n as f64,
            ));
        }
        let m = store.metrics();
        metrics[6].push(metric(
            &[],
            MetricType::COUNTER,
            m.invariant_violations.load(Ordering::Relaxed) as f64,
        ));
        metrics[7].push(metric(
            &[],
            MetricType::COUNTER,
            m.illegal_transitions.load(Ordering::Relaxed) as f64,
        ));
        metrics[8].push(metric(
            &[],
            MetricType::COUNTER,
            m.batches_committed.load(Ordering::Relaxed) as f64,
        ));
        FAMILIES
            .iter()
            .zip(metrics)
            .filter(|(_, m)| !m.is_empty())
            .map(|(f, m)| {
                let mut family = MetricFamily::default();
                family.set_name(f.name.into());
                family.set_help(f.help.into());
                family.set_field_type(f.kind);
                family.set_metric(m);
                family
            })
            .collect()
    }
}
