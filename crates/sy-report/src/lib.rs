//! # sy-report: the plots and the generated `report.md` of a calibration run
//!
//! A calibration ends with numbers a researcher has to trust: Q tables, estimator errors, a margin,
//! a threshold search and five variants compared. This crate draws them with plotters — every
//! figure as SVG (for the browser and `docs/`) and PNG (for anything else) in `RUN_DIR/plots/` —
//! and assembles `report.md`, which references every figure. It knows nothing about how the numbers
//! were computed: callers (`sy-select`) pass plain data ([`Plot`]) and markdown text.
//!
//! ## Text and fonts
//!
//! plotters needs a font to draw (and even to measure) text, in SVG as in PNG. This crate uses
//! plotters' pure-Rust `ab_glyph` text backend and loads a TrueType font at run time: the file
//! named by `SY_REPORT_FONT`, else DejaVu Sans / Liberation Sans / any `.ttf` found under
//! `/usr/share/fonts` or `/usr/local/share/fonts`. No system library (fontconfig, freetype) is
//! needed to build or to run. On a machine without any font file the plots are still drawn —
//! without titles, tick labels and legends — and `report.md` says so; the numbers are always in
//! the report's tables.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Size of every figure in pixels.
pub const FIGURE_SIZE: (u32, u32) = (960, 600);
/// Directory of the figures inside the run directory.
pub const PLOTS_DIR: &str = "plots";
/// The report file name.
pub const REPORT_FILE: &str = "report.md";

/// Errors while drawing or writing.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot draw {name}: {message}")]
    Draw { name: String, message: String },
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// One named series of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One bar of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// Drawn above the bar (e.g. the override rate).
    pub annotation: String,
}

/// What to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum Plot {
    /// A heat map over two categorical axes (axis values shown as tick labels); NaN = missing
    /// cell (grey). `values[row][col]`, rows along y.
    Heatmap {
        title: String,
        x_label: String,
        y_label: String,
        x_ticks: Vec<String>,
        y_ticks: Vec<String>,
        values: Vec<Vec<f64>>,
        /// Mark one cell (row, col), e.g. the chosen (r, p).
        mark: Option<(usize, usize)>,
    },
    /// Lines, one per series; optional vertical reference lines with a name.
    Lines {
        title: String,
        x_label: String,
        y_label: String,
        series: Vec<Series>,
        log_x: bool,
        vlines: Vec<(f64, String)>,
    },
    /// Points, one colour per series; optional y = x diagonal.
    Scatter {
        title: String,
        x_label: String,
        y_label: String,
        series: Vec<Series>,
        diagonal: bool,
    },
    /// Bars with an annotation above each.
    Bars {
        title: String,
        y_label: String,
        bars: Vec<Bar>,
    },
}

static FONT: OnceLock<Option<PathBuf>> = OnceLock::new();

fn font_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("SY_REPORT_FONT") {
        out.push(PathBuf::from(p));
    }
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    ] {
        out.push(PathBuf::from(p));
    }
    for dir in ["/usr/share/fonts", "/usr/local/share/fonts"] {
        let mut found = Vec::new();
        collect_ttf(Path::new(dir), 0, &mut found);
        found.sort();
        out.extend(found);
    }
    out
}

fn collect_ttf(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 4 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_ttf(&p, depth + 1, out);
        } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
            out.push(p);
        }
    }
}

/// Loads and registers a font for plotters once; returns the font file, or `None` when no usable
/// font exists (plots are then drawn without text).
pub fn font() -> Option<&'static Path> {
    FONT.get_or_init(|| {
        for path in font_candidates() {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // plotters keeps fonts for the life of the process: leak the bytes once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Some(path);
            }
        }
        None
    })
    .as_deref()
}

/// Colour of series `i`.
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

/// A viridis-like colour for t in [0, 1].
fn heat(t: f64) -> RGBColor {
    const STOPS: [(f64, (f64, f64, f64)); 5] = [
        (0.0, (68.0, 1.0, 84.0)),
        (0.25, (59.0, 82.0, 139.0)),
        (0.5, (33.0, 145.0, 140.0)),
        (0.75, (94.0, 201.0, 98.0)),
        (1.0, (253.0, 231.0, 37.0)),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    for w in STOPS.windows(2) {
        let ((t0, a), (t1, b)) = (w[0], w[1]);
        if t <= t1 {
            let u = (t - t0) / (t1 - t0);
            let mix = |x: f64, y: f64| (x + u * (y - x)).round() as u8;
            return RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2));
        }
    }
    RGBColor(253, 231, 37)
}

