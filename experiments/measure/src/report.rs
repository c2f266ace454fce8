//! Reporting shared by VINO's experiments: aligned text tables, JSON
//! output, and simple SVG charts (grouped bars and lines).

use std::fmt;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// A table of already-formatted cells, printed with aligned columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Free-text lines printed under the table (sources, caveats).
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Appends a row; missing cells are shown empty, extra cells are kept.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    pub fn note(&mut self, note: impl Into<String>) -> &mut Self {
        self.notes.push(note.into());
        self
    }

    /// The table as aligned text: first column left-aligned, the others
    /// right-aligned (they are usually numbers).
    pub fn render(&self) -> String {
        let ncols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; ncols];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in widths.iter().enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = w - c.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string()
        };
        let total: usize = widths.iter().sum::<usize>() + 2 * ncols.saturating_sub(1);
        let mut out = String::new();
        out.push_str(&self.title);
        out.push('\n');
        out.push_str(&"=".repeat(self.title.chars().count().max(total)));
        out.push('\n');
        if !self.headers.is_empty() {
            out.push_str(&line(&self.headers));
            out.push('\n');
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str("  * ");
            out.push_str(n);
            out.push('\n');
        }
        out
    }

    /// Prints the table (and a blank line) to stdout.
    pub fn print(&self) {
        println!("{}", self.render());
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// Writes `value` as pretty-printed JSON, creating parent directories.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// A duration in nanoseconds with a readable unit (ns, µs, ms, s).
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let a = ns.abs();
    let (v, unit) = if a < 1e3 {
        (ns, "ns")
    } else if a < 1e6 {
        (ns / 1e3, "µs")
    } else if a < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    format!("{} {unit}", sig3(v))
}

/// A ratio such as a normalized time ("1.23").
pub fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() { "-".into() } else { sig3(r) }
}

