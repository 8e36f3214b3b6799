//! The report of a run: `summary.json` and a self-contained `report.html`
//! (inline SVG, inline CSS, no script, nothing fetched).

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};

use super::record::{quantile, Inner};
use super::summary::{cumulative_admitted, Summary};
use super::svg::{bar_chart, line_chart, line_chart_two_axes, Series, COLORS};

/// Bars of the wait-time histogram.
pub const WAIT_BINS: usize = 20;

/// Writes `summary.json` and `report.html` into `dir`.
pub fn write(dir: &Path, summary: &Summary, rec: &Inner) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = serde_json::to_string_pretty(summary)?;
    std::fs::write(dir.join("summary.json"), json + "\n")
        .with_context(|| format!("writing {}", dir.join("summary.json").display()))?;
    std::fs::write(dir.join("report.html"), html(summary, rec))
        .with_context(|| format!("writing {}", dir.join("report.html").display()))?;
    std::fs::write(dir.join("timeline.csv"), timeline_csv(rec))
        .with_context(|| format!("writing {}", dir.join("timeline.csv").display()))?;
    Ok(())
}

/// `timeline.csv`: one row per `/admin/state` sample (every 500 ms) with
/// the release rate in force and, for an adaptive room, what its
/// controller said (exact rate, phase, reason, queue, capacity); and the
/// checkouts that ended in that second of the run as the shoppers saw
/// them (count, p99, failed). What the law did, second by second.
pub fn timeline_csv(rec: &Inner) -> String {
    let mut out = String::from(
        "t_s,up,waiting,active,admitted_total,release_per_second,exact_per_second,phase,reason,queue,capacity_per_second,checkouts,checkout_p99_ms,checkouts_failed\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.2}"));
    for x in &rec.samples {
        let second = x.t_s.max(0.0) as usize;
        let mut ms = rec.checkout_ms.get(second).cloned().unwrap_or_default();
        ms.sort_unstable();
        let (calls, failed) = rec.checkout_calls.get(second).copied().unwrap_or((0, 0));
        let _ = writeln!(
            out,
            "{:.2},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.t_s,
            u8::from(x.up),
            x.waiting,
            x.active,
            x.admitted_total,
            x.release_per_second,
            opt(x.release_exact),
            x.release_phase,
            x.release_reason,
            opt(x.release_queue),
            opt(x.release_capacity),
            calls,
            quantile(&ms, 0.99).map_or(String::new(), |v| v.to_string()),
            failed
        );
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The charts, in the order the report shows them.
pub fn charts(s: &Summary, rec: &Inner) -> Vec<String> {
    let samples = &rec.samples;
    let pts = |f: &dyn Fn(&super::record::Sample) -> f64| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter(|x| x.up)
            .map(|x| (x.t_s, f(x)))
            .collect()
    };
    let mut out = Vec::new();
    out.push(line_chart(
        "People waiting",
        "seconds",
        "people",
        &[
            series("waiting", 0, pts(&|x| x.waiting as f64)),
            series("active passes", 2, pts(&|x| x.active as f64)),
        ],
    ));
    let cum = cumulative_admitted(samples);
    let per_s: Vec<(f64, f64)> = cum
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0)))
        .collect();
    let end = samples.last().map_or(1.0, |x| x.t_s);
    let rate = s.configured.release_per_second;
    let mut limit = series("configured rate", 1, vec![(0.0, rate), (end, rate)]);
    limit.dashed = true;
    out.push(line_chart(
        "Admitted per second",
        "seconds",
        "admissions / s",
        &[series("admitted", 0, per_s), limit],
    ));
    if s.gateways.len() > 1 {
        out.push(gateway_chart(s, rec));
    }
    let mut p = [Vec::new(), Vec::new(), Vec::new()];
    for (second, bucket) in rec.checkout_ms.iter().enumerate() {
        if bucket.is_empty() {
            continue;
        }
        let mut b = bucket.clone();
        b.sort_unstable();
        for (k, q) in [0.5, 0.95, 0.99].into_iter().enumerate() {
            p[k].push((second as f64, f64::from(quantile(&b, q).unwrap_or(0))));
        }
    }
    let [p50, p95, p99] = p;
    // The release rate in force against what it does to checkout: a rate
    // that follows the backend falls when p99 climbs and comes back after.
    out.push(line_chart_two_axes(
        "Release rate against checkout p99",
        "seconds",
        (
            "releases / s",
            &capacity_and_rate(&s.phases, pts(&|x| x.release_per_second)),
        ),
        (
            "checkout p99, ms",
            &[series("checkout p99", 1, p99.clone())],
        ),
    ));
    out.push(line_chart(
        "Checkout latency",
        "seconds",
        "ms",
        &[
            series("p50", 2, p50),
            series("p95", 3, p95),
            series("p99", 1, p99),
        ],
    ));
    out.push(line_chart(
        "Stock",
        "seconds",
        "units",
        &[
            series("available", 0, pts(&|x| x.available as f64)),
            series("reserved", 3, pts(&|x| x.reserved as f64)),
            series("committed", 2, pts(&|x| x.committed as f64)),
        ],
    ));
    let mut bars = Vec::new();
    for (route, statuses) in &s.responses {
        for (status, n) in statuses {
            let status = if status == "0" { "err" } else { status };
            bars.push((format!("{route} {status}"), *n as f64));
        }
    }
    out.push(bar_chart("Responses by status", "responses", &bars));
    out.push(bar_chart(
        "Wait before admission",
        "shoppers",
        &wait_histogram(&rec.waits_s),
    ));
    let conversion: Vec<(String, f64)> = s
        .outcomes
        .iter()
        .map(|(o, n)| (o.name().to_string(), *n as f64))
        .collect();
    out.push(bar_chart(
        &format!("Outcomes (conversion {:.1} %)", s.conversion * 100.0),
        "shoppers",
        &conversion,
    ));
    out
}