/// Range of finite values, padded; a safe default when empty or flat.
fn range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let d = (hi - lo) * pad;
    (lo - d, hi + d)
}

fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, plot: &Plot, text: bool) -> DrawResult
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    let label_area = if text { 60 } else { 0 };
    match plot {
        Plot::Heatmap {
            title,
            x_label,
            y_label,
            x_ticks,
            y_ticks,
            values,
            mark,
        } => {
            let (nx, ny) = (x_ticks.len().max(1), y_ticks.len().max(1));
            let mut b = ChartBuilder::on(area);
            b.margin(20)
                .x_label_area_size(label_area)
                .y_label_area_size(label_area + 20);
            if text {
                b.caption(title, ("sans-serif", 22));
            }
            let mut chart = b.build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)?;
            if text {
                let xf = |v: &f64| {
                    let i = v.floor() as usize;
                    if (v - v.floor() - 0.5).abs() < 1e-9 && i < x_ticks.len() {
                        x_ticks[i].clone()
                    } else {
                        String::new()
                    }
                };
                let yf = |v: &f64| {
                    let i = v.floor() as usize;
                    if (v - v.floor() - 0.5).abs() < 1e-9 && i < y_ticks.len() {
                        y_ticks[i].clone()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_labels(2 * nx + 1)
                    .y_labels(2 * ny + 1)
                    .x_label_formatter(&xf)
                    .y_label_formatter(&yf)
                    .x_desc(x_label.as_str())
                    .y_desc(y_label.as_str())
                    .draw()?;
            }
            let (lo, hi) = range(values.iter().flatten().copied(), 0.0);
            let cells = values.iter().enumerate().flat_map(|(row, vals)| {
                vals.iter().enumerate().map(move |(col, &v)| (row, col, v))
            });
            chart.draw_series(cells.map(|(row, col, v)| {
                let fill = if v.is_finite() {
                    heat((v - lo) / (hi - lo).max(1e-12))
                } else {
                    RGBColor(200, 200, 200)
                };
                Rectangle::new(
                    [
                        (col as f64, row as f64),
                        (col as f64 + 1.0, row as f64 + 1.0),
                    ],
                    fill.filled(),
                )
            }))?;
            if let Some((row, col)) = *mark {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (col as f64, row as f64),
                        (col as f64 + 1.0, row as f64 + 1.0),
                    ],
                    RED.stroke_width(3),
                )))?;
            }
            if text && nx * ny <= 120 {
                let cells = values.iter().enumerate().flat_map(|(row, vals)| {
                    vals.iter().enumerate().map(move |(col, &v)| (row, col, v))
                });
                chart.draw_series(cells.filter(|c| c.2.is_finite()).map(|(row, col, v)| {
                    let t = (v - lo) / (hi - lo).max(1e-12);
                    let c = if t > 0.6 { BLACK } else { WHITE };
                    Text::new(
                        fmt_tick(v),
                        (col as f64 + 0.15, row as f64 + 0.6),
                        ("sans-serif", 12).into_font().color(&c),
                    )
                }))?;
            }
        }
        Plot::Lines {
            title,
            x_label,
            y_label,
            series,
            log_x,
            vlines,
        } => {
            let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
            let xs = xs.chain(vlines.iter().map(|v| v.0));
            let (x0, x1) = if *log_x {
                let (lo, hi) = range(xs.filter(|x| *x > 0.0), 0.0);
                (lo.max(1e-9) * 0.8, hi * 1.25)
            } else {
                range(xs, 0.03)
            };
            let (y0, y1) = range(
                series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
                0.05,
            );
            let mut b = ChartBuilder::on(area);
            b.margin(20)
                .x_label_area_size(label_area)
                .y_label_area_size(label_area + 20);
            if text {
                b.caption(title, ("sans-serif", 22));
            }
            if *log_x {
                let mut chart = b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?;
                if text {
                    chart
                        .configure_mesh()
                        .x_desc(x_label.as_str())
                        .y_desc(y_label.as_str())
                        .x_label_formatter(&|v| fmt_tick(*v))
                        .y_label_formatter(&|v| fmt_tick(*v))
                        .draw()?;
                }
                for (i, s) in series.iter().enumerate() {
                    let c = colour(i);
                    let pts: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .copied()
                        .filter(|p| p.0 > 0.0 && p.1.is_finite())
                        .collect();
                    let ls = chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
                    if text {
                        ls.label(s.name.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                        });
                    }
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
                }
                if text && !series.is_empty() {
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()?;
                }
            } else {
                let mut chart = b.build_cartesian_2d(x0..x1, y0..y1)?;
                if text {
                    chart
                        .configure_mesh()
                        .x_desc(x_label.as_str())
                        .y_desc(y_label.as_str())
                        .x_label_formatter(&|v| fmt_tick(*v))
                        .y_label_formatter(&|v| fmt_tick(*v))
                        .draw()?;
                }
                for (i, s) in series.iter().enumerate() {
                    let c = colour(i);
                    let pts: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .copied()
                        .filter(|p| p.0.is_finite() && p.1.is_finite())
                        .collect();
                    let ls = chart.draw_series(LineSeries::new(pts, c.stroke_width(2)))?;
                    if text {
                        ls.label(s.name.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                        });
                    }
                }
                for (j, (x, name)) in vlines.iter().enumerate() {
                    let c = colour(series.len() + j);
                    let ls = chart.draw_series(LineSeries::new(
                        vec![(*x, y0), (*x, y1)],
                        c.stroke_width(2),
                    ))?;
                    if text {
                        let name = name.clone();
                        ls.label(name).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                        });
                    }
                }
                if text && !(series.is_empty() && vlines.is_empty()) {
                    chart
                        .configure_series_labels()
                        .position(SeriesLabelPosition::LowerRight)
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()?;
                }
            }
        }
        Plot::Scatter {
            title,
            x_label,
            y_label,
            series,
            diagonal,
        } => {
            let all = || series.iter().flat_map(|s| s.points.iter());
            let (x0, x1) = range(all().map(|p| p.0), 0.03);
            let (y0, y1) = range(all().map(|p| p.1), 0.03);
            let (x0, x1, y0, y1) = if *diagonal {
                let (lo, hi) = (x0.min(y0), x1.max(y1));
                (lo, hi, lo, hi)
            } else {
                (x0, x1, y0, y1)
            };
            let mut b = ChartBuilder::on(area);
            b.margin(20)
                .x_label_area_size(label_area)
                .y_label_area_size(label_area + 20);
            if text {
                b.caption(title, ("sans-serif", 22));
            }
            let mut chart = b.build_cartesian_2d(x0..x1, y0..y1)?;
            if text {
                chart
                    .configure_mesh()
                    .x_desc(x_label.as_str())
                    .y_desc(y_label.as_str())
                    .x_label_formatter(&|v| fmt_tick(*v))
                    .y_label_formatter(&|v| fmt_tick(*v))
                    .draw()?;
            }
            if *diagonal {
                chart.draw_series(LineSeries::new(
                    vec![(x0, x0), (x1, x1)],
                    BLACK.mix(0.6).stroke_width(1),
                ))?;
            }
            for (i, s) in series.iter().enumerate() {
                let c = colour(i);
                let ps = chart.draw_series(
                    s.points
                        .iter()
                        .filter(|p| p.0.is_finite() && p.1.is_finite())
                        .map(|&p| Circle::new(p, 2, c.mix(0.5).filled())),
                )?;
                if text {
                    ps.label(s.name.as_str())
                        .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
                }
            }
            if text && !series.is_empty() {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()?;
            }
        }
        Plot::Bars {
            title,
            y_label,
            bars,
        } => {
            let n = bars.len().max(1);
            let (_, hi) = range(bars.iter().map(|b| b.value).chain([0.0]), 0.0);
            let mut b = ChartBuilder::on(area);
            b.margin(20)
                .x_label_area_size(label_area)
                .y_label_area_size(label_area + 20);
            if text {
                b.caption(title, ("sans-serif", 22));
            }
            let mut chart = b.build_cartesian_2d(0f64..n as f64, 0f64..hi * 1.15)?;
            if text {
                let xf = |v: &f64| {
                    let i = v.floor() as usize;
                    if (v - v.floor() - 0.5).abs() < 1e-9 && i < bars.len() {
                        bars[i].label.clone()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(2 * n + 1)
                    .x_label_formatter(&xf)
                    .y_label_formatter(&|v| fmt_tick(*v))
                    .y_desc(y_label.as_str())
                    .draw()?;
            }
            chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
                Rectangle::new(
                    [
                        (i as f64 + 0.15, 0.0),
                        (i as f64 + 0.85, bar.value.max(0.0)),
                    ],
                    colour(i).filled(),
                )
            }))?;
            if text {
                chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
                    Text::new(
                        format!("{} | {}", fmt_tick(bar.value), bar.annotation),
                        (i as f64 + 0.15, bar.value.max(0.0) + hi * 0.05),
                        ("sans-serif", 14).into_font(),
                    )
                }))?;
            }
        }
    }
    area.present()?;
    Ok(())
}

