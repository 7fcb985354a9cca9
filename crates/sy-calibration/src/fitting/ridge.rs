//! Ridge regression as a closed-form solve on sufficient statistics, exposed as a linfa estimator.
//!
//! The model is `y = b0 + x·β` with the objective `Σ (y − b0 − x·β)² + α ‖β‖²`: the intercept is
//! not penalised. Centring removes it:
//!
//! ```text
//! Cxx = Σ x x' − n x̄ x̄'      Cxy = Σ x y − n x̄ ȳ
//! β = (Cxx + α I)⁻¹ Cxy       b0 = ȳ − x̄·β
//! ```
//!
//! Everything needed — `n, Σx, Σy, Σxx', Σxy, Σy²` — is a [`SuffStats`] that adds and subtracts,
//! so grouped cross-validation accumulates one `SuffStats` per fold once and then, for every alpha
//! and fold, trains on "total − fold" and scores the fold from its own statistics: no refit on raw
//! rows, and the cost of the whole CV curve is independent of the number of records.
//!
//! linfa-linear has no ridge and linfa-elasticnet's is an iterative solver that does not centre X,
//! so [`Ridge`] implements linfa's `Fit` (and [`FittedRidge`] its `PredictInplace`, hence
//! `Predict`) over `linfa::Dataset` itself.

use linfa::DatasetBase;
use linfa::dataset::AsSingleTargets;
use linfa::traits::{Fit, PredictInplace};
use ndarray::{Array1, ArrayBase, Data, Ix2};

/// Errors of the ridge solve.
#[derive(Debug, thiserror::Error)]
pub enum RidgeError {
    #[error("ridge needs at least one row")]
    Empty,
    #[error("alpha must be finite and ≥ 0, got {0}")]
    BadAlpha(f64),
    #[error("the ridge system is singular (alpha = {alpha}); add rows or use alpha > 0")]
    Singular { alpha: f64 },
    #[error("{rows} rows but {targets} targets")]
    Shape { rows: usize, targets: usize },
    #[error("non-finite value in row {row}")]
    NonFinite { row: usize },
    #[error(transparent)]
    Linfa(#[from] linfa::Error),
}

/// Sufficient statistics of `p` features and a target over some rows.
#[derive(Debug, Clone, PartialEq)]
pub struct SuffStats {
    pub p: usize,
    pub n: f64,
    pub sx: Vec<f64>,
    pub sy: f64,
    /// Row-major p × p.
    pub sxx: Vec<f64>,
    pub sxy: Vec<f64>,
    pub syy: f64,
}

impl SuffStats {
    pub fn new(p: usize) -> Self {
        SuffStats {
            p,
            n: 0.0,
            sx: vec![0.0; p],
            sy: 0.0,
            sxx: vec![0.0; p * p],
            sxy: vec![0.0; p],
            syy: 0.0,
        }
    }

    /// Adds one row (no allocation).
    #[inline]
    pub fn push(&mut self, x: &[f64], y: f64) {
        let p = self.p;
        self.n += 1.0;
        self.sy += y;
        self.syy += y * y;
        for a in 0..p {
            let xa = x[a];
            self.sx[a] += xa;
            self.sxy[a] += xa * y;
            let row = &mut self.sxx[a * p..(a + 1) * p];
            for (b, cell) in row.iter_mut().enumerate() {
                *cell += xa * x[b];
            }
        }
    }

    /// `self += other`.
    pub fn add(&mut self, other: &SuffStats) {
        self.n += other.n;
        self.sy += other.sy;
        self.syy += other.syy;
        for (a, b) in self.sx.iter_mut().zip(&other.sx) {
            *a += b;
        }
        for (a, b) in self.sxy.iter_mut().zip(&other.sxy) {
            *a += b;
        }
        for (a, b) in self.sxx.iter_mut().zip(&other.sxx) {
            *a += b;
        }
    }

    /// The length of [`SuffStats::pack_into`]'s row for `p` features.
    pub fn packed_len(p: usize) -> usize {
        2 + 2 * p + p * (p + 1) / 2
    }

    /// Appends what [`solve`] reads as one row of numbers: n, sy, sx, sxy and the upper triangle
    /// of sxx, row by row (sxx is symmetric bit for bit: [`SuffStats::push`] adds the same
    /// products to both halves; `syy` is left out). Summing packed rows component by component
    /// is [`SuffStats::add`] without its pointer chasing, and gives the same sums in the same
    /// order.
    pub fn pack_into(&self, out: &mut Vec<f64>) {
        let p = self.p;
        out.extend([self.n, self.sy]);
        out.extend(&self.sx);
        out.extend(&self.sxy);
        for a in 0..p {
            out.extend(self.sxx.get(a * p + a..(a + 1) * p).unwrap_or(&[]));
        }
    }

