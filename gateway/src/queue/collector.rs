//! Prometheus view of the rooms, read from each room's own numbers at
//! scrape time (so nothing is counted twice and nothing drifts).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use sluice_admission::stats::WAIT_BUCKETS_S;

use super::{now_ms, Rooms};

struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const FAMILIES: [Family; 9] = [
    Family {
        name: "sluice_queue_joins_total",
        help: "Joins by result (queued, queue_full, paused, sold_out, rate_limited).",
        kind: MetricType::COUNTER,
    },
    Family {
        name: "sluice_queue_waiting",
        help: "Live tickets waiting in line.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_queue_oldest_wait_seconds",
        help: "Age of the oldest live ticket in line.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_queue_abandoned_total",
        help: "Waiting tickets that stopped polling and left the line.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: "sluice_admissions_total",
        help: "Passes minted.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: "sluice_active_passes",
        help: "Passes valid now.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_release_rate",
        help: "Measured admissions per second over the last 10 s.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_release_rate_limit",
        help: "Configured (or derived) release_per_second.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: "sluice_wait_seconds",
        help: "Time from joining to admission.",
        kind: MetricType::HISTOGRAM,
    },
];

pub struct RoomCollector {
    rooms: Arc<Rooms>,
    descs: Vec<Desc>,
}

impl RoomCollector {
    pub fn new(rooms: Arc<Rooms>) -> Self {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                Desc::new(
                    f.name.into(),
                    f.help.into(),
                    vec!["room".into()],
                    Default::default(),
                )
                .expect("valid metric name")
            })
            .collect();
        Self { rooms, descs }
    }
}

/// Label pairs sorted by name, as the prometheus crate's own vectors
/// expose them.
fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    let mut pairs = pairs.to_vec();
    pairs.sort_by_key(|(k, _)| *k);
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).into());
            l.set_value((*v).into());
            l
        })
        .collect()
}

fn gauge(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_gauge(g);
    m
}

fn counter(pairs: &[(&str, &str)], v: u64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v as f64);
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    m.set_counter(c);
    m
}

impl Collector for RoomCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = now_ms();
        let mut metrics: Vec<Vec<Metric>> = vec![Vec::new(); FAMILIES.len()];
        let rooms = self.rooms.all();
        let mut names: Vec<&String> = rooms.keys().collect();
        names.sort();
        for name in names {
            let entry = &rooms[name];
            let s = entry
                .line
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stats(now);
            let room = name.as_str();
            let r = [("room", room)];
            for (result, n) in [
                ("queued", s.joins.queued),
                ("queue_full", s.joins.queue_full),
                ("paused", s.joins.paused),
                ("sold_out", s.joins.sold_out),
                (
                    "rate_limited",
                    entry.rate_limited_joins.load(Ordering::Relaxed),
                ),
            ] {
                metrics[0].push(counter(&[("room", room), ("result", result)], n));
            }
            metrics[1].push(gauge(&r, s.waiting as f64));
            metrics[2].push(gauge(&r, s.oldest_wait_s as f64));
            metrics[3].push(counter(&r, s.abandoned_total));
            metrics[4].push(counter(&r, s.admitted_total));
            metrics[5].push(gauge(&r, s.active_passes as f64));
            metrics[6].push(gauge(&r, s.release_rate));
            metrics[7].push(gauge(&r, f64::from(s.release_per_second)));
            let mut h = Histogram::default();
            let mut cumulative = 0;
            let buckets = WAIT_BUCKETS_S
                .iter()
                .zip(s.wait.counts.iter())
                .map(|(bound, count)| {
                    cumulative += count;
                    let mut b = Bucket::default();
                    b.set_upper_bound(*bound as f64);
                    b.set_cumulative_count(cumulative);
                    b
                })
                .collect();
            h.set_bucket(buckets);
            h.set_sample_count(s.wait.count());
            h.set_sample_sum(s.wait.sum_s as f64);
            let mut m = Metric::default();
            m.set_label(labels(&r));
            m.set_histogram(h);
            metrics[8].push(m);
        }
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
