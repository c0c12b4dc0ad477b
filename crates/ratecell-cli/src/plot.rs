//! The SVG plot `simulate --plot` writes: offered and admitted traffic over
//! time as rates per time bin, with the configured limit as a dashed line.
//! Hand-written SVG 1.1 (axes, ticks, grid, legend, title): no dependency,
//! and it opens in any browser.

use std::fmt::Write as _;

/// What to draw.
pub struct Plot<'a> {
    /// The first title line (the policy).
    pub title: String,
    /// The second title line (the load and the outcome).
    pub subtitle: String,
    /// Width of one bin, ns.
    pub bin_ns: u64,
    /// Length of the run, ns (the last bin may be cut short).
    pub duration_ns: u64,
    /// Requests offered per bin.
    pub offered: &'a [u64],
    /// Requests admitted per bin.
    pub admitted: &'a [u64],
    /// The limit as a rate (requests per second), all keys together.
    pub limit_per_s: f64,
    /// Number of keys the limit applies to, each on its own.
    pub keys: u64,
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 92.0;
const BOTTOM: f64 = 58.0;

const OFFERED_FILL: &str = "#9ecae1";
const OFFERED_LINE: &str = "#3182bd";
const ADMITTED: &str = "#d95f02";
const LIMIT: &str = "#222222";

/// A step of 1, 2 or 5 times a power of ten, near `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A tick label with as many decimals as the step needs.
fn label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