/// A count such as a break-even point, with thousands separators.
pub fn fmt_count(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v.abs() < 100.0 {
        return sig3(v);
    }
    let n = v.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// About three significant digits, without exponent notation.
fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

/// Options for [`bar_chart_with`].
#[derive(Clone, Debug, Default)]
pub struct ChartOptions {
    /// Force a logarithmic (`Some(true)`) or linear (`Some(false)`) value
    /// axis; `None` chooses log when the values span more than 30x.
    pub log_scale: Option<bool>,
    /// Draw a horizontal reference line at this value (e.g. 1.0 for
    /// "same as the baseline").
    pub reference: Option<f64>,
    /// Print each bar's value above it.
    pub value_labels: bool,
    /// Picture size in pixels (default 1000 x 560).
    pub size: Option<(u32, u32)>,
}

/// A grouped bar chart, e.g. normalized time per workload (group) and
/// technology (bar).  Groups may list different bars; bar colours follow the
/// bar name.
pub fn bar_chart(path: &Path, title: &str, y_label: &str, groups: &[(String, Vec<(String, f64)>)]) -> Result<()> {
    bar_chart_with(
        path,
        title,
        y_label,
        groups,
        &ChartOptions {
            reference: Some(1.0),
            value_labels: true,
            ..ChartOptions::default()
        },
    )
}

/// [`bar_chart`] with explicit options.
pub fn bar_chart_with(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[(String, Vec<(String, f64)>)],
    opts: &ChartOptions,
) -> Result<()> {
    create_parent(path)?;
    let mut names: Vec<String> = Vec::new();
    for (_, bars) in groups {
        for (n, _) in bars {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|(_, v)| *v))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if values.is_empty() {
        return Err(anyhow!("bar chart {title:?}: no positive values to plot"));
    }
    let vmax = values
        .iter()
        .cloned()
        .fold(f64::MIN, f64::max)
        .max(opts.reference.unwrap_or(0.0));
    let vmin = values.iter().cloned().fold(f64::MAX, f64::min);
    let log = opts.log_scale.unwrap_or(vmax / vmin > 30.0);
    let (w, h) = opts.size.unwrap_or((1000, 560));
    let ngroups = groups.len().max(1);

    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .margin_bottom(60)
        .x_label_area_size(10)
        .y_label_area_size(70);

    let color = |name: &str| -> RGBColor {
        let i = names.iter().position(|n| n == name).unwrap_or(0);
        bar_color(i)
    };
    let bar_width = 0.8 / names.len().max(1) as f64;
    // Bars present in each group are packed from the left of the group's slot.
    let layout: Vec<(f64, f64, String, f64)> = groups
        .iter()
        .enumerate()
        .flat_map(|(gi, (_, bars))| {
            let n = bars.len().max(1) as f64;
            let start = gi as f64 + 0.5 - n * bar_width / 2.0;
            bars.iter().enumerate().map(move |(bi, (name, v))| {
                (
                    start + bi as f64 * bar_width,
                    start + (bi + 1) as f64 * bar_width,
                    name.clone(),
                    *v,
                )
            })
        })
        .collect();

    macro_rules! draw_body {
        ($chart:expr, $base:expr, $fmt:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .y_desc(y_label)
                .y_label_formatter(&$fmt)
                .draw()
                .map_err(plot_err)?;
            for name in &names {
                let c = color(name);
                let rects: Vec<_> = layout
                    .iter()
                    .filter(|(_, _, n, v)| n == name && v.is_finite() && *v > 0.0)
                    .map(|(x0, x1, _, v)| Rectangle::new([(*x0 + 0.005, $base), (*x1 - 0.005, *v)], c.filled()))
                    .collect();
                chart
                    .draw_series(rects)
                    .map_err(plot_err)?
                    .label(name.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
            }
            if let Some(r) = opts.reference {
                chart
                    .draw_series(LineSeries::new(
                        vec![(0.0, r), (ngroups as f64, r)],
                        BLACK.stroke_width(1),
                    ))
                    .map_err(plot_err)?;
            }
            if opts.value_labels {
                let labels: Vec<_> =
                    layout
                        .iter()
                        .filter(|(_, _, _, v)| v.is_finite() && *v > 0.0)
                        .map(|(x0, x1, _, v)| {
                            let style = ("sans-serif", 11).into_font().color(&BLACK).pos(
                                plotters::style::text_anchor::Pos::new(
                                    plotters::style::text_anchor::HPos::Center,
                                    plotters::style::text_anchor::VPos::Bottom,
                                ),
                            );
                            Text::new(fmt_ratio(*v), ((*x0 + *x1) / 2.0, *v), style)
                        })
                        .collect();
                chart.draw_series(labels).map_err(plot_err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(plot_err)?;
            for (gi, (gname, _)) in groups.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, $base));
                let style =
                    TextStyle::from(("sans-serif", 14).into_font()).pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ));
                root.draw(&Text::new(gname.clone(), (px, py + 8), style))
                    .map_err(plot_err)?;
            }
        }};
    }

    if log {
        let lo = 10f64.powf((vmin.min(opts.reference.unwrap_or(vmin)) * 0.5).log10().floor());
        let hi = 10f64.powf((vmax * 1.5).log10().ceil());
        let chart = builder
            .build_cartesian_2d(0f64..ngroups as f64, (lo..hi).log_scale())
            .map_err(plot_err)?;
        draw_body!(chart, lo, |v: &f64| fmt_ratio(*v));
    } else {
        let hi = vmax * 1.15;
        let chart = builder
            .build_cartesian_2d(0f64..ngroups as f64, 0f64..hi)
            .map_err(plot_err)?;
        draw_body!(chart, 0.0, |v: &f64| fmt_ratio(*v));
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

/// A line chart of named series of (x, y) points, optionally with a
/// logarithmic y axis.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_y: bool,
) -> Result<()> {
    create_parent(path)?;
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().cloned())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_y || *y > 0.0))
        .collect();
    if pts.is_empty() {
        return Err(anyhow!("line chart {title:?}: no points to plot"));
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(*x), b.max(*x)));
    let (y0, y1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(*y), b.max(*y)));
    if x0 == x1 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);

    macro_rules! draw_lines {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(plot_err)?;
            for (i, (name, p)) in series.iter().enumerate() {
                let c = bar_color(i);
                let p: Vec<(f64, f64)> = p.iter().cloned().filter(|(_, y)| !log_y || *y > 0.0).collect();
                chart
                    .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                    .map_err(plot_err)?
                    .label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2)));
                chart
                    .draw_series(p.into_iter().map(|xy| Circle::new(xy, 3, c.filled())))
                    .map_err(plot_err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(plot_err)?;
        }};
    }
    if log_y {
        let lo = 10f64.powf((y0 * 0.8).log10().floor());
        let hi = 10f64.powf((y1 * 1.25).log10().ceil());
        draw_lines!(
            builder
                .build_cartesian_2d(x0..x1, (lo..hi).log_scale())
                .map_err(plot_err)?
        );
    } else {
        let lo = if y0 >= 0.0 { 0.0 } else { y0 * 1.1 };
        let hi = if y1 > lo { y1 * 1.1 } else { lo + 1.0 };
        draw_lines!(builder.build_cartesian_2d(x0..x1, lo..hi).map_err(plot_err)?);
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

fn bar_color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(0x4c, 0x72, 0xb0),
        RGBColor(0xdd, 0x84, 0x52),
        RGBColor(0x55, 0xa8, 0x68),
        RGBColor(0xc4, 0x4e, 0x52),
        RGBColor(0x81, 0x72, 0xb3),
        RGBColor(0x93, 0x78, 0x60),
        RGBColor(0xda, 0x8b, 0xc3),
        RGBColor(0x8c, 0x8c, 0x8c),
    ];
    COLORS[i % COLORS.len()]
}

fn plot_err<E: fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new("T", &["name", "value"]);
        t.row(["a", "1"]).row(["longer", "12345"]).note("n");
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "T");
        assert_eq!(lines[2], "name    value");
        assert_eq!(lines[4], "a           1");
        assert_eq!(lines[5], "longer  12345");
        assert_eq!(lines[6], "  * n");
        let json = serde_json::to_string(&t).unwrap();
        let back: Table = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(12.345), "12.3 ns");
        assert_eq!(fmt_ns(1234.0), "1.23 µs");
        assert_eq!(fmt_ns(2.5e6), "2.50 ms");
        assert_eq!(fmt_count(123456.7), "123,457");
        assert_eq!(fmt_ratio(0.5), "0.500");
    }

    #[test]
    fn charts_are_written() {
        let dir = std::env::temp_dir().join(format!("vino-measure-report-{}", std::process::id()));
        let groups = vec![
            ("a".to_string(), vec![("x".to_string(), 1.0), ("y".to_string(), 200.0)]),
            ("b".to_string(), vec![("x".to_string(), 1.0), ("y".to_string(), 1.5)]),
        ];
        let p = dir.join("bars.svg");
        bar_chart(&p, "bars", "normalized", &groups).unwrap();
        let svg = fs::read_to_string(&p).unwrap();
        assert!(svg.contains("<svg") && svg.contains("bars"));
        let p2 = dir.join("lines.svg");
        line_chart(
            &p2,
            "lines",
            "x",
            "y",
            &[("s".to_string(), vec![(1.0, 2.0), (2.0, 4.0)])],
            true,
        )
        .unwrap();
        assert!(fs::read_to_string(&p2).unwrap().contains("<svg"));
        let _ = fs::remove_dir_all(&dir);
    }
}
