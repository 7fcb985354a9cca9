//! Building one model's Q table from its Q-grid records.
//!
//! Axes: the prompt-length axis is the observed N of each planned prompt length (the median over
//! that plan point's records, so a chat template adding a few tokens moves the grid point to
//! where the runtime will look it up); the cached-fraction axis is, likewise, the observed K / N of
//! each cell (the median over the cell's records: the router reports K after block rounding, so a
//! planned 0.9 is observed as 0.875 at N = 128 and 0.898 at N = 2048), so each row (prompt length)
//! has its own f axis ([`QTable::with_f_rows`]); the f = 0 column is kept at exactly 0 for the
//! cache-blind estimator, and a cell without an observed K / N takes its column's median. A cell is the
//! median TTFT of its ok records; its count, quartiles, range and median observed K / N are
//! reported. An empty cell stays missing (a lookup in a cell with a missing corner is invalid,
//! never extrapolated) and is warned about, as is a table whose medians are not monotone in the
//! uncached prompt tokens N·(1 − f).

use std::collections::BTreeMap;
use sy_selector::Model;

use sy_records::{Phase, ProbeTable, Status};
use sy_rundir::artifact::fit::{FAxisFallback, MonotoneViolation, QCell, QTableReport};
use sy_selector::QTable;

use sy_selector::{quantile_sorted, quantile_unsorted};