    /// The statistics of a packed row ([`SuffStats::pack_into`]) of `p` features, sxx mirrored
    /// from its upper triangle; `syy`, which the row does not hold, is NaN (nothing that reads
    /// a packed row's statistics may use it).
    pub fn unpack(p: usize, row: &[f64]) -> SuffStats {
        let part = |from: usize, len: usize| row.get(from..from + len).unwrap_or(&[]).to_vec();
        let upper = row.get(2 + 2 * p..).unwrap_or(&[]);
        let mut sxx = vec![0.0; p * p];
        let mut next = upper.iter();
        for a in 0..p {
            for b in a..p {
                let v = next.next().copied().unwrap_or(0.0);
                sxx[a * p + b] = v;
                sxx[b * p + a] = v;
            }
        }
        SuffStats {
            p,
            n: row.first().copied().unwrap_or(0.0),
            sy: row.get(1).copied().unwrap_or(0.0),
            syy: f64::NAN,
            sx: part(2, p),
            sxy: part(2 + p, p),
            sxx,
        }
    }

    /// `self − other` (other ⊆ self).
    pub fn minus(&self, other: &SuffStats) -> SuffStats {
        let mut out = self.clone();
        out.n -= other.n;
        out.sy -= other.sy;
        out.syy -= other.syy;
        for (a, b) in out.sx.iter_mut().zip(&other.sx) {
            *a -= b;
        }
        for (a, b) in out.sxy.iter_mut().zip(&other.sxy) {
            *a -= b;
        }
        for (a, b) in out.sxx.iter_mut().zip(&other.sxx) {
            *a -= b;
        }
        out
    }

    /// Sum of squared errors of `intercept + x·coef` over these rows, from the statistics alone.
    pub fn sse(&self, intercept: f64, coef: &[f64]) -> f64 {
        let p = self.p;
        let mut bsxy = 0.0;
        let mut bsx = 0.0;
        let mut bsxxb = 0.0;
        for a in 0..p {
            bsxy += coef[a] * self.sxy[a];
            bsx += coef[a] * self.sx[a];
            for b in 0..p {
                bsxxb += coef[a] * self.sxx[a * p + b] * coef[b];
            }
        }
        let sse = self.syy - 2.0 * intercept * self.sy - 2.0 * bsxy
            + self.n * intercept * intercept
            + 2.0 * intercept * bsx
            + bsxxb;
        sse.max(0.0)
    }

    /// Mean squared error of a fit on these rows (NaN when empty).
    pub fn mse(&self, intercept: f64, coef: &[f64]) -> f64 {
        if self.n == 0.0 {
            return f64::NAN;
        }
        self.sse(intercept, coef) / self.n
    }

    /// Total sum of squares of the target around its mean.
    pub fn tss(&self) -> f64 {
        if self.n == 0.0 {
            return 0.0;
        }
        (self.syy - self.sy * self.sy / self.n).max(0.0)
    }
}

/// A ridge solution: `intercept + x·coef`.
#[derive(Debug, Clone, PartialEq)]
pub struct RidgeSolution {
    pub intercept: f64,
    pub coef: Vec<f64>,
}

/// Solves the ridge with an unpenalised intercept from sufficient statistics.
pub fn solve(stats: &SuffStats, alpha: f64) -> Result<RidgeSolution, RidgeError> {
    if !(alpha.is_finite() && alpha >= 0.0) {
        return Err(RidgeError::BadAlpha(alpha));
    }
    if stats.n <= 0.0 {
        return Err(RidgeError::Empty);
    }
    let p = stats.p;
    let n = stats.n;
    let xbar: Vec<f64> = stats.sx.iter().map(|v| v / n).collect();
    let ybar = stats.sy / n;
    // Centred normal equations (Cxx + αI) β = Cxy.
    let mut a = vec![0.0; p * p];
    let mut b = vec![0.0; p];
    for i in 0..p {
        for j in 0..p {
            a[i * p + j] = stats.sxx[i * p + j] - n * xbar[i] * xbar[j];
        }
        a[i * p + i] += alpha;
        b[i] = stats.sxy[i] - n * xbar[i] * ybar;
    }
    let coef = gauss_solve(&mut a, &mut b, p).ok_or(RidgeError::Singular { alpha })?;
    let intercept = ybar - xbar.iter().zip(&coef).map(|(x, c)| x * c).sum::<f64>();
    Ok(RidgeSolution { intercept, coef })
}

/// Gaussian elimination with partial pivoting; `None` when (numerically) singular.
fn gauss_solve(a: &mut [f64], b: &mut [f64], p: usize) -> Option<Vec<f64>> {
    let scale = a
        .iter()
        .fold(0.0_f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..p {
        let pivot =
            (col..p).max_by(|&i, &j| a[i * p + col].abs().total_cmp(&a[j * p + col].abs()))?;
        if a[pivot * p + col].abs() <= scale * 1e-13 {
            return None;
        }
        if pivot != col {
            for k in 0..p {
                a.swap(col * p + k, pivot * p + k);
            }
            b.swap(col, pivot);
        }
        for row in col + 1..p {
            let factor = a[row * p + col] / a[col * p + col];
            if factor == 0.0 {
                continue;
            }
            for k in col..p {
                a[row * p + k] -= factor * a[col * p + k];
            }
            b[row] -= factor * b[col];
        }
    }
    let mut x = vec![0.0; p];
    for row in (0..p).rev() {
        let mut s = b[row];
        for k in row + 1..p {
            s -= a[row * p + k] * x[k];
        }
        x[row] = s / a[row * p + row];
    }
    if x.iter().all(|v| v.is_finite()) {
        Some(x)
    } else {
        None
    }
}

/// The ridge estimator (hyper-parameter `alpha`); fit it with linfa's [`Fit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ridge {
    pub alpha: f64,
}

impl Ridge {
    pub fn new(alpha: f64) -> Self {
        Ridge { alpha }
    }
}

/// A fitted ridge model; predict with linfa's `Predict`.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedRidge {
    pub alpha: f64,
    pub intercept: f64,
    pub coef: Array1<f64>,
}

