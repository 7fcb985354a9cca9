//! Drawing: one generic path per figure kind, whatever the x scale (linear or log), on any
//! plotters backend (SVG, PNG).
//!
//! Every chart gets the same frame ([`frame`]: margins, caption, label areas), the same axis
//! styling ([`mesh`]: descriptions, tick labels with as many decimals as the axis step needs) and
//! the same legend placement ([`legend_position`]: the first plot corner holding no data; when
//! every corner holds data, head room is added above the data for the legend).

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::{Bars, Heatmap, Lines, Plot, Scatter, Series};

pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Title, axis-description and tick font sizes (px).
const TITLE: u32 = 22;
const DESC: u32 = 17;
const TICK: u32 = 14;
const LEGEND: u32 = 14;

/// Colour of series `i` (a colour-blind-safe palette, Okabe–Ito order).
pub(crate) fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(213, 94, 0),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(120, 120, 120),
        RGBColor(0, 0, 0),
    ];
    C[i % C.len()]
}

/// A viridis colour for t in [0, 1].
pub(crate) fn heat(t: f64) -> RGBColor {
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
pub(crate) fn range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
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

/// Decimals a tick label needs on an axis spanning `lo..hi` with about 8 ticks.
pub(crate) fn decimals_for(lo: f64, hi: f64) -> usize {
    let step = (hi - lo).abs() / 8.0;
    if !(step.is_finite() && step > 0.0) {
        return 0;
    }
    (-step.log10().floor()).clamp(0.0, 4.0) as usize
}

/// A number with `d` decimals, "−" for negatives (typographic minus).
pub(crate) fn fmt_num(v: f64, d: usize) -> String {
    let s = format!("{v:.d$}");
    if s.starts_with('-') && s.trim_start_matches(['-', '0', '.']).is_empty() {
        return s[1..].to_string();
    }
    s.replacen('-', "−", 1)
}

/// The caption and label areas shared by every chart.
fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &'b str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.margin(16)
        .margin_right(28)
        .x_label_area_size(58)
        .y_label_area_size(84)
        .caption(title, ("sans-serif", TITLE));
    b
}

/// Axis descriptions and formatted ticks.
fn mesh<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    x_label: &str,
    y_label: &str,
    fx: &dyn Fn(&X::ValueType) -> String,
    fy: &dyn Fn(&Y::ValueType) -> String,
    x_ticks: bool,
) -> DrawResult
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
{
    let mut m = chart.configure_mesh();
    m.x_desc(x_label)
        .y_desc(y_label)
        .axis_desc_style(("sans-serif", DESC))
        .label_style(("sans-serif", TICK))
        .light_line_style(BLACK.mix(0.05))
        .bold_line_style(BLACK.mix(0.12))
        .x_label_formatter(fx)
        .y_label_formatter(fy);
    if !x_ticks {
        // The caller draws its own ticks and grid lines (explicit_x_ticks).
        m.disable_x_mesh().x_label_formatter(&|_| String::new());
    }
    m.draw()?;
    Ok(())
}

/// The first corner of the plot whose box (`w`, `h`: fractions of the plot) holds none of the
/// `points` (normalised to [0, 1]²); `None` when every corner holds data.
pub(crate) fn legend_position(
    points: &[(f64, f64)],
    w: f64,
    h: f64,
) -> Option<SeriesLabelPosition> {
    let corners = [
        (SeriesLabelPosition::UpperRight, 1.0 - w, 1.0, 1.0 - h, 1.0),
        (SeriesLabelPosition::UpperLeft, 0.0, w, 1.0 - h, 1.0),
        (SeriesLabelPosition::LowerRight, 1.0 - w, 1.0, 0.0, h),
        (SeriesLabelPosition::LowerLeft, 0.0, w, 0.0, h),
    ];
    corners.into_iter().find_map(|(pos, x0, x1, y0, y1)| {
        let empty = !points
            .iter()
            .any(|&(x, y)| x >= x0 && x <= x1 && y >= y0 && y <= y1);
        empty.then_some(pos)
    })
}

/// Legend box size as fractions of a plot of `dim` pixels.
fn legend_box(names: &[&str], dim: (u32, u32)) -> (f64, f64) {
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let w = (longest as f64 * 7.6 + 56.0) / f64::from(dim.0.max(1));
    let h = (names.len() as f64 * 21.0 + 18.0) / f64::from(dim.1.max(1));
    (w.min(1.0), h.min(1.0))
}

