//! Inline SVG charts for the report: a line chart and a bar chart, plain
//! strings with no script, so the page opens anywhere, offline.

use std::fmt::Write;

pub const WIDTH: f64 = 560.0;
pub const HEIGHT: f64 = 260.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 12.0;
/// The right margin when a second axis is drawn there.
const RIGHT_AXIS: f64 = 52.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 40.0;
/// Points drawn per series at most (longer series are thinned).
pub const POINTS_MAX: usize = 2_000;

pub const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#7f7f7f",
];

pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (e.g. a configured limit).
    pub dashed: bool,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick step of 1, 2 or 5 × 10^k giving about five ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    mag * if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn frame(out: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{LEFT}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text transform=\"translate(12 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        esc(title),
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT - 6.0,
        esc(x_label),
        TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        esc(y_label),
    );
}

/// A line chart; an empty chart says "no data".
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    chart(title, x_label, (y_label, series), None)
}

/// A line chart of two quantities over the same time: `left` on the left
/// axis, `right` on its own axis on the right (e.g. a rate against a
/// latency).
pub fn line_chart_two_axes(
    title: &str,
    x_label: &str,
    left: (&str, &[Series]),
    right: (&str, &[Series]),
) -> String {
    chart(title, x_label, left, Some(right))
}

/// The top of an axis showing values up to `max`, and its tick step.
fn axis(max: f64) -> (f64, f64) {
    let step = nice_step(max);
    ((max / step).ceil().max(1.0) * step, step)
}

fn chart(
    title: &str,
    x_label: &str,
    (y_label, series): (&str, &[Series]),
    right: Option<(&str, &[Series])>,
) -> String {
    let mut out = String::new();
    frame(&mut out, title, x_label, y_label);
    let right_margin = if right.is_some() { RIGHT_AXIS } else { RIGHT };
    let everything = series
        .iter()
        .chain(right.iter().flat_map(|r| r.1.iter()))
        .flat_map(|s| s.points.iter());
    let x_max = everything.map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let y_max = |ss: &[Series]| {
        ss.iter()
            .flat_map(|s| s.points.iter())
            .map(|p| p.1)
            .fold(0.0, f64::max)
    };
    let (pw, ph) = (WIDTH - LEFT - right_margin, HEIGHT - TOP - BOTTOM);
    let (y_top, y_step) = axis(y_max(series));
    let x_step = nice_step(x_max);
    let x = |v: f64| LEFT + v / x_max * pw;
    let y_at = |v: f64, top: f64| TOP + ph - v / top * ph;
    let mut t = 0.0;
    while t <= y_top + 1e-9 {
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y0:.1}\" y2=\"{y0:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + pw,
            LEFT - 4.0,
            y_at(t, y_top) + 4.0,
            fmt_num(t),
            y0 = y_at(t, y_top),
        );
        t += y_step;
    }
    let right_top = right.map(|(label, rs)| {
        let (top, step) = axis(y_max(rs));
        let mut t = 0.0;
        while t <= top + 1e-9 {
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{:.1}\">{}</text>",
                LEFT + pw + 4.0,
                y_at(t, top) + 4.0,
                fmt_num(t),
            );
            t += step;
        }
        let _ = write!(
            out,
            "<text transform=\"translate({} {}) rotate(90)\" text-anchor=\"middle\">{}</text>",
            WIDTH - 8.0,
            TOP + ph / 2.0,
            esc(label)
        );
        top
    });
    let mut t = 0.0;
    while t <= x_max + 1e-9 {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            x(t),
            TOP + ph + 14.0,
            fmt_num(t)
        );
        t += x_step;
    }
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>"
    );
    let drawn: Vec<(&Series, f64)> = series
        .iter()
        .map(|s| (s, y_top))
        .chain(
            right
                .iter()
                .flat_map(|r| r.1.iter())
                .map(|s| (s, right_top.unwrap_or(1.0))),
        )
        .collect();
    if drawn.iter().all(|(s, _)| s.points.is_empty()) {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no data</text>",
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    for (i, (s, top)) in drawn.iter().enumerate() {
        let stride = s.points.len().div_ceil(POINTS_MAX).max(1);
        let path: Vec<String> = s
            .points
            .iter()
            .step_by(stride)
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y_at(*b, *top)))
            .collect();
        let dash = if s.dashed {
            " stroke-dasharray=\"5 4\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{dash} points=\"{}\"/>",
            s.color,
            path.join(" ")
        );
        let lx = LEFT + 8.0 + 130.0 * i as f64;
        let _ = write!(
            out,
            "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            TOP + 8.0,
            s.color,
            lx + 14.0,
            TOP + 12.0,
            esc(s.name)
        );
    }
    out.push_str("</svg>");
    out
}

/// A vertical bar chart with the value written on each bar.
pub fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64)]) -> String {
    let mut out = String::new();
    frame(&mut out, title, "", y_label);
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let y_max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1.0);
    let slot = pw / bars.len().max(1) as f64;
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        LEFT + pw,
        TOP + ph,
        TOP + ph
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let h = v / y_max * (ph - 14.0);
        let bx = LEFT + slot * i as f64 + slot * 0.15;
        let _ = write!(
            out,
            "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{}\">{}</text>",
            TOP + ph - h,
            slot * 0.7,
            COLORS[i % COLORS.len()],
            bx + slot * 0.35,
            TOP + ph - h - 3.0,
            fmt_num(*v),
            bx + slot * 0.35,
            TOP + ph + 14.0,
            if bars.len() > 8 { 8 } else { 10 },
            esc(label)
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_escaped_text() {
        let c = line_chart(
            "a < b",
            "s",
            "n",
            &[Series {
                name: "x",
                color: COLORS[0],
                points: vec![(0.0, 1.0), (2.0, 3.0)],
                dashed: false,
            }],
        );
        assert!(c.starts_with("<svg") && c.ends_with("</svg>"));
        assert!(c.contains("a &lt; b") && c.contains("<polyline"));
        let b = bar_chart("t", "n", &[("200".into(), 5.0)]);
        assert!(b.contains("<rect") && b.contains(">5<"));
        assert!(line_chart("e", "", "", &[]).contains("no data"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(100.0), 20.0);
        assert_eq!(nice_step(7.0), 2.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
