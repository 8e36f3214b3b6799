//! Prometheus metrics of the gateway, in one registry of its own.
//!
//! Labels never name a person: only `room`, `sku`, `result`/`state` style
//! values. The registry adds `region` (`gateway.region`, fixed at start)
//! to every sample of every family, the collectors' too, so a fleet's
//! scrapes can be segmented by region.

use std::sync::OnceLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// What `sluice_http_served_total{result}` counts.
pub const SOURCES: [&str; 7] = [
    "local",
    "catalog",
    "origin",
    "cache_hit",
    "queue",
    "orders",
    "webhook",
];
/// What `sluice_origin_cache_total{result}` counts.
pub const CACHE_RESULTS: [&str; 4] = ["hit", "miss", "uncacheable", "stored"];
/// The status classes of `sluice_http_requests_total{result}`.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The children of a one-label counter family for a fixed set of values,
/// each resolved on its first use and then counted without a label
/// look-up (hashing the value and a lock on the family's map). A child
/// appears in the exposition once counted, as with `with_label_values`.
pub struct Children<const N: usize> {
    family: IntCounterVec,
    values: [&'static str; N],
    resolved: [OnceLock<IntCounter>; N],
}

impl<const N: usize> Children<N> {
    fn new(family: &IntCounterVec, values: [&'static str; N]) -> Self {
        Self {
            family: family.clone(),
            values,
            resolved: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// Adds one to the child of `value`.
    pub fn inc(&self, value: &str) {
        match self.values.iter().position(|v| *v == value) {
            Some(i) => self.resolved[i]
                .get_or_init(|| self.family.with_label_values(&[value]))
                .inc(),
            None => self.family.with_label_values(&[value]).inc(),
        }
    }
}

pub struct Metrics {
    registry: Registry,
    /// Requests answered, by status class (`2xx` … `5xx`).
    pub requests: IntCounterVec,
    /// Requests being handled now.
    pub inflight: IntGauge,
    /// How each request was served: `catalog`, `origin`, `cache_hit`, `local`.
    pub served: IntCounterVec,
    /// Time from sending the request to the origin to its response header.
    pub upstream_seconds: Histogram,
    /// Origin answers that failed: `connect`, `timeout`, `error`.
    pub origin_errors: IntCounterVec,
    pub origin_cache: IntCounterVec,
    pub origin_cache_bytes: IntGauge,
    pub origin_cache_entries: IntGauge,
    pub catalog_files: IntGauge,
    pub catalog_bytes: IntGauge,
    pub config_reloads: IntCounterVec,
    pub config_last_reload_success: IntGauge,
    /// The kill switch: 1 when new admissions are open.
    pub admissions_open: IntGauge,
    pub body_too_large: IntCounter,
    /// Tickets and passes refused, by room and reason.
    pub ticket_rejections: IntCounterVec,
    /// Reservations attempted by new checkouts, by sku and result.
    pub reservations: IntCounterVec,
    /// Checkout requests by room and result (order state or error code).
    pub checkout: IntCounterVec,
    /// Time to answer `POST /checkout`, by room (the pass's).
    pub checkout_seconds: HistogramVec,
    /// The simulator's webhooks sent to this gateway, by result
    /// (`delivered`, `retried`, `failed`, `dropped`).
    pub webhook_deliveries: IntCounterVec,
    /// `requests`, `served` and `origin_cache` by their fixed values, for
    /// the request path.
    pub requests_by_class: Children<5>,
    pub served_by: Children<7>,
    pub origin_cache_by: Children<4>,
}

impl Metrics {
    /// The metrics of a gateway in `region`.
    pub fn new(region: &str) -> Self {
        let labels = std::collections::HashMap::from([("region".to_string(), region.to_string())]);
        let registry = Registry::new_custom(None, Some(labels)).expect("a valid label set");
        let requests = IntCounterVec::new(
            Opts::new(
                "sluice_http_requests_total",
                "HTTP requests answered by the public listener, by status class.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let served = IntCounterVec::new(
            Opts::new(
                "sluice_http_served_total",
                "Requests by where their answer came from.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let origin_cache = IntCounterVec::new(
            Opts::new(
                "sluice_origin_cache_total",
                "Origin cache look-ups and fills, by result.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let m = Self {
            requests_by_class: Children::new(&requests, STATUS_CLASSES),
            served_by: Children::new(&served, SOURCES),
            origin_cache_by: Children::new(&origin_cache, CACHE_RESULTS),
            requests,
            inflight: IntGauge::new(
                "sluice_http_inflight_requests",
                "Requests being handled now.",
            )
            .expect("valid metric"),
            served,
            upstream_seconds: Histogram::with_opts(
                HistogramOpts::new("sluice_upstream_seconds", "Origin time to response header.")
                    .buckets(vec![
                        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0,
                    ]),
            )
            .expect("valid metric"),
            origin_errors: IntCounterVec::new(
                Opts::new(
                    "sluice_origin_errors_total",
                    "Failed origin requests, by kind of failure.",
                ),
                &["result"],
            )
            .expect("valid metric"),
            origin_cache,
            origin_cache_bytes: IntGauge::new(
                "sluice_origin_cache_bytes",
                "Bytes held by the origin cache.",
            )
            .expect("valid metric"),
            origin_cache_entries: IntGauge::new(
                "sluice_origin_cache_entries",
                "Responses held by the origin cache.",
            )
            .expect("valid metric"),
            catalog_files: IntGauge::new(
                "sluice_catalog_files",
                "Files of the catalog held in memory.",
            )
            .expect("valid metric"),
            catalog_bytes: IntGauge::new(
                "sluice_catalog_bytes",
                "Bytes of catalog files held in memory.",
            )
            .expect("valid metric"),
            config_reloads: IntCounterVec::new(
                Opts::new(
                    "sluice_config_reloads_total",
                    "Config reloads, by result (success, failure).",
                ),
                &["result"],
            )
            .expect("valid metric"),
            config_last_reload_success: IntGauge::new(
                "sluice_config_last_reload_success_timestamp_seconds",
                "Unix time of the last config load that went live.",
            )
            .expect("valid metric"),
            admissions_open: IntGauge::new(
                "sluice_admissions_open",
                "1 when new admissions are open, 0 when the kill switch has paused them.",
            )
            .expect("valid metric"),
            body_too_large: IntCounter::new(
                "sluice_request_body_too_large_total",
                "Requests refused because their body was over gateway.max_body_bytes.",
            )
            .expect("valid metric"),
            ticket_rejections: IntCounterVec::new(
                Opts::new(
                    "sluice_ticket_rejections_total",
                    "Tickets and passes refused, by room and reason.",
                ),
                &["room", "reason"],
            )
            .expect("valid metric"),
            reservations: IntCounterVec::new(
                Opts::new("sluice_reservations_total", "Reservations attempted by new checkouts, by sku and result (reserved, sold_out)."),
                &["sku", "result"],
            )
            .expect("valid metric"),
            checkout: IntCounterVec::new(
                Opts::new("sluice_checkout_total", "Checkout requests by room and result (the order's state, or the error code)."),
                &["room", "result"],
            )
            .expect("valid metric"),
            checkout_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "sluice_checkout_seconds",
                    "Time to answer POST /checkout, by room, provider calls included.",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.8, 1.0, 2.0, 5.0, 10.0, 30.0,
                ]),
                &["room"],
            )
            .expect("valid metric"),
            webhook_deliveries: IntCounterVec::new(
                Opts::new(
                    "sluice_webhook_deliveries_total",
                    "Simulator webhooks sent to this gateway, by result (delivered, retried, failed, dropped).",
                ),
                &["result"],
            )
            .expect("valid metric"),
            registry,
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.requests.clone()),
            Box::new(m.inflight.clone()),
            Box::new(m.served.clone()),
            Box::new(m.upstream_seconds.clone()),
            Box::new(m.origin_errors.clone()),
            Box::new(m.origin_cache.clone()),
            Box::new(m.origin_cache_bytes.clone()),
            Box::new(m.origin_cache_entries.clone()),
            Box::new(m.catalog_files.clone()),
            Box::new(m.catalog_bytes.clone()),
            Box::new(m.config_reloads.clone()),
            Box::new(m.config_last_reload_success.clone()),
            Box::new(m.admissions_open.clone()),
            Box::new(m.body_too_large.clone()),
            Box::new(m.ticket_rejections.clone()),
            Box::new(m.reservations.clone()),
            Box::new(m.checkout.clone()),
            Box::new(m.checkout_seconds.clone()),
            Box::new(m.webhook_deliveries.clone()),
        ];
        for c in collectors {
            m.registry.register(c).expect("metric names are unique");
        }
        // Expose the label values up front so dashboards and alerts see zeros.
        for r in ["success", "failure"] {
            m.config_reloads.with_label_values(&[r]);
        }
        for r in ["delivered", "retried", "failed", "dropped"] {
            m.webhook_deliveries.with_label_values(&[r]);
        }
        m
    }

    /// The registry, for the other crates' metrics to join.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding into a Vec cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new("local")
    }
}

/// `2xx`-style class of a status code.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::core::{Collector, Desc};
    use prometheus::proto::{Gauge, Metric, MetricFamily, MetricType};