/// Draws `plot` into `dir/name.svg` and `dir/name.png`. Text is drawn only when a font is
/// available (see the crate docs). Returns whether text was drawn.
pub fn render(plot: &Plot, dir: &Path, name: &str) -> Result<bool, ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| ReportError::Write {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let text = font().is_some();
    let err = |m: String| ReportError::Draw {
        name: name.to_string(),
        message: m,
    };
    // SVG into a string, then written atomically.
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, FIGURE_SIZE).into_drawing_area();
        draw(&area, plot, text).map_err(|e| err(e.to_string()))?;
    }
    let svg_path = dir.join(format!("{name}.svg"));
    sy_cli::atomic_write(&svg_path, svg.as_bytes()).map_err(|e| ReportError::Write {
        path: svg_path.clone(),
        message: e.to_string(),
    })?;
    // PNG: plotters encodes by extension, so draw into a temporary `.png` beside the target and
    // rename it (atomic like every other output).
    let png_path = dir.join(format!("{name}.png"));
    let tmp = dir.join(format!(".{name}.{}.tmp.png", std::process::id()));
    let drawn = {
        let area = BitMapBackend::new(&tmp, FIGURE_SIZE).into_drawing_area();
        draw(&area, plot, text)
    };
    if let Err(e) = drawn {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e.to_string()));
    }
    std::fs::rename(&tmp, &png_path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        ReportError::Write {
            path: png_path.clone(),
            message: e.to_string(),
        }
    })?;
    Ok(text)
}