/// Points of polylines densified (so a line crossing a corner counts as data there) and
/// normalised with `nx`, `ny`.
fn normalised(
    lines: &[Vec<(f64, f64)>],
    nx: &dyn Fn(f64) -> f64,
    ny: &dyn Fn(f64) -> f64,
) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for l in lines {
        for w in l.windows(2) {
            let (a, b) = ((nx(w[0].0), ny(w[0].1)), (nx(w[1].0), ny(w[1].1)));
            for k in 0..=16 {
                let t = f64::from(k) / 16.0;
                out.push((a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1)));
            }
        }
        if let [p] = l.as_slice() {
            out.push((nx(p.0), ny(p.1)));
        }
    }
    out
}

/// A step function through sorted points (for empirical CDFs).
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// At most this many points of one line series are drawn (about five per horizontal pixel).
const MAX_LINE_POINTS: usize = 4_000;
/// At most this many points of one scatter series are drawn: more only overplot the same pixels
/// (and a figure of two 20,000-point series was a 3.7 MB SVG).
const MAX_SCATTER_POINTS: usize = 5_000;

/// The drawable points of a series (finite; positive x on a log axis), thinned to at most `max`.
fn finite(s: &Series, log_x: bool, max: usize) -> Vec<(f64, f64)> {
    let p: Vec<(f64, f64)> = s
        .points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite() && (!log_x || p.0 > 0.0))
        .collect();
    thin(p, max)
}

/// Every k-th point (k = ⌈len / max⌉) in the series' order, plus the last one, so that a plot
/// of a million probes costs what a plot of `max` costs. On a sorted series (an empirical CDF)
/// the drawn step function is then within 1/(max − 1) + 1/len of the full one: less than a
/// pixel. Legends
/// keep counting the data, not the drawn points.
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max < 2 {
        return points;
    }
    let stride = points.len().div_ceil(max - 1);
    let last = points[points.len() - 1];
    let mut out: Vec<(f64, f64)> = points.into_iter().step_by(stride).collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// Draws a figure.
pub(crate) fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, plot: &Plot) -> DrawResult
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE)?;
    match plot {
        Plot::Heatmap(h) => heatmap(area, h)?,
        Plot::Lines(l) if l.log_x => {
            let (x0, x1) = lines_x_range(l);
            lines(area, l, (x0..x1).log_scale(), x0, x1, &|x: f64| x.ln())?
        }
        Plot::Lines(l) => {
            let (x0, x1) = lines_x_range(l);
            lines(area, l, x0..x1, x0, x1, &|x: f64| x)?
        }
        Plot::Scatter(s) => scatter(area, s)?,
        Plot::Bars(b) => bars(area, b)?,
    }
    area.present()?;
    Ok(())
}

fn lines_x_range(l: &Lines) -> (f64, f64) {
    let xs = l.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let xs = xs
        .chain(l.vlines.iter().flat_map(|v| {
            [Some(v.x), v.span.map(|s| s.0), v.span.map(|s| s.1)]
                .into_iter()
                .flatten()
        }))
        .chain(l.x_ticks.iter().flatten().copied());
    if l.log_x {
        let (lo, hi) = range(xs.filter(|x| *x > 0.0), 0.0);
        (lo.max(1e-9) * 0.85, hi * 1.15)
    } else {
        range(xs, 0.03)
    }
}

