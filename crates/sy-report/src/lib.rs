//! # sy-report: the plots and the generated `report.md` of a calibration run
//!
//! A calibration ends with numbers a researcher has to trust: Q tables, estimator errors, a margin,
//! a threshold search and five variants compared. This crate draws them with plotters — every
//! figure as SVG (for the browser and `docs/`) and PNG (for a paper) in `RUN_DIR/plots/` — and
//! assembles `report.md`, which references every figure. It knows nothing about how the numbers
//! were computed: callers (`sy-select`) pass plain data ([`Plot`]) and markdown text.
//!
//! Every figure has a title, axis descriptions with units (the caller's labels), tick labels with
//! as many decimals as the axis step needs, a legend placed in a corner free of data (or head room
//! made for it), a colour bar for heat maps, interval bands / error bars where the caller gives
//! an interval, and markers on lines with few points. Lines go through one generic path for
//! linear and log x axes.
//!
//! ## Text and fonts
//!
//! See [`font`]: a small font is compiled in, so figures always have text; `SY_REPORT_FONT`
//! selects another, and an unusable one is an error naming the file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use sy_rundir::Artifact;

use plotters::prelude::*;

mod draw;
pub mod font;

pub use font::font;

/// Size of every figure in pixels.
pub const FIGURE_SIZE: (u32, u32) = (960, 600);

/// Errors while drawing or writing.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The figure could not be drawn (plotters' error, kept as its message: it is not `Send`,
    /// and figures are drawn in parallel).
    #[error("cannot draw {name}: {message}")]
    Draw { name: String, message: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: sy_rundir::RunError,
    },
    /// The drawn PNG could not be renamed into place.
    #[error("cannot write {path}: {source}")]
    Rename {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no usable font: {0}")]
    Font(String),
}

/// One named series of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A shaded band `(x, lower, upper)` (e.g. an inter-quartile range or a confidence band).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub name: String,
    /// Colour index (the same index as a series gives the series' colour).
    pub colour: usize,
    pub points: Vec<(f64, f64, f64)>,
}

/// A vertical reference line with an optional shaded interval around it.
#[derive(Debug, Clone, PartialEq)]
pub struct VLine {
    pub x: f64,
    pub name: String,
    pub span: Option<(f64, f64)>,
    /// Colour index (the index of the series it belongs to, to share its colour); `None` takes
    /// the next colour after the series.
    pub colour: Option<usize>,
}

/// One bar of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// Drawn as an error bar (e.g. a 95 % interval).
    pub interval: Option<(f64, f64)>,
    /// Drawn above the bar (one or more lines).
    pub annotation: String,
}

/// A heat map over two categorical axes (axis values as tick labels), with a colour bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// What the colours measure, with its unit (the colour bar's label).
    pub value_label: String,
    pub x_ticks: Vec<String>,
    pub y_ticks: Vec<String>,
    /// `values[row][col]`, rows along y; NaN = missing cell (grey, "—").
    pub values: Vec<Vec<f64>>,
    /// Decimals of the values written in the cells.
    pub decimals: usize,
    /// Sample count of each cell, written beside its value.
    pub counts: Option<Vec<Vec<u64>>>,
    /// Outline one cell (row, col), e.g. the chosen (r, p).
    pub mark: Option<(usize, usize)>,
}

/// Lines, one per series, over a linear or log x axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub log_x: bool,
    /// Tick labels exactly at these x values (instead of automatic ticks).
    pub x_ticks: Option<Vec<f64>>,
    /// The y range (automatic when `None`).
    pub y_range: Option<(f64, f64)>,
    /// Draw series as step functions (empirical CDFs).
    pub step: bool,
    pub bands: Vec<Band>,
    pub vlines: Vec<VLine>,
}

/// Points, one colour per series; optional y = x diagonal.
#[derive(Debug, Clone, PartialEq)]
pub struct Scatter {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub diagonal: bool,
}

/// Bars with optional error bars and an annotation above each.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub bars: Vec<Bar>,
}

/// What to draw.
#[derive(Debug, Clone, PartialEq)]
pub enum Plot {
    Heatmap(Heatmap),
    Lines(Lines),
    Scatter(Scatter),
    Bars(Bars),
}