impl<D, T> Fit<ArrayBase<D, Ix2>, T, RidgeError> for Ridge
where
    D: Data<Elem = f64>,
    T: AsSingleTargets<Elem = f64>,
{
    type Object = FittedRidge;

    fn fit(&self, dataset: &DatasetBase<ArrayBase<D, Ix2>, T>) -> Result<FittedRidge, RidgeError> {
        let x = dataset.records();
        let y = dataset.as_single_targets();
        if x.nrows() != y.len() {
            return Err(RidgeError::Shape {
                rows: x.nrows(),
                targets: y.len(),
            });
        }
        let mut stats = SuffStats::new(x.ncols());
        let mut row_buf = vec![0.0; x.ncols()];
        for (i, (row, &t)) in x.rows().into_iter().zip(y.iter()).enumerate() {
            for (slot, v) in row_buf.iter_mut().zip(row.iter()) {
                *slot = *v;
            }
            if !t.is_finite() || row_buf.iter().any(|v| !v.is_finite()) {
                return Err(RidgeError::NonFinite { row: i });
            }
            stats.push(&row_buf, t);
        }
        let sol = solve(&stats, self.alpha)?;
        Ok(FittedRidge {
            alpha: self.alpha,
            intercept: sol.intercept,
            coef: Array1::from(sol.coef),
        })
    }
}

impl<D: Data<Elem = f64>> PredictInplace<ArrayBase<D, Ix2>, Array1<f64>> for FittedRidge {
    fn predict_inplace(&self, x: &ArrayBase<D, Ix2>, y: &mut Array1<f64>) {
        for (out, row) in y.iter_mut().zip(x.rows()) {
            *out = self.intercept + row.dot(&self.coef);
        }
    }