/// Why no Q table can be built for a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QBuildError {
    #[error(
        "no ok Q-grid records with a valid N for the {0} model: the Q table needs a no-load grid"
    )]
    NoRecords(&'static str),
    #[error("the {0} model's Q-grid has no f = 0 column: the cache-blind estimator needs Q(N, 0)")]
    NoZeroF(&'static str),
    #[error("the {model} model's Q table is invalid: {message}")]
    Table {
        model: &'static str,
        message: String,
    },
}

const MAX_LISTED_VIOLATIONS: usize = 10;

/// (planned N, planned f bits) → (TTFTs, observed K / N) of a Q-grid cell's records.
type CellSamples = BTreeMap<(u64, u64), (Vec<f64>, Vec<f64>)>;

/// Builds the Q table of `role` from the Q-grid records among `records`.
pub fn build_q_table(
    table: &ProbeTable,
    role: Model,
) -> Result<(QTable, QTableReport), QBuildError> {
    let name = role.as_str();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    // planned_n → observed Ns; (planned_n, planned_f bits) → (ttfts, observed fs)
    let mut ns: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut fs: Vec<f64> = Vec::new();
    let mut cells: CellSamples = BTreeMap::new();
    let mut used = 0usize;
    for r in table.rows() {
        if r.phase() != Phase::Qgrid || r.role() != role {
            continue;
        }
        let mut skip = |why: &str| *skipped.entry(why.to_string()).or_insert(0) += 1;
        if r.status() != Status::Ok {
            skip("status_error");
            continue;
        }
        let Some(ttft) = r.ttft_ms().filter(|t| t.is_finite()) else {
            skip("ttft_ms");
            continue;
        };
        let obs = r.rule_observation();
        let Ok(n) = obs.valid_n() else {
            skip("n");
            continue;
        };
        let observed_f = obs.valid_f().ok();
        let (planned_n, planned_f) = (r.planned_n(), r.planned_f());
        if !(planned_f.is_finite() && (0.0..=1.0).contains(&planned_f)) {
            skip("planned_f");
            continue;
        }
        used += 1;
        ns.entry(planned_n).or_default().push(n);
        let f_key = planned_f.to_bits();
        if !fs.iter().any(|v| v.to_bits() == f_key) {
            fs.push(planned_f);
        }
        let cell = cells.entry((planned_n, f_key)).or_default();
        cell.0.push(ttft);
        if let Some(f) = observed_f {
            cell.1.push(f);
        }
    }
    if used == 0 {
        return Err(QBuildError::NoRecords(name));
    }
    fs.sort_by(f64::total_cmp);
    if fs.first().copied() != Some(0.0) {
        return Err(QBuildError::NoZeroF(name));
    }
    let (column_f, f_axis_fallback) = observed_f_axis(&fs, &cells);
    // N axis: median observed N per planned N, in planned order.
    let planned: Vec<u64> = ns.keys().copied().collect();
    let n_axis: Vec<f64> = ns
        .values_mut()
        .map(|v| quantile_unsorted(v, 0.5).unwrap_or(f64::NAN))
        .collect();
    let mut values = Vec::with_capacity(n_axis.len() * fs.len());
    let mut report_cells = Vec::with_capacity(n_axis.len() * fs.len());
    let mut f_rows = Vec::with_capacity(n_axis.len());
    for (&pn, &n) in planned.iter().zip(&n_axis) {
        let row: Vec<QCell> = fs
            .iter()
            .zip(&column_f)
            .map(|(&pf, &cf)| measured_cell(&mut cells, pn, n, pf, cf))
            .collect();
        let f_row = row_f_axis(&row, &fs, &column_f);
        for (cell, &f) in row.into_iter().zip(&f_row) {
            values.push(cell.median_ms.unwrap_or(f64::NAN));
            report_cells.push(QCell { f, ..cell });
        }
        f_rows.push(f_row);
    }
    let empty = report_cells
        .iter()
        .filter(|c| c.median_ms.is_none())
        .map(|c| [c.n, c.f])
        .collect();
    let table = QTable::with_f_rows(n_axis, f_rows, values).map_err(|e| QBuildError::Table {
        model: name,
        message: e.to_string(),
    })?;
    let (count, violations) = monotone_violations(&report_cells);
    Ok((
        table,
        QTableReport {
            records: used,
            skipped,
            cells: report_cells,
            empty_cells: empty,
            monotone_violation_count: count,
            monotone_violations: violations,
            f_axis_fallback,
        },
    ))
}

/// One cell as measured: the median TTFT of its records, their spread and their median observed
/// K / N. `f` is the column's value here; [`row_f_axis`] sets the cell's own.
fn measured_cell(
    cells: &mut CellSamples,
    planned_n: u64,
    n: f64,
    planned_f: f64,
    column_f: f64,
) -> QCell {
    let mut cell = QCell {
        n,
        f: column_f,
        planned_n,
        count: 0,
        median_ms: None,
        p25_ms: None,
        p75_ms: None,
        min_ms: None,
        max_ms: None,
        observed_f_median: None,
    };
    if let Some((ttfts, ofs)) = cells.get_mut(&(planned_n, planned_f.to_bits()))
        && !ttfts.is_empty()
    {
        ttfts.sort_by(f64::total_cmp);
        cell.count = ttfts.len();
        cell.median_ms = quantile_sorted(ttfts, 0.5);
        cell.p25_ms = quantile_sorted(ttfts, 0.25);
        cell.p75_ms = quantile_sorted(ttfts, 0.75);
        cell.min_ms = ttfts.first().copied();
        cell.max_ms = ttfts.last().copied();
        cell.observed_f_median = quantile_unsorted(ofs, 0.5);
    }
    cell
}

/// One row's cached-fraction axis: each cell's own median observed K / N (what the router reports
/// for that prompt length after block rounding: 0.875 at N = 128 where 0.9 was planned, 0.898 at
/// N = 2048), 0 for the f = 0 column, the column's value for a cell with no observed K / N. When
/// those would not increase strictly along the row, the row takes the column values.
fn row_f_axis(row: &[QCell], planned: &[f64], column_f: &[f64]) -> Vec<f64> {
    let own: Vec<f64> = row
        .iter()
        .zip(planned.iter().zip(column_f))
        .map(|(c, (&pf, &cf))| {
            if pf == 0.0 {
                0.0
            } else {
                c.observed_f_median.unwrap_or(cf)
            }
        })
        .collect();
    if own.windows(2).all(|w| w[0] < w[1]) {
        own
    } else {
        column_f.to_vec()
    }
}

/// The column values: per planned fraction, the median observed K / N of its records over every
/// prompt length (e.g. 0.890625 where 0.9 was planned). A cell without its own observed K / N, or a
/// row whose own values would not increase, uses them. The f = 0 column stays exactly 0. When a
/// column has no observed K / N, or the medians would not increase strictly, the planned fractions
/// are used (an axis must stay strictly increasing), and the second value says why.
fn observed_f_axis(planned: &[f64], cells: &CellSamples) -> (Vec<f64>, Option<FAxisFallback>) {
    let mut axis = Vec::with_capacity(planned.len());
    for &f in planned {
        if f == 0.0 {
            axis.push(0.0);
            continue;
        }
        let mut all: Vec<f64> = cells
            .iter()
            .filter(|((_, fb), _)| *fb == f.to_bits())
            .flat_map(|(_, (_, ofs))| ofs.iter().copied())
            .collect();
        match quantile_unsorted(&mut all, 0.5) {
            Some(m) => axis.push(m),
            None => {
                let why = FAxisFallback::NoObservedFraction { planned_f: f };
                return (planned.to_vec(), Some(why));
            }
        }
    }
    if axis.windows(2).all(|w| w[0] < w[1]) {
        (axis, None)
    } else {
        let why = FAxisFallback::NotIncreasing { observed: axis };
        (planned.to_vec(), Some(why))
    }
}

/// Pairs of cells where more uncached tokens give a smaller median by more than the larger half
/// inter-quartile range of the two cells.
fn monotone_violations(cells: &[QCell]) -> (usize, Vec<MonotoneViolation>) {
    let pts: Vec<(f64, f64, f64, f64, f64)> = cells
        .iter()
        .filter_map(|c| {
            let m = c.median_ms?;
            let half_iqr = match (c.p25_ms, c.p75_ms) {
                (Some(a), Some(b)) => (b - a) / 2.0,
                _ => 0.0,
            };
            Some((c.n * (1.0 - c.f), m, half_iqr, c.n, c.f))
        })
        .collect();
    let mut found: Vec<(f64, MonotoneViolation)> = Vec::new();
    for a in &pts {
        for b in &pts {
            if a.0 < b.0 {
                let drop = a.1 - b.1;
                if drop > a.2.max(b.2) {
                    found.push((
                        drop,
                        MonotoneViolation {
                            lower: [a.3, a.4, a.1],
                            higher: [b.3, b.4, b.1],
                        },
                    ));
                }
            }
        }
    }
    let count = found.len();
    found.sort_by(|x, y| y.0.total_cmp(&x.0));
    (
        count,
        found
            .into_iter()
            .take(MAX_LISTED_VIOLATIONS)
            .map(|(_, v)| v)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::Record;
    use sy_records::synth::template_record;

    fn table(rs: &[Record]) -> ProbeTable {
        ProbeTable::from_records(rs).unwrap()
    }

    fn q(n: u64, f: f64, ttft: f64, role: Model) -> Record {
        let mut r = template_record();
        r.phase = Phase::Qgrid;
        r.role = role;
        r.planned_n = n;
        r.planned_f = f;
        r.observed.n = Some(n);
        r.observed.k = Some((f * n as f64) as u64);
        r.ttft_ms = Some(ttft);
        r
    }

    #[test]
    fn medians_per_cell_empty_cells_and_monotonicity() {
        let mut rs = vec![
            q(100, 0.0, 10.0, Model::Efficient),
            q(100, 0.0, 12.0, Model::Efficient),
            q(100, 0.0, 30.0, Model::Efficient),
            q(100, 0.5, 8.0, Model::Efficient),
            q(200, 0.0, 20.0, Model::Efficient),
            // (200, 0.5) empty
            q(100, 0.0, 999.0, Model::Capable),
        ];
        let mut failed = q(200, 0.5, 1.0, Model::Efficient);
        failed.status = Status::Error;
        rs.push(failed);
        let (t, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert_eq!(t.n_axis(), &[100.0, 200.0]);
        assert_eq!(t.shared_f_axis(), Some(&[0.0, 0.5][..]));
        assert_eq!(t.lookup(100.0, 0.0), Ok(12.0));
        assert_eq!(t.lookup(150.0, 0.0), Ok(16.0));
        assert!(t.lookup(150.0, 0.25).is_err()); // missing corner
        assert_eq!(rep.empty_cells, vec![[200.0, 0.5]]);
        assert_eq!(rep.records, 5);
        assert_eq!(rep.skipped.get("status_error"), Some(&1));
        assert_eq!(rep.cells[0].count, 3);
        assert_eq!(rep.monotone_violation_count, 0);

        // A cell with more uncached tokens but a clearly smaller median is flagged.
        rs.push(q(200, 0.5, 50.0, Model::Efficient)); // u = 100, median 50 > Q(200,0)=20 (u=200)
        let (_, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert!(rep.monotone_violation_count >= 1);
        assert_eq!(rep.monotone_violations[0].lower[2], 50.0);
    }

    /// Block rounding gives each prompt length its own observed fraction: each row's f axis is
    /// its cells' own K / N, and a measured cell reads back exactly where it was measured.
    #[test]
    fn each_row_takes_its_cells_observed_fraction() {
        let block = |n: u64, f: f64| {
            let mut r = q(n, f, 0.0, Model::Efficient);
            r.observed.k = Some(((f * n as f64) as u64 / 16) * 16);
            r
        };
        let mut rs = Vec::new();
        for (n, ttft0, ttft9) in [(128, 6.0, 2.0), (2048, 60.0, 8.0)] {
            let mut a = block(n, 0.0);
            a.ttft_ms = Some(ttft0);
            let mut b = block(n, 0.9);
            b.ttft_ms = Some(ttft9);
            rs.extend([a, b]);
        }
        let (t, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert_eq!(t.f_row(0), &[0.0, 112.0 / 128.0]); // 0.875
        assert_eq!(t.f_row(1), &[0.0, 1840.0 / 2048.0]); // 0.8984375
        assert_eq!(t.lookup(128.0, 0.875), Ok(2.0));
        assert_eq!(t.lookup(2048.0, 0.8984375), Ok(8.0));
        assert_eq!(rep.cells[1].f, 0.875);
        assert_eq!(rep.cells[3].f, 0.8984375);
        // Between the rows, above the lower row's measured top: out of the grid, not clamped.
        assert!(t.lookup(1000.0, 0.88).is_err());
    }

    /// When block rounding maps two planned fractions onto the same observed K / N, the medians
    /// would not increase: the axis is the planned fractions, and the report says why.
    #[test]
    fn planned_fractions_when_the_observed_medians_would_not_increase() {
        let mut rs = Vec::new();
        for (f, k, ttft) in [(0.0, 0, 10.0), (0.05, 0, 9.0), (0.1, 0, 8.0)] {
            let mut r = q(64, f, ttft, Model::Efficient);
            r.observed.k = Some(k); // 0.05·64 and 0.1·64 both round down to no whole 16-block
            rs.push(r);
        }
        let (t, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert_eq!(t.f_row(0), &[0.0, 0.05, 0.1]);
        assert_eq!(
            rep.f_axis_fallback,
            Some(FAxisFallback::NotIncreasing {
                observed: vec![0.0, 0.0, 0.0]
            })
        );

        // A fraction without any observed K / N falls back too.
        let mut no_k = q(64, 0.5, 5.0, Model::Efficient);
        no_k.observed.k = None;
        let rs = vec![q(64, 0.0, 10.0, Model::Efficient), no_k];
        let (t, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert_eq!(t.f_row(0), &[0.0, 0.5]);
        assert_eq!(
            rep.f_axis_fallback,
            Some(FAxisFallback::NoObservedFraction { planned_f: 0.5 })
        );

        // Observed medians that increase are used, with no fallback.
        let rs = vec![
            q(64, 0.0, 10.0, Model::Efficient),
            q(64, 0.5, 5.0, Model::Efficient),
        ];
        let (_, rep) = build_q_table(&table(&rs), Model::Efficient).unwrap();
        assert_eq!(rep.f_axis_fallback, None);
    }

    #[test]
    fn needs_records_and_a_zero_column() {
        assert!(matches!(
            build_q_table(&table(&[]), Model::Capable),
            Err(QBuildError::NoRecords("capable"))
        ));
        let rs = vec![q(100, 0.5, 8.0, Model::Capable)];
        assert!(matches!(
            build_q_table(&table(&rs), Model::Capable),
            Err(QBuildError::NoZeroF(_))
        ));
    }
}