/// Draws `plot` into `dir/name.svg` and `dir/name.png` (both written atomically).
pub fn render(plot: &Plot, dir: &Path, name: &str) -> Result<(), ReportError> {
    font()?;
    // A real directory (never a link planted in the run directory).
    sy_rundir::ensure_dir(dir).map_err(|source| ReportError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let err = |m: String| ReportError::Draw {
        name: name.to_string(),
        message: m,
    };
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, FIGURE_SIZE).into_drawing_area();
        draw::draw(&area, plot).map_err(|e| err(e.to_string()))?;
    }
    let svg_path = dir.join(format!("{name}.svg"));
    sy_rundir::atomic_write(&svg_path, svg.as_bytes()).map_err(|source| ReportError::Write {
        path: svg_path.clone(),
        source,
    })?;
    // PNG: plotters encodes by extension, so draw into a temporary `.png` beside the target and
    // rename it (atomic like every other output).
    let png_path = dir.join(format!("{name}.png"));
    let tmp = dir.join(format!(".{name}.{}.tmp.png", std::process::id()));
    let drawn = {
        let area = BitMapBackend::new(&tmp, FIGURE_SIZE).into_drawing_area();
        draw::draw(&area, plot)
    };
    if let Err(e) = drawn {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e.to_string()));
    }
    std::fs::rename(&tmp, &png_path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        ReportError::Rename {
            path: png_path.clone(),
            source,
        }
    })
}

/// Assembles `report.md`: markdown sections and figures (each figure as SVG with a link to its
/// PNG). Figures are drawn when the report is written, several at a time.
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    md: String,
    /// The figures referenced so far, by name, drawn by [`Report::write`].
    figures: Vec<(String, Plot)>,
}

impl Report {
    /// A report written into `dir` (the run directory), starting with a title; fails when no
    /// usable font exists.
    pub fn new(dir: &Path, title: &str) -> Result<Report, ReportError> {
        font()?;
        Ok(Report {
            dir: dir.to_path_buf(),
            md: format!("# {title}\n\n"),
            figures: Vec::new(),
        })
    }

    /// Appends markdown text (a blank line is added after it).
    pub fn markdown(&mut self, text: &str) {
        self.md.push_str(text.trim_end());
        self.md.push_str("\n\n");
    }

    /// References a figure from the report; it is drawn into `plots/` by [`Report::write`].
    pub fn figure(&mut self, name: &str, caption: &str, plot: Plot) {
        let _ = write!(
            self.md,
            "![{caption}]({plots}/{name}.svg)\n\n*{caption}* ([PNG]({plots}/{name}.png))\n\n",
            plots = Artifact::Plots.file_name()
        );
        self.figures.push((name.to_string(), plot));
    }

    /// Names of the figures referenced so far.
    pub fn figures(&self) -> Vec<&str> {
        self.figures.iter().map(|(name, _)| name.as_str()).collect()
    }

    /// The markdown so far.
    pub fn text(&self) -> &str {
        &self.md
    }