    /// A collector built at scrape time, like the rooms' and the store's.
    struct Live(Desc);

    impl Collector for Live {
        fn desc(&self) -> Vec<&Desc> {
            vec![&self.0]
        }
        fn collect(&self) -> Vec<MetricFamily> {
            let mut m = Metric::default();
            let mut g = Gauge::default();
            g.set_value(1.0);
            m.set_gauge(g);
            let mut f = MetricFamily::default();
            f.set_name("sluice_live".into());
            f.set_help("h".into());
            f.set_field_type(MetricType::GAUGE);
            f.set_metric(vec![m]);
            vec![f]
        }
    }

    #[test]
    fn every_family_carries_the_region_collectors_too() {
        let m = Metrics::new("sa-east-1");
        let desc = Desc::new("sluice_live".into(), "h".into(), vec![], Default::default()).unwrap();
        m.registry().register(Box::new(Live(desc))).unwrap();
        m.requests.with_label_values(&["2xx"]).inc();
        let text = String::from_utf8(m.render()).unwrap();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(samples.len() > 10, "{text}");
        for line in samples {
            assert!(line.contains("region=\"sa-east-1\""), "{line}");
        }
        assert!(
            text.contains("sluice_live{region=\"sa-east-1\"} 1"),
            "{text}"
        );
    }
}