/// Faults marked on the time axis, at most this many.
pub const FAULT_MARKS_MAX: usize = 8;

/// Each gateway's admissions per second, with the faults as dashed
/// vertical lines on the same time axis.
fn gateway_chart(s: &Summary, rec: &Inner) -> String {
    let names: Vec<String> = (0..s.gateways.len())
        .map(|g| format!("gateway {g}"))
        .collect();
    let mut lines: Vec<Series> = Vec::new();
    let mut top: f64 = 1.0;
    for (g, name) in names.iter().enumerate() {
        let points: Vec<(f64, f64)> = rec
            .gateways
            .get(g)
            .map(|st| {
                st.admissions_by_s
                    .iter()
                    .enumerate()
                    .map(|(t, n)| (t as f64, f64::from(*n)))
                    .collect()
            })
            .unwrap_or_default();
        top = points.iter().map(|p| p.1).fold(top, f64::max);
        lines.push(series(name, g, points));
    }
    let marks: Vec<(String, f64)> = s
        .faults
        .iter()
        .take(FAULT_MARKS_MAX)
        .map(|f| (format!("{:.0} s: {}", f.t_s, f.what), f.t_s))
        .collect();
    for (name, t) in &marks {
        let mut m = series(name, 5, vec![(*t, 0.0), (*t, top)]);
        m.dashed = true;
        lines.push(m);
    }
    line_chart(
        "Admissions by gateway (faults dashed)",
        "seconds",
        "shoppers let in / s",
        &lines,
    )
}

/// The release rate, and beside it (dashed, where a sweep measured it)
/// the capacity at the target of each phase's backend: what the rate was
/// held to.
fn capacity_and_rate(
    phases: &[super::follow::Phase],
    rate: Vec<(f64, f64)>,
) -> Vec<Series<'static>> {
    let mut out = vec![series("release rate", 0, rate)];
    let capacity: Vec<(f64, f64)> = phases
        .iter()
        .filter_map(|p| p.capacity_per_s.map(|c| [(p.from_s, c), (p.to_s, c)]))
        .flatten()
        .collect();
    if !capacity.is_empty() {
        let mut c = series("capacity at the target", 2, capacity);
        c.dashed = true;
        out.push(c);
    }
    out
}

fn series(name: &str, color: usize, points: Vec<(f64, f64)>) -> Series<'_> {
    Series {
        name,
        color: COLORS[color % COLORS.len()],
        points,
        dashed: false,
    }
}

fn wait_histogram(waits: &[f64]) -> Vec<(String, f64)> {
    if waits.is_empty() {
        return Vec::new();
    }
    let min = waits.iter().copied().fold(f64::INFINITY, f64::min);
    let max = waits.iter().copied().fold(0.0, f64::max);
    let width = ((max - min) / WAIT_BINS as f64).max(0.05);
    let mut bins = [0u64; WAIT_BINS];
    for w in waits {
        bins[(((w - min) / width) as usize).min(WAIT_BINS - 1)] += 1;
    }
    let digits = if width < 1.0 { 1 } else { 0 };
    bins.iter()
        .enumerate()
        .map(|(i, n)| (format!("{:.digits$}s", min + i as f64 * width), *n as f64))
        .collect()
}