/// Lines over any x scale `xr` (linear or log): `t` maps x to the scale's linear measure.
fn lines<DB, XR>(
    area: &DrawingArea<DB, Shift>,
    l: &Lines,
    xr: XR,
    x0: f64,
    x1: f64,
    t: &dyn Fn(f64) -> f64,
) -> DrawResult
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    XR: AsRangedCoord<Value = f64>,
    XR::CoordDescType: ValueFormatter<f64>,
{
    let drawn: Vec<Vec<(f64, f64)>> = l
        .series
        .iter()
        .map(|s| {
            let p = finite(s, l.log_x, MAX_LINE_POINTS);
            if l.step { steps(&p) } else { p }
        })
        .collect();
    let band_ys = l
        .bands
        .iter()
        .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2]));
    let (y0, mut y1) = match l.y_range {
        Some(r) => r,
        None => range(drawn.iter().flatten().map(|p| p.1).chain(band_ys), 0.05),
    };
    let names: Vec<&str> = l
        .series
        .iter()
        .map(|s| s.name.as_str())
        .chain(l.bands.iter().map(|b| b.name.as_str()))
        .chain(l.vlines.iter().map(|v| v.name.as_str()))
        .collect();
    let (w, h) = legend_box(&names, (820, 470));
    let nx = |x: f64| (t(x) - t(x0)) / (t(x1) - t(x0));
    let mut vl: Vec<Vec<(f64, f64)>> = drawn.clone();
    vl.extend(l.vlines.iter().map(|v| vec![(v.x, y0), (v.x, y1)]));
    let pos = {
        let ny = |y: f64| (y - y0) / (y1 - y0);
        legend_position(&normalised(&vl, &nx, &ny), w, h)
    };
    let pos = pos.unwrap_or_else(|| {
        y1 = y0 + (y1 - y0) / (1.0 - h - 0.03).max(0.3);
        SeriesLabelPosition::UpperRight
    });
    let mut chart = frame(area, &l.title).build_cartesian_2d(xr, y0..y1)?;
    let (dx, dy) = (decimals_for(x0, x1), decimals_for(y0, y1));
    mesh(
        &mut chart,
        &l.x_label,
        &l.y_label,
        &|v| fmt_num(*v, if l.log_x { 0 } else { dx }),
        &|v| fmt_num(*v, dy),
        l.x_ticks.is_none(),
    )?;
    if let Some(ticks) = &l.x_ticks {
        explicit_x_ticks(area, &mut chart, ticks, (y0, y1))?;
    }
    for (j, band) in l.bands.iter().enumerate() {
        let c = colour(band.colour);
        let mut poly: Vec<(f64, f64)> = band.points.iter().map(|p| (p.0, p.1)).collect();
        poly.extend(band.points.iter().rev().map(|p| (p.0, p.2)));
        let a = chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))?;
        // One legend entry per band name, and none for a band with no width anywhere (nothing
        // shaded to point at).
        let first_of_name = j == 0 || l.bands[j - 1].name != band.name;
        let shaded = l.bands[j..]
            .iter()
            .take_while(|b| b.name == band.name)
            .flat_map(|b| &b.points)
            .any(|p| p.2 > p.1);
        if first_of_name && shaded {
            a.label(band.name.as_str()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 20, y + 5)], c.mix(0.25).filled())
            });
        }
    }
    for (i, (s, pts)) in l.series.iter().zip(&drawn).enumerate() {
        let c = colour(i);
        let few = finite(s, l.log_x, MAX_LINE_POINTS);
        let markers = few.len() <= 40;
        let drawn_line = chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
        // No legend entry for a series with nothing drawn.
        if !pts.is_empty() {
            drawn_line.label(s.name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
        if markers {
            chart.draw_series(few.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
    }
    for (j, v) in l.vlines.iter().enumerate() {
        let c = colour(v.colour.unwrap_or(l.series.len() + j));
        if let Some((a, b)) = v.span {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, y0), (b, y1)],
                c.mix(0.12).filled(),
            )))?;
        }
        chart
            .draw_series(DashedLineSeries::new(
                vec![(v.x, y0), (v.x, y1)],
                8,
                4,
                c.stroke_width(2),
            ))?
            .label(v.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    if !names.is_empty() {
        chart
            .configure_series_labels()
            .position(pos)
            .label_font(("sans-serif", LEGEND))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.5))
            .draw()?;
    }
    Ok(())
}