/// The unit the time axis is labelled in, and ns per unit.
fn time_unit(duration_ns: u64) -> (&'static str, f64) {
    match duration_ns {
        d if d < 2_000_000 => ("µs", 1e3),
        d if d < 2_000_000_000 => ("ms", 1e6),
        d if d <= 300_000_000_000 => ("s", 1e9),
        d if d <= 18_000_000_000_000 => ("min", 60e9),
        _ => ("h", 3600e9),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The plot as an SVG document.
pub fn svg(p: &Plot) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    // The rate in each bin, over the part of the bin inside the run.
    let rates = |counts: &[u64]| -> Vec<f64> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let start = i as u64 * p.bin_ns;
                let width = p.bin_ns.min(p.duration_ns.saturating_sub(start)).max(1);
                c as f64 / (width as f64 / 1e9)
            })
            .collect()
    };
    let offered = rates(p.offered);
    let admitted = rates(p.admitted);
    let top = offered
        .iter()
        .chain(&admitted)
        .copied()
        .fold(p.limit_per_s, f64::max)
        * 1.08;
    let y_step = nice_step(top / 6.0);
    let y_max = (top / y_step).ceil() * y_step;

    let (unit, per_unit) = time_unit(p.duration_ns);
    let span = p.duration_ns as f64 / per_unit;
    let x_step = nice_step(span / 10.0);
    let x = |ns: f64| LEFT + ns / p.duration_ns as f64 * plot_w;
    let y = |rate: f64| TOP + plot_h - rate / y_max * plot_h;

    // A step line through the bins: flat across each bin.
    let steps = |r: &[f64]| -> Vec<(f64, f64)> {
        let mut pts = Vec::with_capacity(2 * r.len());
        for (i, &v) in r.iter().enumerate() {
            let a = (i as u64 * p.bin_ns).min(p.duration_ns) as f64;
            let b = ((i as u64 + 1) * p.bin_ns).min(p.duration_ns) as f64;
            pts.push((x(a), y(v)));
            pts.push((x(b), y(v)));
        }
        pts
    };
    let path = |pts: &[(f64, f64)]| -> String {
        let mut s = String::new();
        for (i, (px, py)) in pts.iter().enumerate() {
            let _ = write!(s, "{}{px:.1},{py:.1}", if i == 0 { "M" } else { " L" });
        }
        s
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="28" font-size="18" font-weight="bold">{}</text>"#,
        escape(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="50" font-size="13" fill="#444">{}</text>"##,
        escape(&p.subtitle)
    );

    // Grid and y ticks.
    let _ = writeln!(s, r##"<g font-size="12" fill="#333">"##);
    let mut v = 0.0;
    while v <= y_max + y_step / 2.0 {
        let py = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##,
            LEFT + plot_w
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            py + 4.0,
            label(v, y_step)
        );
        v += y_step;
    }
    let mut v = 0.0;
    while v <= span + x_step / 1e6 {
        let px = x(v * per_unit);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#333"/>"##,
            TOP + plot_h,
            TOP + plot_h + 5.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + plot_h + 20.0,
            label(v, x_step)
        );
        v += x_step;
    }
    let _ = writeln!(s, "</g>");

    // Offered: a filled area under its step line; admitted: a bold line on
    // top, so the gap between them is what was denied.
    let off = steps(&offered);
    if let (Some(first), Some(last)) = (off.first(), off.last()) {
        let base = y(0.0);
        let _ = writeln!(
            s,
            r#"<path d="M{:.1},{base:.1} {} L{:.1},{base:.1} Z" fill="{OFFERED_FILL}" fill-opacity="0.6" stroke="none"/>"#,
            first.0,
            path(&off).replacen('M', "L", 1),
            last.0
        );
        let _ = writeln!(
            s,
            r#"<path d="{}" fill="none" stroke="{OFFERED_LINE}" stroke-width="1.2"/>"#,
            path(&off)
        );
    }
    let adm = steps(&admitted);
    if !adm.is_empty() {
        let _ = writeln!(
            s,
            r#"<path d="{}" fill="none" stroke="{ADMITTED}" stroke-width="2.4" stroke-linejoin="round"/>"#,
            path(&adm)
        );
    }
    let ly = y(p.limit_per_s);
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{LIMIT}" stroke-width="1.4" stroke-dasharray="7,5"/>"#,
        LEFT + plot_w
    );

    // Axes and their titles.
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT},{TOP} L{LEFT},{:.1} L{:.1},{:.1}" fill="none" stroke="#333"/>"##,
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle">time ({unit}); bins of {}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 14.0,
        crate::args::format_duration(p.bin_ns)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(20,{:.1}) rotate(-90)" font-size="13" text-anchor="middle">requests per second</text>"#,
        TOP + plot_h / 2.0
    );

    // Legend, above the plot on the right.
    let lx = LEFT + plot_w - 430.0;
    let ly = 74.0;
    let _ = writeln!(s, r#"<g font-size="13">"#);
    let _ = writeln!(
        s,
        r#"<rect x="{lx:.1}" y="{:.1}" width="22" height="12" fill="{OFFERED_FILL}" stroke="{OFFERED_LINE}"/>"#,
        ly - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{ly:.1}">offered</text>"#,
        lx + 28.0
    );
    let _ = writeln!(
        s,
        r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{ADMITTED}" stroke-width="2.4"/>"#,
        lx + 100.0,
        ly - 4.0,
        lx + 122.0,
        ly - 4.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{ly:.1}">admitted</text>"#,
        lx + 128.0
    );
    let _ = writeln!(
        s,
        r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{LIMIT}" stroke-width="1.4" stroke-dasharray="7,5"/>"#,
        lx + 210.0,
        ly - 4.0,
        lx + 240.0,
        ly - 4.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{ly:.1}">limit ({}/s{})</text>"#,
        lx + 246.0,
        label(p.limit_per_s, nice_step(p.limit_per_s / 100.0).min(1.0)),
        if p.keys > 1 {
            format!(", {} keys", p.keys)
        } else {
            String::new()
        }
    );
    let _ = writeln!(s, "</g>");
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_or_five() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(0.03), 0.05);
        assert_eq!(label(2.5, 0.5), "2.5");
        assert_eq!(label(20.0, 5.0), "20");
    }

    #[test]
    fn the_document_has_both_series_and_the_limit() {
        let s = svg(&Plot {
            title: "t <1>".into(),
            subtitle: "s".into(),
            bin_ns: 500_000_000,
            duration_ns: 2_000_000_000,
            offered: &[10, 20, 10, 5],
            admitted: &[5, 5, 5, 5],
            limit_per_s: 10.0,
            keys: 1,
        });
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("t &lt;1&gt;"));
        assert_eq!(s.matches(ADMITTED).count(), 2, "admitted line and legend");
        assert!(s.contains("stroke-dasharray"));
        assert!(s.contains(">offered<") && s.contains(">admitted<"));
    }
}
