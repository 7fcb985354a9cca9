//! The Q table: measured no-load TTFT `Q_m(N, f)` over prompt length N and cached fraction f.
//!
//! Each row (one prompt length) has its own cached-fraction axis: the fractions observed in its
//! cells, which block rounding makes differ by prompt length (0.875 at N = 128 where 0.9 was
//! planned, 0.898 at N = 2048). A table whose rows share one axis is the ordinary rectilinear grid.
//! Values between measured points interpolate linearly along f within each of the two enclosing
//! rows, then linearly along N between them; with a shared axis that is exactly bilinear
//! interpolation. A query outside the measured grid,
//! or inside a cell with a missing (NaN) corner, is [`OutOfRange`]: never clamped, never
//! extrapolated. A query that lies exactly on a grid line does not interpolate along that axis,
//! so it reads only the corners on that line (a measured grid point is returned as measured).

use serde::{Deserialize, Serialize};

/// Why a Q lookup has no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum OutOfRange {
    /// N is NaN or outside `[n_axis[0], n_axis[last]]`.
    #[error("prompt length N is outside the Q table's measured grid")]
    N,
    /// f is NaN or outside the f axis of either enclosing row.
    #[error("cached fraction f is outside the Q table's measured grid")]
    F,
    /// The enclosing cell has a missing (unmeasured) corner.
    #[error("the Q table cell enclosing (N, f) has a missing corner")]
    MissingCorner,
}

/// Why a Q table cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QTableError {
    #[error("Q table {axis} is empty")]
    EmptyAxis { axis: &'static str },
    #[error("Q table {axis}[{index}] = {value} is not finite")]
    NonFiniteAxis {
        axis: &'static str,
        index: usize,
        value: f64,
    },
    #[error("Q table {axis} is not strictly increasing at index {index} ({prev} then {value})")]
    NotIncreasing {
        axis: &'static str,
        index: usize,
        prev: f64,
        value: f64,
    },
    #[error("Q table {axis}[{index}] = {value} is outside {domain}")]
    OutOfDomain {
        axis: &'static str,
        index: usize,
        value: f64,
        domain: &'static str,
    },
    #[error("Q table has {got} values, expected n_axis.len() × f_axis.len() = {expected}")]
    Shape { expected: usize, got: usize },
    #[error("Q table row {row} has {got} values, expected f_axis.len() = {expected}")]
    RowShape {
        row: usize,
        expected: usize,
        got: usize,
    },
    #[error("Q table value at (n index {row}, f index {col}) is infinite")]
    InfiniteValue { row: usize, col: usize },
    #[error("Q table has {got} f_axis rows, expected one per n_axis entry ({expected})")]
    FRows { expected: usize, got: usize },
    #[error("Q table f_axis row {row}: {source}")]
    FRow {
        row: usize,
        source: Box<QTableError>,
    },
}

/// Measured no-load TTFT (milliseconds) per (prompt length, cached fraction).
///
/// In JSON: `{"n_axis": [...], "f_axis": [...], "values": [[...], ...]}` where `values[i][j]` is
/// `Q(n_axis[i], f_axis[i][j])` and `null` marks a missing cell. `f_axis` is one list per row, or a
/// single list when every row shares it (`values[i][j] = Q(n_axis[i], f_axis[j])`).
/// Deserialisation validates like [`QTable::with_f_rows`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "QTableRepr", into = "QTableRepr")]
pub struct QTable {
    n_axis: Vec<f64>,
    /// Cells per row.
    width: usize,
    /// Row-major like `values`: `f_rows[i * width + j]` is the cached fraction of cell (i, j).
    f_rows: Vec<f64>,
    /// Row-major: `values[i * width + j]`; NaN = missing.
    values: Vec<f64>,
}

/// Equal axes and equal cells, a missing cell being equal to a missing cell.
impl PartialEq for QTable {
    fn eq(&self, other: &Self) -> bool {
        self.n_axis == other.n_axis
            && self.width == other.width
            && self.f_rows == other.f_rows
            && self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .zip(&other.values)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
    }
}