/// Tick labels and grid lines at exactly `ticks` (e.g. the measured prompt lengths).
fn explicit_x_ticks<DB, XR>(
    area: &DrawingArea<DB, Shift>,
    chart: &mut ChartContext<'_, DB, Cartesian2d<XR, plotters::coord::types::RangedCoordf64>>,
    ticks: &[f64],
    (y0, y1): (f64, f64),
) -> DrawResult
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    XR: Ranged<ValueType = f64>,
{
    let style: TextStyle = ("sans-serif", TICK).into();
    for &x in ticks {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, y0), (x, y1)],
            BLACK.mix(0.12),
        )))?;
        let (px, py) = chart.backend_coord(&(x, y0));
        let text = fmt_num(x, 0);
        let (w, _) = area.estimate_text_size(&text, &style)?;
        let (ox, oy) = (area.get_base_pixel().0, area.get_base_pixel().1);
        area.draw(&Text::new(
            text,
            (px - ox - w as i32 / 2, py - oy + 8),
            style.clone(),
        ))?;
        area.draw(&PathElement::new(
            vec![(px - ox, py - oy), (px - ox, py - oy + 5)],
            BLACK,
        ))?;
    }
    Ok(())
}

fn scatter<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, s: &Scatter) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let all = || s.series.iter().flat_map(|x| x.points.iter());
    let (x0, x1) = range(all().map(|p| p.0), 0.03);
    let (y0, y1) = range(all().map(|p| p.1), 0.03);
    let (x0, x1, y0, mut y1) = if s.diagonal {
        let (lo, hi) = (x0.min(y0), x1.max(y1));
        (lo, hi, lo, hi)
    } else {
        (x0, x1, y0, y1)
    };
    let pts: Vec<Vec<(f64, f64)>> = s
        .series
        .iter()
        .map(|x| finite(x, false, MAX_SCATTER_POINTS))
        .collect();
    let labels: Vec<String> = s
        .series
        .iter()
        .map(|x| match x.points.len() {
            n if n > MAX_SCATTER_POINTS => {
                format!(
                    "{} (1 in {} drawn)",
                    x.name,
                    n.div_ceil(MAX_SCATTER_POINTS - 1)
                )
            }
            _ => x.name.clone(),
        })
        .collect();
    let mut names: Vec<&str> = labels.iter().map(String::as_str).collect();
    if s.diagonal {
        names.push("y = x");
    }
    let (w, h) = legend_box(&names, (820, 470));
    let mut shapes: Vec<Vec<(f64, f64)>> = pts
        .iter()
        .flat_map(|p| p.iter().map(|q| vec![*q]))
        .collect();
    if s.diagonal {
        shapes.push(vec![(x0, x0), (x1, x1)]);
    }
    let nx = |x: f64| (x - x0) / (x1 - x0);
    let pos = legend_position(&normalised(&shapes, &nx, &|y| (y - y0) / (y1 - y0)), w, h)
        .unwrap_or_else(|| {
            y1 = y0 + (y1 - y0) / (1.0 - h - 0.03).max(0.3);
            SeriesLabelPosition::UpperLeft
        });
    let mut chart = frame(area, &s.title).build_cartesian_2d(x0..x1, y0..y1)?;
    let (dx, dy) = (decimals_for(x0, x1), decimals_for(y0, y1));
    mesh(
        &mut chart,
        &s.x_label,
        &s.y_label,
        &|v| fmt_num(*v, dx),
        &|v| fmt_num(*v, dy),
        true,
    )?;
    for (i, p) in pts.iter().enumerate() {
        let c = colour(i);
        let dots = chart.draw_series(p.iter().map(|&q| Circle::new(q, 3, c.mix(0.55).filled())))?;
        if !p.is_empty() {
            dots.label(labels[i].as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
        }
    }
    if s.diagonal {
        chart
            .draw_series(LineSeries::new(
                vec![(x0, x0), (x1, x1)],
                BLACK.mix(0.6).stroke_width(1),
            ))?
            .label("y = x")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.6)));
    }
    if !names.is_empty() {
        chart
            .configure_series_labels()
            .position(pos)
            .label_font(("sans-serif", LEGEND))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.5))
            .draw()?;
    }
    Ok(())
}

/// Tick label of categorical position `v` (labels at cell centres, every `every`-th shown).
fn category(labels: &[String], every: usize, v: f64) -> String {
    let i = v.floor() as usize;
    let centre = (v - v.floor() - 0.5).abs() < 1e-9;
    if centre && i < labels.len() && i.is_multiple_of(every.max(1)) {
        labels[i].clone()
    } else {
        String::new()
    }
}

