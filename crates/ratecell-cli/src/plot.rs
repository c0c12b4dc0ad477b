//! The plot `simulate --plot` writes (plotters): offered and admitted
//! traffic over time as rates per time bin, with the configured limit as a
//! dashed line. SVG or PNG, chosen by the file's extension. Text is drawn
//! with the embedded DejaVu Sans, so no system font is needed.

use crate::args::format_duration;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

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

/// The file formats, by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A vector drawing: `.svg`.
    Svg,
    /// A picture: `.png`.
    Png,
}

const SIZE: (u32, u32) = (1100, 620);
const FONT: &str = "sans-serif";

const OFFERED_FILL: RGBColor = RGBColor(0x9e, 0xca, 0xe1);
const OFFERED_LINE: RGBColor = RGBColor(0x31, 0x82, 0xbd);
const ADMITTED: RGBColor = RGBColor(0xd9, 0x5f, 0x02);
const LIMIT: RGBColor = RGBColor(0x22, 0x22, 0x22);
const SUBTITLE: RGBColor = RGBColor(0x44, 0x44, 0x44);
const GRID: RGBColor = RGBColor(0xe5, 0xe5, 0xe5);

/// The format `path`'s extension asks for, or why it cannot be written.
/// Checked before any work, so a long run never ends on a bad path: the
/// extension, the directory, and that a file can be created there.
pub fn check_path(path: &Path) -> Result<Format, String> {
    let shown = path.display();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match ext.as_deref() {
        Some("svg") => Format::Svg,
        Some("png") => Format::Png,
        _ => {
            return Err(format!(
                "{shown:?} must end in .svg or .png (the extension chooses the format)"
            ));
        }
    };
    let existed = path.exists();
    if path.is_dir() {
        return Err(format!("{shown:?} is a directory"));
    }
    // Open without truncating: an existing plot is only replaced once the
    // new one is drawn.
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("cannot write {shown:?}: {e}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(format)
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

/// A number as a short axis label with an SI suffix: `10M`, `2.5k`, `0.5`.
pub fn si(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e12 => (v / 1e12, "T"),
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let s = crate::args::short_number(scaled, 2);
    let s = if s == "-0" { "0".to_string() } else { s };
    format!("{s}{suffix}")
}

/// Registers the embedded font with plotters, once per process.
fn register_fonts() {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        // The font is compiled in and valid; a failure would only lose
        // the text, which the tests would see.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Draws `p` into `path` in `format`.
pub fn write(path: &Path, format: Format, p: &Plot) -> Result<(), String> {
    register_fonts();
    let result = match format {
        Format::Svg => {
            draw(SVGBackend::new(path, SIZE).into_drawing_area(), p).map_err(|e| e.to_string())
        }
        Format::Png => {
            draw(BitMapBackend::new(path, SIZE).into_drawing_area(), p).map_err(|e| e.to_string())
        }
    };
    result.map_err(|e| format!("cannot write {:?}: {e}", path.display()))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    p: &Plot,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
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
        .fold(p.limit_per_s, f64::max);
    // Headroom above the highest bin for the legend in the upper right.
    let y_max = top * 1.3;
    let (unit, per_unit) = time_unit(p.duration_ns);
    let span = p.duration_ns as f64 / per_unit;

    // A step line through the bins: flat across each bin.
    let steps = |r: &[f64]| -> Vec<(f64, f64)> {
        let mut pts = Vec::with_capacity(2 * r.len());
        for (i, &v) in r.iter().enumerate() {
            let a = (i as u64 * p.bin_ns).min(p.duration_ns) as f64 / per_unit;
            let b = ((i as u64 + 1) * p.bin_ns).min(p.duration_ns) as f64 / per_unit;
            pts.push((a, v));
            pts.push((b, v));
        }
        pts
    };

    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(72);
    head.draw_text(
        &p.title,
        // FontDesc::style keeps the regular face's glyphs: make the bold
        // face's own description.
        &FontDesc::new(FontFamily::Name(FONT), 22.0, FontStyle::Bold).color(&BLACK),
        (24, 14),
    )?;
    head.draw_text(
        &p.subtitle,
        &(FONT, 16).into_font().color(&SUBTITLE),
        (24, 44),
    )?;

    let mut chart = ChartBuilder::on(&body)
        .margin_left(12)
        .margin_right(36)
        .margin_top(8)
        .margin_bottom(12)
        .x_label_area_size(52)
        .y_label_area_size(84)
        .build_cartesian_2d(0f64..span, 0f64..y_max)?;
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .x_labels(12)
        .y_labels(8)
        .x_label_formatter(&|v| si(*v))
        .y_label_formatter(&|v| si(*v))
        .x_desc(format!(
            "time ({unit}); bins of {}",
            format_duration(p.bin_ns)
        ))
        .y_desc("requests per second")
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()?;

    // Offered: a filled area under its step line; admitted: a bold line on
    // top, so the gap between them is what was denied.
    chart
        .draw_series(
            AreaSeries::new(steps(&offered), 0.0, OFFERED_FILL.mix(0.6))
                .border_style(OFFERED_LINE.stroke_width(1)),
        )?
        .label("offered")
        .legend(|(x, y)| {
            Rectangle::new(
                [(x, y - 6), (x + 22, y + 6)],
                OFFERED_FILL.filled().stroke_width(1),
            )
        });
    chart
        .draw_series(LineSeries::new(steps(&admitted), ADMITTED.stroke_width(3)))?
        .label("admitted")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], ADMITTED.stroke_width(3)));
    let keys = if p.keys > 1 {
        format!(", {} keys", p.keys)
    } else {
        String::new()
    };
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, p.limit_per_s), (span, p.limit_per_s)],
            9,
            6,
            LIMIT.stroke_width(2),
        ))?
        .label(format!("limit ({}/s{keys})", si(p.limit_per_s)))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], LIMIT.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .margin(12)
        .legend_area_size(30)
        .background_style(WHITE.mix(0.9))
        .border_style(GRID.stroke_width(1))
        .label_font((FONT, 15))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_use_si_suffixes() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(0.5), "0.5");
        assert_eq!(si(20.0), "20");
        assert_eq!(si(2_500.0), "2.5k");
        assert_eq!(si(10_000_000.0), "10M");
        assert_eq!(si(1.25e9), "1.25G");
        assert_eq!(si(999.999), "1000");
        assert_eq!(si(0.0002), "0.0002");
    }

    #[test]
    fn the_extension_chooses_the_format() {
        let dir = std::env::temp_dir();
        let svg = dir.join(format!("ratecell-plot-check-{}.SVG", std::process::id()));
        assert_eq!(check_path(&svg), Ok(Format::Svg));
        assert!(!svg.exists(), "the check leaves no file behind");
        let png = dir.join(format!("ratecell-plot-check-{}.png", std::process::id()));
        assert_eq!(check_path(&png), Ok(Format::Png));
        assert!(
            check_path(&dir.join("plot.jpg"))
                .unwrap_err()
                .contains(".svg or .png")
        );
        assert!(check_path(Path::new("/no/such/dir/plot.svg")).is_err());
    }
}
