//! The generated `report.md` and its figures (drawn by `sy-report`).
//!
//! The report leads with the answer ([`headline_lines`]: chosen rule and estimator, change
//! versus Stage with its 95 % interval, stability over split seeds, caveats), then how often each
//! variant could act / changed / fell back, where the choice fails (by background generation
//! length and by prompt length), and only then the details: the r/p search, the margins, the Q
//! tables, the estimators, the commands that reproduce it and the provenance. Each stage is one
//! function below; [`write_report`] runs them in order.
//!
//! Every number in the variant tables is formatted from `selection.json`'s `replay`, which is
//! exactly what `sy-select replay --split selection` recomputes.

mod estimators;
mod format;
mod headline;
mod margins;
mod provenance;
mod q_tables;
mod thresholds;
mod variants;

use crate::evaluate::{DecodeLength, EvalPair, VariantStats};
use crate::select::{SelectError, SelectOutput, SelectionFile};
pub use crate::uncertainty::{fmt_interval, fmt_signed};
use estimators::{all_predictions, coefficients, estimators};
use format::{fmt_change, fmt_ci, fmt_threshold, pct};
pub use format::{fmt_ms, rule_text};
use headline::answer;
pub use headline::{adaptive_line, answer_lines, headline_lines, headline_lines_with};
use margins::{ecdf, margins};
pub use provenance::reproduce_commands;
use provenance::{provenance, reproduce};
use q_tables::{client_server_gap, q_tables};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use sy_report::{Bar, Bars, Heatmap, Lines, Plot, Report, Scatter, Series, VLine};
use sy_rundir::Artifact;
use sy_selector::{Estimator, ModelEstimators, Variant};
use sy_stats::{Interval, bootstrap_mean_difference_studentized, mean};
use thresholds::{search, stability};
use variants::{variants, where_it_fails};

/// Writes `report.md` and `plots/` into `dir`.
pub fn write_report(out: &SelectOutput, dir: &Path) -> Result<PathBuf, SelectError> {
    let mut r = Report::new(dir, "Calibration report")?;
    // The two sections that read every selection pair, side by side (each is parallel inside,
    // but not on every core throughout).
    let (fails, predictions) = rayon::join(|| where_it_fails(out), || all_predictions(out));
    answer(&mut r, out);
    variants(&mut r, out);
    r.markdown(&fails);
    stability(&mut r, out);
    search(&mut r, out);
    margins(&mut r, out);
    q_tables(&mut r, out);
    client_server_gap(&mut r, out);
    r.markdown(&crate::failures::markdown(&out.failures));
    estimators(&mut r, predictions);
    coefficients(&mut r, out);
    reproduce(&mut r, out);
    provenance(&mut r, out);
    Ok(r.write()?)
}

/// One selection run on synthetic records of known truth, and a report section written alone,
/// for the report's unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;
    use std::sync::OnceLock;

    use sy_calibration::margins::testkit::{true_estimators, write_fit};
    use sy_calibration::margins::{MarginOptions, write_margins};
    use sy_records::synth::{SynthSpec, generate};
    use sy_records::{SplitFractions, SplitTable, write_jsonl};
    use sy_report::Report;
    use sy_selector::Model;

    use crate::select::{DEFAULT_LIMITS, SelectOptions, SelectOutput, run};

    fn select(dir: &Path) -> SelectOutput {
        let spec = SynthSpec {
            conditions: 150,
            repeats: 3,
            ..SynthSpec::default()
        };
        let records = generate(&spec);
        let (jsonl, splits, fit, margins) = (
            dir.join("records.jsonl"),
            dir.join("splits.json"),
            dir.join("fit.json"),
            dir.join("margins.json"),
        );
        write_jsonl(&records, &jsonl).unwrap();
        SplitTable::build(&records, 11, SplitFractions::default())
            .write(&splits)
            .unwrap();
        write_fit(
            &fit,
            &true_estimators(&spec, Model::Efficient).unwrap(),
            &true_estimators(&spec, Model::Capable).unwrap(),
            &[&jsonl],
            &splits,
        )
        .unwrap();
        let margin_options = MarginOptions {
            records: vec![jsonl.clone()],
            fit: fit.clone(),
            splits: splits.clone(),
            out: margins.clone(),
            level: 0.9,
            skip_invalid: false,
            records_cache: None,
        };
        write_margins(&margin_options, &mut |_| {}).unwrap();
        run(&SelectOptions {
            records: vec![jsonl],
            fit,
            margins,
            splits,
            out: dir.join("selection.json"),
            out_dir: dir.to_path_buf(),
            limits: DEFAULT_LIMITS,
            zero_margins: false,
            skip_invalid: false,
            records_cache: None,
            show_progress: false,
            created_at: Some("2026-01-01T00:00:00Z".to_string()),
            bootstrap: sy_stats::BootstrapConfig {
                resamples: 200,
                ..sy_stats::BootstrapConfig::default()
            },
            stability_seeds: vec![1, 2],
        })
        .unwrap()
    }

    /// The run's output (made once per test binary).
    pub(crate) fn output() -> &'static SelectOutput {
        static OUT: OnceLock<(tempfile::TempDir, SelectOutput)> = OnceLock::new();
        let (_, out) = OUT.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let out = select(dir.path());
            (dir, out)
        });
        out
    }

    /// The markdown `write` adds to a report of its own.
    pub(crate) fn section(write: impl FnOnce(&mut Report)) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Report::new(dir.path(), "t").unwrap();
        write(&mut r);
        std::fs::read_to_string(r.write().unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_leads_with_the_answer_and_ends_with_the_provenance() {
        let out = testkit::output();
        let dir = tempfile::tempdir().unwrap();
        let path = write_report(out, dir.path()).unwrap();
        assert_eq!(path, dir.path().join(Artifact::Report.file_name()));
        let md = std::fs::read_to_string(&path).unwrap();
        let order = [
            "## Answer",
            "## How often each variant could act",
            "## Where it helps and where it fails",
            "## Robustness to the split",
            "## r/p search (fit split)",
            "## Margins (uncertainty split)",
            "## Q tables (no-load TTFT)",
            "## Estimators on the selection split",
            "## Reproduce",
            "## Provenance",
        ];
        let at: Vec<Option<usize>> = order.iter().map(|h| md.find(h)).collect();
        assert!(at.iter().all(Option::is_some), "{order:?} in\n{md}");
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}: out of order");
        let plots = dir.path().join(Artifact::Plots.file_name());
        let figures = std::fs::read_dir(&plots).map_or(0, Iterator::count);
        assert!(figures > 0, "no figure in {}", plots.display());
    }
}