/// How many categorical labels to skip so that labels of about `chars` characters do not
/// overlap on `px` pixels.
fn label_stride(n: usize, chars: usize, px: f64) -> usize {
    let need = n as f64 * (chars as f64 * 8.0 + 10.0);
    (need / px).ceil().max(1.0) as usize
}

fn heatmap<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, h: &Heatmap) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (w, _) = area.dim_in_pixel();
    let (main, bar) = area.split_horizontally(w.saturating_sub(150));
    let (nx, ny) = (h.x_ticks.len().max(1), h.y_ticks.len().max(1));
    let mut chart = frame(&main, &h.title).build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)?;
    let longest = |t: &[String]| t.iter().map(|s| s.chars().count()).max().unwrap_or(1);
    let sx = label_stride(nx, longest(&h.x_ticks), f64::from(w) - 280.0);
    let xf = |v: &f64| category(&h.x_ticks, sx, *v);
    let yf = |v: &f64| category(&h.y_ticks, 1, *v);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(2 * nx + 1)
        .y_labels(2 * ny + 1)
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .x_desc(h.x_label.as_str())
        .y_desc(h.y_label.as_str())
        .axis_desc_style(("sans-serif", DESC))
        .label_style(("sans-serif", TICK))
        .draw()?;
    let (lo, hi) = range(h.values.iter().flatten().copied(), 0.0);
    let t = |v: f64| (v - lo) / (hi - lo).max(1e-12);
    let cells = || {
        h.values
            .iter()
            .enumerate()
            .flat_map(|(r, vals)| vals.iter().enumerate().map(move |(c, &v)| (r, c, v)))
    };
    let rect = |r: usize, c: usize| [(c as f64, r as f64), (c as f64 + 1.0, r as f64 + 1.0)];
    chart.draw_series(cells().map(|(r, c, v)| {
        let fill = if v.is_finite() {
            heat(t(v))
        } else {
            RGBColor(215, 215, 215)
        };
        Rectangle::new(rect(r, c), fill.filled())
    }))?;
    if let Some((r, c)) = h.mark {
        chart.draw_series(std::iter::once(Rectangle::new(
            rect(r, c),
            RGBColor(230, 0, 0).stroke_width(4),
        )))?;
    }
    if nx * ny <= 120 {
        let size = if nx > 8 { 11 } else { 13 };
        chart.draw_series(cells().map(|(r, c, v)| {
            let colour = if !v.is_finite() || t(v) > 0.6 {
                BLACK
            } else {
                WHITE
            };
            let mut text = if v.is_finite() {
                fmt_num(v, h.decimals)
            } else {
                "—".to_string()
            };
            if let Some(n) = h.counts.as_ref().and_then(|k| k.get(r)?.get(c)) {
                text = format!("{text} (n={n})");
            }
            let style = ("sans-serif", size).into_font().color(&colour);
            Text::new(text, (c as f64 + 0.06, r as f64 + 0.58), style)
        }))?;
    }
    colour_bar(&bar, lo, hi, &h.value_label)
}

/// A vertical colour bar for values `lo..hi` with its label.
fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lo: f64,
    hi: f64,
    label: &str,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .margin_top(60)
        .margin_bottom(74)
        .margin_right(70)
        .y_label_area_size(0)
        .right_y_label_area_size(0)
        .build_cartesian_2d(0f64..1f64, lo..hi.max(lo + 1e-9))?;
    let steps = 100;
    chart.draw_series((0..steps).map(|i| {
        let a = lo + (hi - lo) * f64::from(i) / f64::from(steps);
        let b = lo + (hi - lo) * f64::from(i + 1) / f64::from(steps);
        Rectangle::new(
            [(0.0, a), (1.0, b)],
            heat(f64::from(i) / f64::from(steps - 1)).filled(),
        )
    }))?;
    let d = decimals_for(lo, hi);
    let style: TextStyle = ("sans-serif", TICK).into();
    for k in 0..=5 {
        let v = lo + (hi - lo) * f64::from(k) / 5.0;
        let (px, py) = chart.backend_coord(&(1.0, v));
        let base = area.get_base_pixel();
        let (px, py) = (px - base.0, py - base.1);
        area.draw(&PathElement::new(vec![(px, py), (px + 5, py)], BLACK))?;
        area.draw(&Text::new(fmt_num(v, d), (px + 8, py - 7), style.clone()))?;
    }
    let (px, _) = chart.backend_coord(&(0.0, hi));
    let base = area.get_base_pixel();
    area.draw(&Text::new(
        label.to_string(),
        (px - base.0 - 20, 36),
        ("sans-serif", DESC).into_font(),
    ))?;
    Ok(())
}