pub fn html(s: &Summary, rec: &Inner) -> String {
    let mut h = String::new();
    let verdict_color = if s.verdict == "pass" {
        "#2ca02c"
    } else {
        "#d62728"
    };
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>sluice-load: {name}</title>\
         <style>body{{font-family:sans-serif;margin:24px;color:#222;max-width:1180px}}\
         .cards{{display:flex;flex-wrap:wrap;gap:10px}}.card{{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}}\
         .card b{{display:block;font-size:20px}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}\
         table{{border-collapse:collapse;margin-top:8px}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}}\
         .pass{{color:#2ca02c}}.fail{{color:#d62728}}.skipped{{color:#888}}</style></head><body>\
         <h1>{name} <span style=\"color:{verdict_color}\">{verdict}</span></h1><p>{desc}</p>",
        name = esc(&s.scenario),
        verdict = s.verdict.to_uppercase(),
        desc = esc(&s.description),
    );
    let card = |h: &mut String, label: &str, value: String| {
        let _ = write!(
            h,
            "<div class=\"card\"><b>{}</b>{}</div>",
            esc(&value),
            esc(label)
        );
    };
    h.push_str("<div class=\"cards\">");
    card(&mut h, "shoppers", s.shoppers.started.to_string());
    card(&mut h, "admitted", s.admitted.gateway_total.to_string());
    card(
        &mut h,
        "admitted / s (configured)",
        format!(
            "{:.1} ({})",
            s.admitted.rate_per_s, s.configured.release_per_second
        ),
    );
    card(
        &mut h,
        "conversion",
        format!("{:.1} %", s.conversion * 100.0),
    );
    card(&mut h, "wait p95", format!("{:.1} s", s.wait_s.p95));
    card(
        &mut h,
        "checkout p99",
        format!("{:.0} ms", s.checkout_ms.p99),
    );
    card(&mut h, "held back", s.shoppers.held_back.to_string());
    card(
        &mut h,
        "checkout retries",
        s.shoppers.checkout_retries.to_string(),
    );
    card(&mut h, "duration", format!("{:.1} s", s.duration_s));
    h.push_str("</div>");
    if !s.faults.is_empty() {
        h.push_str("<h2>Faults</h2><ul>");
        for f in &s.faults {
            let _ = write!(h, "<li>{:.1} s: {}</li>", f.t_s, esc(&f.what));
        }
        h.push_str("</ul>");
    }
    if s.gateways.len() > 1 {
        h.push_str(
            "<h2>Gateways</h2><table><tr><th>gateway</th><th>admissions</th><th>requests</th>\
             <th>no answer</th><th>orders</th><th>checkouts unanswered</th>\
             <th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>",
        );
        for g in &s.gateways {
            let _ = write!(
                h,
                "<tr><td>{} ({})</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td></tr>",
                g.index,
                esc(&g.public),
                g.admissions,
                g.requests,
                g.failed,
                g.orders,
                g.checkouts_unanswered,
                g.latency_ms.p50,
                g.latency_ms.p99,
                g.latency_ms.max
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<h2>Charts</h2><div class=\"charts\">");
    for c in charts(s, rec) {
        h.push_str(&c);
    }
    h.push_str(
        "</div><h2>The books</h2><table><tr><th>check</th><th>result</th><th>detail</th></tr>",
    );
    for c in &s.books {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"{r}\">{r}</td><td>{}",
            esc(&c.name),
            esc(&c.detail),
            r = c.result
        );
        for v in &c.violations {
            let _ = write!(h, "<br>{}", esc(v));
        }
        h.push_str("</td></tr>");
    }
    h.push_str("</table>");
    if let Some(f) = &s.bot_farm {
        farm_table(&mut h, f);
    }
    let _ = write!(
        h,
        "<h2>Numbers</h2><table><tr><th></th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>count</th></tr>\
         <tr><td>wait before admission (s)</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>\
         <tr><td>checkout latency (ms)</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td></tr></table>\
         <p>seed {} · target {} · <code>summary.json</code> holds every number.</p></body></html>",
        s.wait_s.p50, s.wait_s.p95, s.wait_s.p99, s.wait_s.max, s.wait_s.count,
        s.checkout_ms.p50, s.checkout_ms.p95, s.checkout_ms.p99, s.checkout_ms.max, s.checkout_ms.count,
        s.seed,
        esc(&s.target.public),
    );
    h.push('\n');
    h
}

/// The bot farm against the honest shoppers: units, work, places.
fn farm_table(h: &mut String, f: &super::bot_farm::FarmReport) {
    let idle = f
        .passes_reclaimed_idle
        .map_or("–".to_string(), |n| n.to_string());
    let rows = [
        (
            "units bought: farm / honest",
            format!(
                "{} / {} ({:.1} % to the farm)",
                f.units_farm,
                f.units_honest,
                f.farm_unit_share * 100.0
            ),
        ),
        (
            "accounts: farm / honest",
            format!(
                "{} / {} ({:.1} %; enqueue required: {})",
                f.farm_accounts,
                f.honest_accounts,
                f.farm_account_share * 100.0,
                f.enqueue_required
            ),
        ),
        (
            "farm joins per CPU-second (got a place)",
            format!(
                "{:.2}, predicted {:.2} ({:.0} H/CPU-s × 2^-bits, bits {:?})",
                f.joins_placed_per_cpu_s,
                f.predicted_per_cpu_s,
                f.hashes_per_cpu_s,
                f.difficulty_bits
            ),
        ),
        (
            "farm work",
            format!(
                "{} solver threads, {:.1} CPU-s, {} hashes, {} joins from {} addresses",
                f.solvers, f.farm_cpu_s, f.hashes, f.joins, f.addresses_used
            ),
        ),
        (
            "places per farm account (one anonymous \"account\" without tokens)",
            format!(
                "{} places; at most {}, mean {:.1}",
                f.places, f.places_per_account_max, f.places_per_account_mean
            ),
        ),
        (
            "replayed solutions: answered / new places",
            format!("{} / {}", f.replays, f.replay_new_places),
        ),
        (
            "farm passes: collected / held / reclaimed idle (room)",
            format!("{} / {} / {idle}", f.passes, f.passes_held),
        ),
        (
            "honest phone solve time p50 / p95 (s)",
            format!("{:.2} / {:.2}", f.honest_solve_s_p50, f.honest_solve_s_p95),
        ),
    ];
    h.push_str("<h2>The bot farm</h2><table>");
    for (k, v) in rows {
        let _ = write!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(&v));
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::record::Sample;

    #[test]
    fn the_timeline_has_the_controller_and_the_checkouts_of_each_second() {
        let mut rec = Inner::default();
        rec.samples.push(Sample {
            t_s: 1.5,
            up: true,
            release_per_second: 12.0,
            release_exact: Some(11.62),
            release_phase: "cruise".into(),
            release_reason: "steady".into(),
            release_queue: Some(-0.5),
            release_capacity: Some(13.67),
            ..Sample::default()
        });
        rec.checkout_ms = vec![vec![], (1..=100).collect()];
        rec.checkout_calls = vec![(0, 0), (100, 3)];
        let csv = timeline_csv(&rec);
        let mut lines = csv.lines();
        assert!(lines.next().unwrap().starts_with("t_s,up,"));
        assert_eq!(
            lines.next(),
            Some("1.50,1,0,0,0,12,11.62,cruise,steady,-0.50,13.67,100,99,3")
        );
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn the_rate_chart_draws_each_phases_capacity_as_a_step() {
        let phase = |from_s: f64, to_s: f64, c: Option<f64>| super::super::follow::Phase {
            from_s,
            to_s,
            settled_s: from_s,
            rate_mean: 0.0,
            rate_min: 0.0,
            rate_max: 0.0,
            rate_swing: 0.0,
            checkouts: 0,
            checkout_p99_ms: None,
            checkouts_failed: 0,
            failed_ratio: 0.0,
            capacity_per_s: c,
        };
        let rate = vec![(0.0, 9.0), (90.0, 5.0)];
        let swept = [phase(0.0, 60.0, Some(20.0)), phase(60.0, 120.0, Some(5.0))];
        let series = capacity_and_rate(&swept, rate.clone());
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].points, rate);
        assert!(series[1].dashed);
        assert_eq!(
            series[1].points,
            vec![(0.0, 20.0), (60.0, 20.0), (60.0, 5.0), (120.0, 5.0)]
        );
        // No sweep: the rate alone.
        let series = capacity_and_rate(&[phase(0.0, 60.0, None)], rate);
        assert_eq!(series.len(), 1);
    }
}
