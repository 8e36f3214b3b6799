//! Metric families built at scrape time, for collectors that read live
//! state (the rooms, the order store) instead of counting as they go.

use prometheus::core::Desc;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// One metric family a collector exposes.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
}

impl Family {
    pub const fn new(name: &'static str, help: &'static str, kind: MetricType) -> Self {
        Self { name, help, kind }
    }
}

/// The descriptors of `families` (what `Collector::desc` returns).
pub fn descs(families: &[Family]) -> Vec<Desc> {
    families
        .iter()
        .map(|f| {
            Desc::new(f.name.into(), f.help.into(), vec![], Default::default())
                .expect("valid metric name")
        })
        .collect()
}

/// Label pairs sorted by name, as the prometheus crate's own vectors
/// expose them.
pub fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
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

/// One gauge or counter sample.
pub fn sample(pairs: &[(&str, &str)], kind: MetricType, value: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(labels(pairs));
    if kind == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(value);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(value);
        m.set_gauge(g);
    }
    m
}

/// Pairs each family with its samples, leaving out families without any.
pub fn assemble(families: &[Family], samples: Vec<Vec<Metric>>) -> Vec<MetricFamily> {
    families
        .iter()
        .zip(samples)
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