    /// Draws every figure (in parallel) and then writes `report.md` atomically; returns its
    /// path. A figure that fails is the error, and `report.md` is then not written.
    pub fn write(self) -> Result<PathBuf, ReportError> {
        use rayon::prelude::*;
        let plots = self.dir.join(Artifact::Plots.file_name());
        self.figures
            .par_iter()
            .try_for_each(|(name, plot)| render(plot, &plots, name))?;
        let path = self.dir.join(Artifact::Report.file_name());
        sy_rundir::atomic_write(&path, self.md.as_bytes()).map_err(|source| {
            ReportError::Write {
                path: path.clone(),
                source,
            }
        })?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(name: &str, log_x: bool, step: bool) -> Plot {
        Plot::Lines(Lines {
            title: name.into(),
            x_label: "prompt tokens N".into(),
            y_label: "TTFT (ms)".into(),
            series: vec![Series {
                name: "f = 0".into(),
                points: vec![(128.0, 10.0), (512.0, 12.0), (2048.0, 30.0)],
            }],
            log_x,
            x_ticks: log_x.then(|| vec![128.0, 512.0, 2048.0]),
            y_range: None,
            step,
            bands: vec![Band {
                name: "IQR".into(),
                colour: 0,
                points: vec![
                    (128.0, 9.0, 11.0),
                    (512.0, 11.0, 13.0),
                    (2048.0, 28.0, 33.0),
                ],
            }],
            vlines: vec![VLine {
                x: 300.0,
                name: "delta".into(),
                span: Some((250.0, 350.0)),
                colour: Some(0),
            }],
        })
    }

    pub(crate) fn plots() -> Vec<(&'static str, Plot)> {
        vec![
            (
                "heat",
                Plot::Heatmap(Heatmap {
                    title: "Q".into(),
                    x_label: "cached fraction f".into(),
                    y_label: "prompt tokens N".into(),
                    value_label: "TTFT (ms)".into(),
                    x_ticks: vec!["0".into(), "0.5".into()],
                    y_ticks: vec!["512".into(), "2048".into(), "8192".into()],
                    values: vec![vec![1.0, 2.0], vec![3.0, f64::NAN], vec![5.0, 6.0]],
                    decimals: 1,
                    counts: Some(vec![vec![2, 2], vec![2, 0], vec![2, 2]]),
                    mark: Some((1, 0)),
                }),
            ),
            ("lines_log", lines("log", true, false)),
            ("lines_step", lines("cdf", false, true)),
            (
                "scatter",
                Plot::Scatter(Scatter {
                    title: "s".into(),
                    x_label: "measured (ms)".into(),
                    y_label: "predicted (ms)".into(),
                    series: vec![Series {
                        name: "a".into(),
                        points: vec![(1.0, 1.1), (2.0, 1.9)],
                    }],
                    diagonal: true,
                }),
            ),
            (
                "bars",
                Plot::Bars(Bars {
                    title: "b".into(),
                    x_label: "variant".into(),
                    y_label: "ms".into(),
                    bars: vec![
                        Bar {
                            label: "stage".into(),
                            value: 100.0,
                            interval: Some((90.0, 110.0)),
                            annotation: "0%".into(),
                        },
                        Bar {
                            label: "cache".into(),
                            value: 80.0,
                            interval: None,
                            annotation: "12%\nline 2".into(),
                        },
                    ],
                }),
            ),
            (
                "empty",
                Plot::Scatter(Scatter {
                    title: "nothing".into(),
                    x_label: "x".into(),
                    y_label: "y".into(),
                    series: vec![],
                    diagonal: false,
                }),
            ),
        ]
    }

    #[test]
    fn every_plot_kind_renders_svg_and_png_with_text() {
        let dir = tempfile::tempdir().unwrap();
        for (name, plot) in plots() {
            render(&plot, dir.path(), name).unwrap();
            let svg = std::fs::read_to_string(dir.path().join(format!("{name}.svg"))).unwrap();
            assert!(svg.starts_with("<svg"), "{name}");
            assert!(svg.contains("<text"), "{name}: text drawn");
            let png = std::fs::read(dir.path().join(format!("{name}.png"))).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        }
        let svg = std::fs::read_to_string(dir.path().join("heat.svg")).unwrap();
        assert!(svg.contains("TTFT (ms)"), "the colour bar is labelled");
        assert!(svg.contains("(n=2)"), "cells carry their sample counts");
        let svg = std::fs::read_to_string(dir.path().join("lines_log.svg")).unwrap();
        assert!(
            !svg.contains("\n1000\n</text>"),
            "no automatic tick beside the explicit ones"
        );
        let svg = std::fs::read_to_string(dir.path().join("lines_log.svg")).unwrap();
        for tick in ["128", "512", "2048"] {
            assert!(
                svg.contains(&format!("\n{tick}\n</text>")),
                "log axis labelled at {tick}"
            );
        }
    }

    #[test]
    fn report_references_its_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Report::new(dir.path(), "Run").unwrap();
        r.markdown("Some **text**.");
        let (name, plot) = plots().remove(0);
        r.figure(name, "A heat map", plot);
        assert_eq!(r.figures(), ["heat"]);
        let path = r.write().unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        assert!(md.starts_with("# Run\n"));
        assert!(md.contains("![A heat map](plots/heat.svg)"));
        assert!(md.contains("(plots/heat.png)"));
        assert!(dir.path().join("plots/heat.png").is_file());
    }

    #[test]
    fn every_figure_is_drawn_and_a_failed_one_leaves_no_report() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Report::new(dir.path(), "Run").unwrap();
        let all = plots();
        for (name, plot) in all.iter().cloned() {
            r.figure(name, name, plot);
        }
        r.write().unwrap();
        for (name, _) in &all {
            assert!(
                dir.path().join(format!("plots/{name}.svg")).is_file(),
                "{name}"
            );
            assert!(
                dir.path().join(format!("plots/{name}.png")).is_file(),
                "{name}"
            );
        }
        // `plots` is a file: no figure can be drawn, and report.md is not written.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plots"), "not a directory").unwrap();
        let mut r = Report::new(dir.path(), "Run").unwrap();
        for (name, plot) in all {
            r.figure(name, name, plot);
        }
        assert!(r.write().is_err());
        assert!(!dir.path().join("report.md").exists());
    }

    #[test]
    fn legends_go_where_there_is_no_data() {
        use plotters::prelude::SeriesLabelPosition as P;
        // Data in the upper right: the legend goes to the upper left.
        let pts = [(0.9, 0.9), (0.5, 0.5)];
        assert!(matches!(
            draw::legend_position(&pts, 0.3, 0.2),
            Some(P::UpperLeft)
        ));
        // Data in every corner: no corner.
        let pts = [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)];
        assert!(draw::legend_position(&pts, 0.3, 0.2).is_none());
    }

    #[test]
    fn numbers_and_colours() {
        assert_eq!(draw::heat(0.0), RGBColor(68, 1, 84));
        assert_eq!(draw::heat(1.0), RGBColor(253, 231, 37));
        assert_eq!(draw::heat(f64::NAN), RGBColor(68, 1, 84));
        assert_eq!(draw::decimals_for(0.0, 1000.0), 0);
        assert_eq!(draw::decimals_for(0.0, 1.0), 1);
        assert_eq!(draw::fmt_num(-1.25, 1), "−1.2");
        assert_eq!(draw::fmt_num(-0.01, 1), "0.0");
    }
}