fn bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, b: &Bars) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let n = b.bars.len().max(1);
    // Bars grow from zero, up or down; the axis holds every bar, interval and zero, with room
    // above for the annotations.
    let ends = b.bars.iter().flat_map(|x| {
        let (lo, hi) = x.interval.unwrap_or((x.value, x.value));
        [x.value, lo, hi]
    });
    let (lo, hi) = range(ends.chain([0.0]), 0.0);
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let (y0, y1) = (
        if lo < 0.0 { lo - 0.05 * span } else { 0.0 },
        hi + 0.2 * span,
    );
    let mut chart = frame(area, &b.title).build_cartesian_2d(0f64..n as f64, y0..y1)?;
    let labels: Vec<String> = b.bars.iter().map(|x| x.label.clone()).collect();
    let xf = |v: &f64| category(&labels, 1, *v);
    let d = decimals_for(y0, y1);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&xf)
        .y_label_formatter(&|v| fmt_num(*v, d))
        .y_desc(b.y_label.as_str())
        .x_desc(b.x_label.as_str())
        .axis_desc_style(("sans-serif", DESC))
        .label_style(("sans-serif", TICK))
        .light_line_style(BLACK.mix(0.05))
        .draw()?;
    chart.draw_series(b.bars.iter().enumerate().map(|(i, bar)| {
        let v = if bar.value.is_finite() {
            bar.value
        } else {
            0.0
        };
        Rectangle::new(
            [(i as f64 + 0.2, 0.0), (i as f64 + 0.8, v)],
            colour(i).mix(0.85).filled(),
        )
    }))?;
    if y0 < 0.0 {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 0.0), (n as f64, 0.0)],
            BLACK.stroke_width(1),
        )))?;
    }
    for (i, bar) in b.bars.iter().enumerate() {
        let xc = i as f64 + 0.5;
        if let Some((lo, hi)) = bar.interval {
            let whisker = |y: f64| {
                PathElement::new(vec![(xc - 0.08, y), (xc + 0.08, y)], BLACK.stroke_width(2))
            };
            chart.draw_series([
                PathElement::new(vec![(xc, lo), (xc, hi)], BLACK.stroke_width(2)),
                whisker(lo),
                whisker(hi),
            ])?;
        }
        let top = bar
            .interval
            .map_or(bar.value, |x| x.1.max(bar.value))
            .max(0.0);
        let (px, py) = chart.backend_coord(&(xc, top));
        let style: TextStyle = ("sans-serif", TICK).into();
        for (k, line) in bar.annotation.lines().enumerate() {
            let (w, _) = area.estimate_text_size(line, &style)?;
            area.draw(&Text::new(
                line.to_string(),
                (px - w as i32 / 2, py - 40 + 17 * k as i32),
                style.clone(),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod thin_tests {
    use super::thin;

    #[test]
    fn short_series_are_drawn_whole() {
        let p: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i), 0.0)).collect();
        assert_eq!(thin(p.clone(), 10), p);
    }

    #[test]
    fn long_series_keep_at_most_max_points_with_both_ends() {
        for (n, max) in [
            (1_000_001_usize, 4_000_usize),
            (10_001, 20),
            (101, 2),
            (7, 3),
        ] {
            let p: Vec<(f64, f64)> = (0..n)
                .map(|i| (i as f64, (i + 1) as f64 / n as f64))
                .collect();
            let t = thin(p.clone(), max);
            assert!(t.len() <= max, "{n} → {} > {max}", t.len());
            assert_eq!(t.first(), p.first());
            assert_eq!(t.last(), p.last());
            // A sorted CDF stays within 1/(max − 1) + 1/n of the full one between drawn points.
            let gap = t.windows(2).map(|w| w[1].1 - w[0].1).fold(0.0, f64::max);
            let bound = 1.0 / (max - 1) as f64 + 1.0 / n as f64;
            assert!(gap <= bound + 1e-12, "{n}/{max}: gap {gap}");
        }
    }
}