/// Assembles `report.md`: markdown sections and figures (each figure as SVG with a link to its
/// PNG).
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    md: String,
    figures: Vec<String>,
    text: bool,
}

impl Report {
    /// A report written into `dir` (the run directory), starting with a title.
    pub fn new(dir: &Path, title: &str) -> Report {
        let text = font().is_some();
        let mut md = format!("# {title}\n\n");
        if !text {
            md.push_str(
                "> No TrueType font was found (set `SY_REPORT_FONT=/path/to/font.ttf`): the figures are drawn without titles, tick labels and legends. Every number is in the tables.\n\n",
            );
        }
        Report {
            dir: dir.to_path_buf(),
            md,
            figures: Vec::new(),
            text,
        }
    }

    /// Appends markdown text (a blank line is added after it).
    pub fn markdown(&mut self, text: &str) {
        self.md.push_str(text.trim_end());
        self.md.push_str("\n\n");
    }

    /// Draws a figure into `plots/` and references it from the report.
    pub fn figure(&mut self, name: &str, caption: &str, plot: &Plot) -> Result<(), ReportError> {
        render(plot, &self.dir.join(PLOTS_DIR), name)?;
        let _ = write!(
            self.md,
            "![{caption}]({PLOTS_DIR}/{name}.svg)\n\n*{caption}* ([PNG]({PLOTS_DIR}/{name}.png))\n\n"
        );
        self.figures.push(name.to_string());
        Ok(())
    }

    /// Names of the figures drawn so far.
    pub fn figures(&self) -> &[String] {
        &self.figures
    }

