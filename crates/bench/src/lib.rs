//! What the bench binaries share.

use std::time::Duration;

/// The `p` quantile (0–1) of `v` in microseconds, nearest rank; 0 when empty.
/// Sorts `v`.
pub fn pct(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e6
}

/// A response header as text; empty when absent or not text.
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// A small SVG line chart: one polyline per series over time, log-scale
/// or linear y, each series' reference value as a dashed line of its colour.
pub mod svg {
    pub struct Series {
        pub name: String,
        pub color: String,
        /// (seconds, milliseconds)
        pub points: Vec<(f64, f64)>,
        pub reference: Option<f64>,
    }

    fn esc(s: &str) -> String {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    }

    /// Log-scale y.
    pub fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
        draw(title, x_label, y_label, series, false)
    }

    /// Linear y from 0.
    pub fn chart_linear(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
        draw(title, x_label, y_label, series, true)
    }

    /// A y axis: where a value goes (0 at the top of the plot, 1 at its
    /// bottom) and the grid lines with their labels.
    struct Scale {
        at: Box<dyn Fn(f64) -> f64>,
        grid: Vec<(f64, String)>,
    }

    /// Decades from the smallest positive value to the largest.
    fn log_scale(series: &[Series]) -> Scale {
        let vals = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.reference))
            .filter(|v| *v > 0.0);
        let (lo, hi) = vals.fold((f64::MAX, 0.0_f64), |(a, b), v| (a.min(v), b.max(v)));
        let (lo, hi) = if hi <= 0.0 { (1.0, 10.0) } else { (lo, hi) };
        let (y0, y1) = (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        );
        let mut grid = Vec::new();
        let mut d = y0;
        while d <= y1 {
            let v = 10f64.powf(d);
            grid.push((
                v,
                if v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v}")
                },
            ));
            d += 1.0;
        }
        Scale {
            at: Box::new(move |v| 1.0 - (v.max(10f64.powf(y0)).log10() - y0) / (y1 - y0)),
            grid,
        }
    }

    /// From 0 to a round top (1, 2 or 5 × a power of ten), five steps.
    fn linear_scale(series: &[Series]) -> Scale {
        let hi = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.reference))
            .fold(0.0_f64, f64::max);
        let mag = 10f64.powf(hi.max(1.0).log10().floor());
        let top = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|v| *v >= hi)
            .unwrap_or(10.0 * mag);
        let grid = (0..=5)
            .map(|i| top * i as f64 / 5.0)
            .map(|v| (v, thousands(v)))
            .collect();
        Scale {
            at: Box::new(move |v| 1.0 - v.clamp(0.0, top) / top),
            grid,
        }
    }

    fn draw(title: &str, x_label: &str, y_label: &str, series: &[Series], linear: bool) -> String {
        // A linear axis labels with thousands: a wider left margin.
        let (w, h, l, r, t, b) = if linear {
            (760.0, 360.0, 90.0, 150.0, 40.0, 45.0)
        } else {
            (760.0, 360.0, 70.0, 130.0, 40.0, 45.0)
        };
        let (pw, ph) = (w - l - r, h - t - b);
        let scale = if linear {
            linear_scale(series)
        } else {
            log_scale(series)
        };
        let xmax = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(1.0_f64, f64::max)
            .ceil();
        let x = |v: f64| l + v / xmax * pw;
        let y = |v: f64| t + (scale.at)(v) * ph;
        let mut o = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{l}\" y=\"20\" font-size=\"14\">{}</text>\n",
            esc(title)
        );
        for (v, label) in &scale.grid {
            let yy = y(*v);
            o += &format!(
                "<line x1=\"{l}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n",
                l + pw,
                l - 6.0,
                yy + 4.0,
            );
        }
        let step = (xmax / 10.0).ceil().max(1.0);
        let mut s = 0.0;
        while s <= xmax {
            o += &format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{s:.0}</text>\n",
                x(s),
                t + ph + 16.0
            );
            s += step;
        }
        o += &format!(
            "<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#888\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
             <text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
            l + pw / 2.0,
            h - 8.0,
            esc(x_label),
            if linear { 14.0 } else { 16.0 },
            t + ph / 2.0,
            esc(y_label)
        );
        o += &lines(series, &x, &y, l, pw, t);
        o + "</svg>\n"
    }

    /// `v` with thousands separators (a chart's axis).
    fn thousands(v: f64) -> String {
        let n = v.round() as i64;
        let s = n.abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    }

    /// Each series' polyline, reference line and legend entry.
    fn lines(
        series: &[Series],
        x: &dyn Fn(f64) -> f64,
        y: &dyn Fn(f64) -> f64,
        l: f64,
        pw: f64,
        t: f64,
    ) -> String {
        let mut o = String::new();
        for (i, se) in series.iter().enumerate() {
            let pts: Vec<String> = se
                .points
                .iter()
                .map(|&(a, v)| format!("{:.1},{:.1}", x(a), y(v)))
                .collect();
            o += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                esc(&se.color),
                pts.join(" ")
            );
            if let Some(rv) = se.reference {
                o += &format!(
                    "<line x1=\"{l}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-dasharray=\"6 4\"/>\n",
                    l + pw,
                    y(rv),
                    y(rv),
                    esc(&se.color)
                );
            }
            let ly = t + 14.0 + i as f64 * 18.0;
            o += &format!(
                "<line x1=\"{}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                l + pw + 10.0,
                l + pw + 30.0,
                esc(&se.color),
                l + pw + 36.0,
                ly + 4.0,
                esc(&se.name)
            );
        }
        o
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_linear_chart_starts_at_zero_with_a_round_top() {
            let s = super::Series {
                name: "on".into(),
                color: "#123456".into(),
                points: vec![(0.0, 0.0), (10.0, 1_234_567.0)],
                reference: None,
            };
            let out = super::chart_linear("t", "day", "tokens", &[s]);
            assert!(out.contains(">2,000,000<") && out.contains(">0<"), "{out}");
            assert_eq!(out.matches("<polyline").count(), 1);
        }

        #[test]
        fn draws_each_series_and_escapes_names() {
            let s = super::Series {
                name: "a<b".into(),
                color: "#123456".into(),
                points: vec![(0.5, 2.0), (1.5, 30.0)],
                reference: Some(3.0),
            };
            let out = super::chart("t", "s", "ms", &[s]);
            assert!(out.starts_with("<svg") && out.ends_with("</svg>\n"));
            assert_eq!(out.matches("<polyline").count(), 1);
            assert!(out.contains("a&lt;b") && out.contains("stroke-dasharray"));
        }
    }
}