    fn default_target(&self, x: &ArrayBase<D, Ix2>) -> Array1<f64> {
        Array1::zeros(x.nrows())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linfa::traits::Predict;
    use ndarray::{Array2, array};
    use rand::{RngExt, SeedableRng};

    #[test]
    fn packed_sums_equal_add_bit_for_bit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let stats: Vec<SuffStats> = (0..50)
            .map(|_| {
                let mut s = SuffStats::new(3);
                for _ in 0..rng.random_range(1..20) {
                    let x = [rng.random::<f64>(), rng.random::<f64>() * 1e3, rng.random()];
                    s.push(&x, rng.random::<f64>() * 100.0);
                }
                s
            })
            .collect();
        let width = SuffStats::packed_len(3);
        let mut packed = Vec::new();
        for s in &stats {
            s.pack_into(&mut packed);
        }
        assert_eq!(packed.len(), stats.len() * width);
        let (mut added, mut summed) = (SuffStats::new(3), vec![0.0; width]);
        for (i, s) in stats.iter().enumerate().rev() {
            added.add(s);
            for (t, v) in summed.iter_mut().zip(&packed[i * width..(i + 1) * width]) {
                *t += v;
            }
        }
        let back = SuffStats::unpack(3, &summed);
        assert_eq!(back.n.to_bits(), added.n.to_bits());
        for (a, b) in [
            (&back.sx, &added.sx),
            (&back.sxy, &added.sxy),
            (&back.sxx, &added.sxx),
        ] {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
        assert_eq!(back.sy.to_bits(), added.sy.to_bits());
        assert!(back.syy.is_nan());
        let (a, b) = (solve(&back, 0.5).unwrap(), solve(&added, 0.5).unwrap());
        assert_eq!(a.intercept.to_bits(), b.intercept.to_bits());
        assert!(
            a.coef
                .iter()
                .zip(&b.coef)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }

    fn data(rows: usize, seed: u64) -> (Array2<f64>, Array1<f64>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let x = Array2::from_shape_fn((rows, 3), |_| rng.random_range(-2.0..2.0));
        let y = x
            .rows()
            .into_iter()
            .map(|r| 5.0 + 2.0 * r[0] - 3.0 * r[1] + 0.5 * r[2] + rng.random_range(-0.1..0.1))
            .collect();
        (x, y)
    }

    /// Plain normal equations on raw rows: [1 X]'[1 X] + diag(0, α, α, α), solved independently.
    fn normal_equations(x: &Array2<f64>, y: &Array1<f64>, alpha: f64) -> Vec<f64> {
        let (n, p) = x.dim();
        let mut a = Array2::<f64>::ones((n, p + 1));
        a.slice_mut(ndarray::s![.., 1..]).assign(x);
        let mut m = a.t().dot(&a);
        for i in 1..=p {
            m[[i, i]] += alpha;
        }
        let v = a.t().dot(y);
        let mut flat: Vec<f64> = m.iter().copied().collect();
        let mut rhs = v.to_vec();
        gauss_solve(&mut flat, &mut rhs, p + 1).unwrap()
    }

    #[test]
    fn matches_closed_form_normal_equations() {
        for (rows, seed) in [(12, 1), (40, 2), (200, 3)] {
            let (x, y) = data(rows, seed);
            for alpha in [0.0, 1e-3, 0.7, 10.0, 1e4] {
                let fitted = Ridge::new(alpha)
                    .fit(&DatasetBase::new(x.clone(), y.clone()))
                    .unwrap();
                let w = normal_equations(&x, &y, alpha);
                assert!(
                    (fitted.intercept - w[0]).abs() < 1e-9,
                    "{alpha} {} {}",
                    fitted.intercept,
                    w[0]
                );
                for j in 0..3 {
                    assert!((fitted.coef[j] - w[j + 1]).abs() < 1e-9, "{alpha} coef {j}");
                }
            }
        }
    }

    #[test]
    fn hand_computed_one_feature() {
        // x = 0,1,2,3; y = 1,3,5,7 → Cxx = 5, Cxy = 10; β = 10/(5+α), b0 = 4 − 1.5 β.
        let x = array![[0.0], [1.0], [2.0], [3.0]];
        let y = array![1.0, 3.0, 5.0, 7.0];
        let f = Ridge::new(5.0)
            .fit(&DatasetBase::new(x.clone(), y))
            .unwrap();
        assert!((f.coef[0] - 1.0).abs() < 1e-12);
        assert!((f.intercept - 2.5).abs() < 1e-12);
        let pred: Array1<f64> = f.predict(&x);
        assert!((pred[3] - 5.5).abs() < 1e-12);
    }

    #[test]
    fn stats_mse_matches_raw_residuals_and_subtracts() {
        let (x, y) = data(100, 9);
        let mut all = SuffStats::new(3);
        let mut part = SuffStats::new(3);
        for (i, (r, t)) in x.rows().into_iter().zip(y.iter()).enumerate() {
            all.push(&r.to_vec(), *t);
            if i < 30 {
                part.push(&r.to_vec(), *t);
            }
        }
        let coef = [1.0, -1.0, 0.5];
        let raw: f64 = x
            .rows()
            .into_iter()
            .zip(y.iter())
            .take(30)
            .map(|(r, t)| (t - 2.0 - r[0] * coef[0] - r[1] * coef[1] - r[2] * coef[2]).powi(2))
            .sum::<f64>()
            / 30.0;
        assert!((part.mse(2.0, &coef) - raw).abs() < 1e-9 * raw.max(1.0));
        let rest = all.minus(&part);
        assert_eq!(rest.n, 70.0);
        let mut back = rest.clone();
        back.add(&part);
        assert!((back.syy - all.syy).abs() < 1e-9 * all.syy);
    }

    #[test]
    fn singular_without_alpha_and_bad_alpha() {
        let x = array![[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]];
        let y = array![1.0, 2.0, 3.0];
        let ds = DatasetBase::new(x, y);
        assert!(matches!(
            Ridge::new(0.0).fit(&ds),
            Err(RidgeError::Singular { .. })
        ));
        assert!(Ridge::new(1.0).fit(&ds).is_ok());
        assert!(matches!(
            Ridge::new(-1.0).fit(&ds),
            Err(RidgeError::BadAlpha(_))
        ));
    }
}