impl QTable {
    /// Feeds every number of the table, bit for bit, to `h` (a table's identity; see
    /// [`crate::TtftGround::id`]).
    pub(crate) fn hash_bits(&self, h: &mut impl std::hash::Hasher) {
        h.write_usize(self.width);
        for v in [&self.n_axis, &self.f_rows, &self.values] {
            h.write_usize(v.len());
            for x in v.iter() {
                h.write_u64(x.to_bits());
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QTableRepr {
    n_axis: Vec<f64>,
    f_axis: FAxisRepr,
    values: Vec<Vec<Option<f64>>>,
}

/// `f_axis` in JSON: one list shared by every row, or one list per row.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "f_axis: a list of cached fractions, or one such list per n_axis entry"
)]
enum FAxisRepr {
    Shared(Vec<f64>),
    PerRow(Vec<Vec<f64>>),
}

impl TryFrom<QTableRepr> for QTable {
    type Error = QTableError;
    fn try_from(repr: QTableRepr) -> Result<Self, Self::Error> {
        let f_rows = match repr.f_axis {
            FAxisRepr::Shared(axis) => vec![axis; repr.n_axis.len()],
            FAxisRepr::PerRow(rows) => rows,
        };
        let width = f_rows.first().map_or(0, Vec::len);
        if repr.values.len() != repr.n_axis.len() {
            return Err(QTableError::Shape {
                expected: repr.n_axis.len() * width,
                got: repr.values.iter().map(Vec::len).sum(),
            });
        }
        let mut flat = Vec::with_capacity(repr.n_axis.len() * width);
        for (row, values) in repr.values.iter().enumerate() {
            if values.len() != width {
                return Err(QTableError::RowShape {
                    row,
                    expected: width,
                    got: values.len(),
                });
            }
            flat.extend(values.iter().map(|v| v.unwrap_or(f64::NAN)));
        }
        QTable::with_f_rows(repr.n_axis, f_rows, flat)
    }
}

impl From<QTable> for QTableRepr {
    fn from(q: QTable) -> Self {
        let width = q.width;
        let f_axis = match q.shared_f_axis() {
            Some(axis) => FAxisRepr::Shared(axis.to_vec()),
            None => FAxisRepr::PerRow(q.f_rows.chunks(width.max(1)).map(<[f64]>::to_vec).collect()),
        };
        let values = q
            .values
            .chunks(width.max(1))
            .map(|row| {
                row.iter()
                    .map(|v| if v.is_nan() { None } else { Some(*v) })
                    .collect()
            })
            .collect();
        QTableRepr {
            n_axis: q.n_axis,
            f_axis,
            values,
        }
    }
}

fn check_axis(axis: &[f64], name: &'static str) -> Result<(), QTableError> {
    if axis.is_empty() {
        return Err(QTableError::EmptyAxis { axis: name });
    }
    for (index, &value) in axis.iter().enumerate() {
        if !value.is_finite() {
            return Err(QTableError::NonFiniteAxis {
                axis: name,
                index,
                value,
            });
        }
        // A cached fraction is a share of the prompt, a prompt length a count of tokens.
        let domain = match name {
            "f_axis" => (!(0.0..=1.0).contains(&value)).then_some("[0, 1] (a cached fraction)"),
            _ => (value < 0.0).then_some("[0, ∞) (a prompt length)"),
        };
        if let Some(domain) = domain {
            return Err(QTableError::OutOfDomain {
                axis: name,
                index,
                value,
                domain,
            });
        }
        if index > 0 && value <= axis[index - 1] {
            return Err(QTableError::NotIncreasing {
                axis: name,
                index,
                prev: axis[index - 1],
                value,
            });
        }
    }
    Ok(())
}

/// Axes up to this many points are searched by a linear count rather than by bisection.
const SHORT_AXIS: usize = 32;

/// Locates `x` on a strictly increasing axis: `(lo, hi, t)` with `x = axis[lo] + t (axis[hi] -
/// axis[lo])`; `lo == hi` and `t == 0` when `x` is exactly a grid point. `None` outside (or NaN).
#[inline(always)]
fn bracket(axis: &[f64], x: f64) -> Option<(usize, usize, f64)> {
    let (&first, &last) = (axis.first()?, axis.last()?);
    if !(x >= first && x <= last) {
        return None;
    }
    // First index whose value is > x; ≥ 1 because axis[0] <= x. Q-table axes are short (a few
    // to a few dozen points), where a branch-free count of the values ≤ x beats a binary search,
    // whose steps are a chain of dependent loads.
    let i = if axis.len() <= SHORT_AXIS {
        axis.iter().map(|&a| usize::from(a <= x)).sum()
    } else {
        axis.partition_point(|&a| a <= x)
    };
    let lo = i.checked_sub(1)?;
    let a_lo = *axis.get(lo)?;
    if a_lo == x {
        return Some((lo, lo, 0.0));
    }
    let a_hi = *axis.get(i)?;
    Some((lo, i, (x - a_lo) / (a_hi - a_lo)))
}

impl QTable {
    /// Builds a table whose rows share one cached-fraction axis. Axes must be non-empty, finite
    /// and strictly increasing; `values` is row-major (`n_axis.len()` rows of `f_axis.len()`),
    /// NaN marks a missing cell, infinities are refused.
    pub fn new(n_axis: Vec<f64>, f_axis: Vec<f64>, values: Vec<f64>) -> Result<Self, QTableError> {
        check_axis(&f_axis, "f_axis")?;
        let rows = vec![f_axis; n_axis.len()];
        Self::with_f_rows(n_axis, rows, values)
    }

    /// Builds a table with one cached-fraction axis per row (`f_rows[i]` for `n_axis[i]`, all of
    /// the same length, each strictly increasing); otherwise as [`QTable::new`].
    pub fn with_f_rows(
        n_axis: Vec<f64>,
        f_rows: Vec<Vec<f64>>,
        values: Vec<f64>,
    ) -> Result<Self, QTableError> {
        check_axis(&n_axis, "n_axis")?;
        if f_rows.len() != n_axis.len() {
            return Err(QTableError::FRows {
                expected: n_axis.len(),
                got: f_rows.len(),
            });
        }
        let width = f_rows.first().map_or(0, Vec::len);
        for (row, axis) in f_rows.iter().enumerate() {
            let fail = |source| QTableError::FRow {
                row,
                source: Box::new(source),
            };
            check_axis(axis, "f_axis").map_err(fail)?;
            if axis.len() != width {
                return Err(fail(QTableError::RowShape {
                    row,
                    expected: width,
                    got: axis.len(),
                }));
            }
        }
        let expected = n_axis.len() * width;
        if values.len() != expected {
            return Err(QTableError::Shape {
                expected,
                got: values.len(),
            });
        }
        if let Some(pos) = values.iter().position(|v| v.is_infinite()) {
            return Err(QTableError::InfiniteValue {
                row: pos / width,
                col: pos % width,
            });
        }
        Ok(QTable {
            n_axis,
            width,
            f_rows: f_rows.concat(),
            values,
        })
    }

    /// The prompt-length axis (strictly increasing).
    pub fn n_axis(&self) -> &[f64] {
        &self.n_axis
    }

    /// Cells per row (the length of every row's cached-fraction axis).
    pub fn f_len(&self) -> usize {
        self.width
    }

    /// Row `i`'s cached-fraction axis (strictly increasing); empty past the last row.
    pub fn f_row(&self, i: usize) -> &[f64] {
        self.f_rows
            .get(i * self.width..(i + 1) * self.width)
            .unwrap_or(&[])
    }

    /// The axis every row shares, or `None` when the rows' axes differ.
    pub fn shared_f_axis(&self) -> Option<&[f64]> {
        let first = self.f_row(0);
        (1..self.n_axis.len())
            .all(|i| self.f_row(i) == first)
            .then_some(first)
    }

    /// The measured value at grid point `(n_axis[i], f_row(i)[j])`, `None` when missing.
    pub fn value(&self, i: usize, j: usize) -> Option<f64> {
        if j >= self.width {
            return None;
        }
        self.values
            .get(i * self.width + j)
            .copied()
            .filter(|v| !v.is_nan())
    }

    #[inline(always)]
    fn at(&self, i: usize, j: usize) -> f64 {
        self.values
            .get(i * self.width + j)
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// `Q(n, f)`: linear along f within each enclosing row (on that row's own f axis), then
    /// linear along N. When both rows bracket f alike (always, for a shared axis) this is the
    /// bilinear formula, evaluated in the same order as for a rectilinear grid.
    #[inline(always)]
    pub fn lookup(&self, n: f64, f: f64) -> Result<f64, OutOfRange> {
        let (i0, i1, tn) = bracket(&self.n_axis, n).ok_or(OutOfRange::N)?;
        let (j0, j1, tf) = bracket(self.f_row(i0), f).ok_or(OutOfRange::F)?;
        let (k0, k1, tg) = if i1 == i0 {
            (j0, j1, tf)
        } else {
            bracket(self.f_row(i1), f).ok_or(OutOfRange::F)?
        };
        let (q00, q10, q01, q11) = (
            self.at(i0, j0),
            self.at(i1, k0),
            self.at(i0, j1),
            self.at(i1, k1),
        );
        if q00.is_nan() || q10.is_nan() || q01.is_nan() || q11.is_nan() {
            return Err(OutOfRange::MissingCorner);
        }
        if (j0, j1) == (k0, k1) && tf == tg {
            let low_f = q00 + tn * (q10 - q00);
            let high_f = q01 + tn * (q11 - q01);
            return Ok(low_f + tf * (high_f - low_f));
        }
        let row0 = q00 + tf * (q01 - q00);
        let row1 = q10 + tg * (q11 - q10);
        Ok(row0 + tn * (row1 - row0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> QTable {
        // N = 1000, 3000; f = 0, 0.5, 1
        QTable::new(
            vec![1000.0, 3000.0],
            vec![0.0, 0.5, 1.0],
            vec![100.0, 60.0, 20.0, 300.0, 160.0, 40.0],
        )
        .unwrap()
    }

    /// Reference bracket: a plain scan for the last grid point ≤ x.
    fn bracket_by_scan(axis: &[f64], x: f64) -> Option<(usize, usize, f64)> {
        if !(x >= axis[0] && x <= axis[axis.len() - 1]) {
            return None;
        }
        let lo = (0..axis.len()).rev().find(|&i| axis[i] <= x)?;
        if axis[lo] == x {
            return Some((lo, lo, 0.0));
        }
        Some((lo, lo + 1, (x - axis[lo]) / (axis[lo + 1] - axis[lo])))
    }

    #[test]
    fn short_and_long_axes_bracket_alike() {
        // Both search paths (linear count up to SHORT_AXIS points, bisection beyond).
        for len in [1, 2, 5, SHORT_AXIS, SHORT_AXIS + 1, 200] {
            let axis: Vec<f64> = (0..len).map(|i| (i * i) as f64 + i as f64 * 0.5).collect();
            let last = axis[len - 1];
            let mut probes = axis.clone();
            probes.extend((0..500).map(|k| -1.0 + (last + 2.0) * k as f64 / 499.0));
            probes.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY]);
            for x in probes {
                assert_eq!(
                    bracket(&axis, x),
                    bracket_by_scan(&axis, x),
                    "len {len}, x {x}"
                );
            }
        }
    }

    #[test]
    fn grid_points_are_exact() {
        let q = table();
        assert_eq!(q.lookup(1000.0, 0.0), Ok(100.0));
        assert_eq!(q.lookup(3000.0, 1.0), Ok(40.0));
        assert_eq!(q.lookup(3000.0, 0.5), Ok(160.0));
    }

    #[test]
    fn bilinear_hand_computed() {
        let q = table();
        // Along N at f = 0: halfway between 100 and 300.
        assert_eq!(q.lookup(2000.0, 0.0), Ok(200.0));
        // N = 1500 (tn = 0.25), f = 0.25 (tf = 0.5 in [0, 0.5]):
        // f=0 row: 100 + 0.25 * 200 = 150; f=0.5 row: 60 + 0.25 * 100 = 85; mid = 117.5
        assert_eq!(q.lookup(1500.0, 0.25), Ok(117.5));
        // N = 2500 (tn = 0.75), f = 0.75 (tf = 0.5 in [0.5, 1]):
        // f=0.5: 60 + 0.75*100 = 135; f=1: 20 + 0.75*20 = 35; mid = 85
        assert_eq!(q.lookup(2500.0, 0.75), Ok(85.0));
    }

    #[test]
    fn outside_is_out_of_range_never_clamped() {
        let q = table();
        assert_eq!(q.lookup(999.999, 0.0), Err(OutOfRange::N));
        assert_eq!(q.lookup(3000.001, 0.0), Err(OutOfRange::N));
        assert_eq!(q.lookup(2000.0, -1e-12), Err(OutOfRange::F));
        assert_eq!(q.lookup(2000.0, 1.0000001), Err(OutOfRange::F));
        assert_eq!(q.lookup(f64::NAN, 0.0), Err(OutOfRange::N));
        assert_eq!(q.lookup(2000.0, f64::NAN), Err(OutOfRange::F));
        assert_eq!(q.lookup(f64::INFINITY, 0.0), Err(OutOfRange::N));
    }

    #[test]
    fn missing_corner_is_out_of_range() {
        let q = QTable::new(
            vec![1000.0, 3000.0],
            vec![0.0, 0.5, 1.0],
            vec![100.0, 60.0, 20.0, 300.0, 160.0, f64::NAN],
        )
        .unwrap();
        assert_eq!(q.lookup(2000.0, 0.75), Err(OutOfRange::MissingCorner));
        assert_eq!(q.lookup(3000.0, 1.0), Err(OutOfRange::MissingCorner));
        // The other cell is complete, and the shared edge f = 0.5 reads only measured corners.
        assert_eq!(q.lookup(2000.0, 0.25), Ok(155.0));
        assert_eq!(q.lookup(2000.0, 0.5), Ok(110.0));
        assert_eq!(q.lookup(1000.0, 1.0), Ok(20.0));
    }

    /// Rows with their own f axes: each row is read on its own axis, then N interpolates.
    fn per_row() -> QTable {
        // N = 1000: f = 0, 0.875; N = 3000: f = 0, 0.9
        QTable::with_f_rows(
            vec![1000.0, 3000.0],
            vec![vec![0.0, 0.875], vec![0.0, 0.9]],
            vec![100.0, 30.0, 300.0, 50.0],
        )
        .unwrap()
    }

    #[test]
    fn per_row_axes_hand_computed() {
        let q = per_row();
        // Every measured point is returned as measured, on its own row's axis.
        assert_eq!(q.lookup(1000.0, 0.875), Ok(30.0));
        assert_eq!(q.lookup(3000.0, 0.9), Ok(50.0));
        // N = 2000 (tn = 0.5), f = 0.45: row 0 at 0.45/0.875 of the way, row 1 at 0.5.
        let row0 = 100.0 + (0.45 / 0.875) * (30.0 - 100.0);
        let row1 = 300.0 + 0.5 * (50.0 - 300.0);
        let got = q.lookup(2000.0, 0.45).unwrap();
        assert!((got - (row0 + 0.5 * (row1 - row0))).abs() < 1e-12, "{got}");
        // Above row 0's top (0.875) between the rows: outside the measured grid, never clamped.
        assert_eq!(q.lookup(2000.0, 0.89), Err(OutOfRange::F));
        // On row 1 alone 0.89 is inside.
        assert!(q.lookup(3000.0, 0.89).is_ok());
        assert_eq!(q.shared_f_axis(), None);
        assert_eq!(q.f_row(1), &[0.0, 0.9]);
    }

    #[test]
    fn shared_rows_read_bit_for_bit_as_the_rectilinear_grid() {
        let shared = table();
        let rows = QTable::with_f_rows(
            vec![1000.0, 3000.0],
            vec![vec![0.0, 0.5, 1.0]; 2],
            vec![100.0, 60.0, 20.0, 300.0, 160.0, 40.0],
        )
        .unwrap();
        assert_eq!(shared, rows);
        for k in 0..=200 {
            let (n, f) = (900.0 + 11.0 * k as f64, k as f64 / 190.0);
            assert_eq!(
                shared.lookup(n, f).map(f64::to_bits),
                rows.lookup(n, f).map(f64::to_bits)
            );
        }
    }

    #[test]
    fn per_row_json_round_trip_and_errors() {
        let q = per_row();
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(
            json,
            r#"{"n_axis":[1000.0,3000.0],"f_axis":[[0.0,0.875],[0.0,0.9]],"values":[[100.0,30.0],[300.0,50.0]]}"#
        );
        let back: QTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back, q);
        let err = serde_json::from_str::<QTable>(
            r#"{"n_axis":[1.0,2.0],"f_axis":[[0.0,0.5],[0.5,0.0]],"values":[[1.0,2.0],[3.0,4.0]]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("f_axis row 1"), "{err}");
        let err = serde_json::from_str::<QTable>(
            r#"{"n_axis":[1.0,2.0],"f_axis":[[0.0,0.5]],"values":[[1.0,2.0],[3.0,4.0]]}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("1 f_axis rows, expected one per n_axis entry (2)"),
            "{err}"
        );
        let err =
            serde_json::from_str::<QTable>(r#"{"n_axis":[1.0],"f_axis":"x","values":[[1.0]]}"#)
                .unwrap_err();
        assert!(
            err.to_string().contains("one such list per n_axis entry"),
            "{err}"
        );
    }

    #[test]
    fn single_point_axes() {
        let q = QTable::new(vec![1000.0], vec![0.0], vec![42.0]).unwrap();
        assert_eq!(q.lookup(1000.0, 0.0), Ok(42.0));
        assert_eq!(q.lookup(1000.0, 0.1), Err(OutOfRange::F));
    }

    #[test]
    fn construction_errors() {
        assert!(matches!(
            QTable::new(vec![], vec![0.0], vec![]),
            Err(QTableError::EmptyAxis { axis: "n_axis" })
        ));
        assert!(matches!(
            QTable::new(vec![1.0, 1.0], vec![0.0], vec![1.0, 2.0]),
            Err(QTableError::NotIncreasing {
                axis: "n_axis",
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            QTable::new(vec![1.0], vec![0.0, f64::NAN], vec![1.0, 2.0]),
            Err(QTableError::NonFiniteAxis {
                axis: "f_axis",
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            QTable::new(vec![1.0], vec![0.0], vec![1.0, 2.0]),
            Err(QTableError::Shape {
                expected: 1,
                got: 2
            })
        ));
        assert!(matches!(
            QTable::new(vec![1.0], vec![0.0], vec![f64::INFINITY]),
            Err(QTableError::InfiniteValue { row: 0, col: 0 })
        ));
    }

    #[test]
    fn json_round_trip_with_missing_cells() {
        let q = QTable::new(
            vec![1.0, 2.0],
            vec![0.0, 1.0],
            vec![1.0, f64::NAN, 3.0, 4.0],
        )
        .unwrap();
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(
            json,
            r#"{"n_axis":[1.0,2.0],"f_axis":[0.0,1.0],"values":[[1.0,null],[3.0,4.0]]}"#
        );
        let back: QTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back.value(0, 1), None);
        assert_eq!(back.value(1, 1), Some(4.0));
        let err = serde_json::from_str::<QTable>(
            r#"{"n_axis":[2.0,1.0],"f_axis":[0.0],"values":[[1.0],[2.0]]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("strictly increasing"), "{err}");
        let err = serde_json::from_str::<QTable>(
            r#"{"n_axis":[1.0],"f_axis":[0.0,1.0],"values":[[1.0]]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("row 0 has 1 values"), "{err}");
    }
}
