//! Prometheus view of the rooms, read from each room's own numbers at
//! scrape time (so nothing is counted twice and nothing drifts).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, Metric, MetricFamily, MetricType};
use sluice_admission::stats::WAIT_BUCKETS_S;

use super::Rooms;
use crate::clock::now_ms;
use crate::scrape::{assemble, descs, labels, sample, Family};

const FAMILIES: [Family; 15] = [
    Family::new(
        "sluice_queue_joins_total",
        "Joins by result (queued, queue_full, paused, sold_out, store_unavailable, rate_limited, forbidden, not_open, event_closed, enqueue_token_required, invalid_enqueue_token, challenge_required, challenge_failed).",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_queue_waiting",
        "Live tickets waiting in line.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_queue_oldest_wait_seconds",
        "Age of the oldest live ticket in line.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_queue_abandoned_total",
        "Waiting tickets that stopped polling and left the line.",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_admissions_total",
        "Passes minted.",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_active_passes",
        "Passes valid now.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_release_rate",
        "Measured admissions per second over the last 10 s.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_release_rate_limit",
        "release_per_second in force; reason: fixed, auto, or what last moved an adaptive rate.",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_wait_seconds",
        "Time from joining to admission.",
        MetricType::HISTOGRAM,
    ),
    Family::new(
        "sluice_queue_no_show_share",
        "Measured share of released places never collected that the release makes up for (0 to 0.5, the bound).",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_uncollected_passes",
        "Released places whose pass has not been collected yet (within their claim window).",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_queue_polls_too_early_total",
        "Status polls refused (429) for coming sooner than their last answer told them; on a fleet, by this gateway.",
        MetricType::COUNTER,
    ),
    Family::new(
        "sluice_fleet_clock_offset_seconds",
        "With [cluster] redis_url: Redis's clock less this gateway's, as the last heartbeat measured it (passes end by Redis's clock and are checked by this one).",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_fleet_store_up",
        "With [cluster] redis_url: 1 while this gateway's heartbeat reached the room store (Redis) within the last 3 s, else 0 (joins answer 503 store_unavailable, waiting shoppers see paused).",
        MetricType::GAUGE,
    ),
    Family::new(
        "sluice_passes_ended_total",
        "Passes ended before their time, their slot given back: reason idle (no request and no checkout for pass_idle_s) or origin (Sluice-Pass: end); on a fleet, by this gateway.",
        MetricType::COUNTER,
    ),
];

pub struct RoomCollector {
    rooms: Arc<Rooms>,
    descs: Vec<Desc>,
}

impl RoomCollector {
    pub fn new(rooms: Arc<Rooms>) -> Self {
        let descs = descs(&FAMILIES);
        Self { rooms, descs }
    }
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
            let s = entry.stats(now);
            let room = name.as_str();
            let r = [("room", room)];
            for (result, n) in [
                ("queued", s.joins.queued),
                ("queue_full", s.joins.queue_full),
                ("paused", s.joins.paused),
                ("sold_out", s.joins.sold_out),
                ("store_unavailable", s.joins.store_unavailable),
                (
                    "rate_limited",
                    entry.rate_limited_joins.load(Ordering::Relaxed),
                ),
                ("forbidden", entry.forbidden_joins.load(Ordering::Relaxed)),
                ("not_open", entry.not_open_joins.load(Ordering::Relaxed)),
                (
                    "event_closed",
                    entry.event_closed_joins.load(Ordering::Relaxed),
                ),
                (
                    "enqueue_token_required",
                    entry.enqueue.required_joins.load(Ordering::Relaxed),
                ),
                (
                    "invalid_enqueue_token",
                    entry.enqueue.invalid_joins.load(Ordering::Relaxed),
                ),
                (
                    "challenge_required",
                    entry.challenge.required.load(Ordering::Relaxed),
                ),
                (
                    "challenge_failed",
                    entry.challenge.failed.load(Ordering::Relaxed),
                ),
            ] {
                metrics[0].push(sample(
                    &[("room", room), ("result", result)],
                    MetricType::COUNTER,
                    n as f64,
                ));
            }
            metrics[1].push(sample(&r, MetricType::GAUGE, s.waiting as f64));
            metrics[2].push(sample(&r, MetricType::GAUGE, s.oldest_wait_s as f64));
            metrics[3].push(sample(&r, MetricType::COUNTER, s.abandoned_total as f64));
            metrics[4].push(sample(&r, MetricType::COUNTER, s.admitted_total as f64));
            metrics[5].push(sample(&r, MetricType::GAUGE, s.active_passes as f64));
            metrics[6].push(sample(&r, MetricType::GAUGE, s.release_rate));
            let reason = entry.release_reason();
            metrics[7].push(sample(
                &[("room", room), ("reason", reason)],
                MetricType::GAUGE,
                f64::from(s.release_per_second),
            ));
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
            metrics[9].push(sample(&r, MetricType::GAUGE, s.no_show_share));
            metrics[10].push(sample(&r, MetricType::GAUGE, s.uncollected as f64));
            metrics[11].push(sample(&r, MetricType::COUNTER, s.too_early_total as f64));
            for (reason, n) in [
                ("idle", s.passes_ended_idle),
                ("origin", s.passes_ended_origin),
            ] {
                metrics[14].push(sample(
                    &[("room", room), ("reason", reason)],
                    MetricType::COUNTER,
                    n as f64,
                ));
            }
        }
        if let Some(offset_ms) = self.rooms.fleet_clock_offset_ms() {
            metrics[12].push(sample(&[], MetricType::GAUGE, offset_ms as f64 / 1000.0));
        }
        if let Some(health) = self.rooms.fleet_store_health() {
            let up = matches!(health, crate::queue::fleet::StoreHealth::Up);
            metrics[13].push(sample(&[], MetricType::GAUGE, f64::from(u8::from(up))));
        }
        assemble(&FAMILIES, metrics)
    }
}