    /// Whether figures carry text.
    pub fn has_text(&self) -> bool {
        self.text
    }

    /// The markdown so far.
    pub fn text(&self) -> &str {
        &self.md
    }

    /// Writes `report.md` atomically; returns its path.
    pub fn write(self) -> Result<PathBuf, ReportError> {
        let path = self.dir.join(REPORT_FILE);
        sy_cli::atomic_write(&path, self.md.as_bytes()).map_err(|e| ReportError::Write {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plots() -> Vec<(&'static str, Plot)> {
        vec![
            (
                "heat",
                Plot::Heatmap {
                    title: "Q".into(),
                    x_label: "f".into(),
                    y_label: "N".into(),
                    x_ticks: vec!["0".into(), "0.5".into()],
                    y_ticks: vec!["512".into(), "2048".into(), "8192".into()],
                    values: vec![vec![1.0, 2.0], vec![3.0, f64::NAN], vec![5.0, 6.0]],
                    mark: Some((1, 0)),
                },
            ),
            (
                "lines",
                Plot::Lines {
                    title: "lines".into(),
                    x_label: "N".into(),
                    y_label: "ms".into(),
                    series: vec![Series {
                        name: "f=0".into(),
                        points: vec![(512.0, 10.0), (2048.0, 30.0)],
                    }],
                    log_x: true,
                    vlines: vec![],
                },
            ),
            (
                "cdf",
                Plot::Lines {
                    title: "cdf".into(),
                    x_label: "ms".into(),
                    y_label: "F".into(),
                    series: vec![Series {
                        name: "blind".into(),
                        points: vec![(0.0, 0.0), (1.0, 0.5), (2.0, 1.0)],
                    }],
                    log_x: false,
                    vlines: vec![(1.5, "delta".into())],
                },
            ),
            (
                "scatter",
                Plot::Scatter {
                    title: "s".into(),
                    x_label: "measured".into(),
                    y_label: "predicted".into(),
                    series: vec![Series {
                        name: "a".into(),
                        points: vec![(1.0, 1.1), (2.0, 1.9)],
                    }],
                    diagonal: true,
                },
            ),
            (
                "bars",
                Plot::Bars {
                    title: "b".into(),
                    y_label: "ms".into(),
                    bars: vec![
                        Bar {
                            label: "stage".into(),
                            value: 100.0,
                            annotation: "0%".into(),
                        },
                        Bar {
                            label: "cache".into(),
                            value: 80.0,
                            annotation: "12%".into(),
                        },
                    ],
                },
            ),
            (
                "empty",
                Plot::Scatter {
                    title: "nothing".into(),
                    x_label: "x".into(),
                    y_label: "y".into(),
                    series: vec![],
                    diagonal: false,
                },
            ),
        ]
    }

    #[test]
    fn every_plot_kind_renders_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        for (name, plot) in plots() {
            render(&plot, dir.path(), name).unwrap();
            let svg = std::fs::read_to_string(dir.path().join(format!("{name}.svg"))).unwrap();
            assert!(svg.starts_with("<svg"), "{name}");
            let png = std::fs::read(dir.path().join(format!("{name}.png"))).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}");
            if font().is_some() && name != "empty" {
                assert!(
                    svg.contains("<text"),
                    "{name}: text drawn when a font exists"
                );
            }
        }
    }

    #[test]
    fn report_references_its_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Report::new(dir.path(), "Run");
        r.markdown("Some **text**.");
        let (name, plot) = plots().remove(0);
        r.figure(name, "A heat map", &plot).unwrap();
        let path = r.write().unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        assert!(md.starts_with("# Run\n"));
        assert!(md.contains("![A heat map](plots/heat.svg)"));
        assert!(md.contains("(plots/heat.png)"));
        assert!(dir.path().join("plots/heat.png").is_file());
    }

    #[test]
    fn heat_colours_span_the_map() {
        assert_eq!(heat(0.0), RGBColor(68, 1, 84));
        assert_eq!(heat(1.0), RGBColor(253, 231, 37));
        assert_eq!(heat(f64::NAN), RGBColor(68, 1, 84));
        assert_eq!(fmt_tick(1234.0), "1234");
        assert_eq!(fmt_tick(0.5), "0.5");
    }
}
