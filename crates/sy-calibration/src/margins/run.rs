//! The run of `sy-margin`: read a run's records, `fit.json` and `splits.json`, checked against
//! each other, compute both estimators' margins on the uncertainty split and write
//! `margins.json` ([`write_margins`]). The command line is `sy-margin`'s; `sy-select`'s tests
//! make a run's margins with this same run.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sy_records::{ProbePair, Split};
use sy_selector::{InputFile, Margins};

use super::error::MarginError;
use super::{FitEstimators, MARGINS_SCHEMA_VERSION, MIN_CONDITIONS, MarginsFile, compute_margins};
use crate::inputs;

/// Everything `sy-margin` needs to run.
#[derive(Debug, Clone)]
pub struct MarginOptions {
    pub records: Vec<PathBuf>,
    pub fit: PathBuf,
    pub splits: PathBuf,
    pub out: PathBuf,
    pub level: f64,
    pub skip_invalid: bool,
    /// The probe-table cache to read or write (`sy_rundir::Artifact::ProbeCache`), if any.
    pub records_cache: Option<PathBuf>,
}

/// The run's inputs, read and checked against each other: the fit, the split table, the
/// records and their provenance (the records, then fit.json, then splits.json).
struct Inputs {
    fit: FitEstimators,
    splits: sy_records::SplitTable,
    records: sy_records::ProbeTable,
    input_files: Vec<InputFile>,
}

fn load_inputs(opts: &MarginOptions) -> Result<Inputs, MarginError> {
    let fit = inputs::read_fit(&opts.fit)?;
    let splits = inputs::read_splits(&opts.splits)?;
    let records = inputs::load_records(
        &opts.records,
        opts.skip_invalid,
        opts.records_cache.as_deref(),
    )?;
    let mut input_files = records.input_files();
    inputs::check_derived_from(
        &opts.fit,
        "input_files",
        &inputs::fit_record_inputs(&opts.fit)?,
        &input_files,
    )?;
    inputs::check_split_of_fit(&opts.fit, &splits, &opts.splits)?;
    input_files.push(inputs::input_file(&opts.fit)?);
    input_files.push(inputs::input_file(&opts.splits)?);
    splits.check_covers(&records, &opts.splits)?;
    Ok(Inputs {
        fit,
        splits,
        records,
        input_files,
    })
}

/// The warnings of a computed margin: too few conditions, excluded and unmeasured pairs.
fn margin_warnings(file: &MarginsFile) -> Vec<String> {
    let unmeasured = file.pairs_unmeasured;
    let mut warnings = Vec::new();
    for (estimator, m) in file.estimators() {
        let name = estimator.as_str();
        let g = m.estimate.conditions;
        if g < MIN_CONDITIONS {
            warnings.push(format!(
                "{name}: only G = {g} conditions in the uncertainty split (< {MIN_CONDITIONS}): the 90th percentile is unreliable{}",
                if m.estimate.conformal_ms.is_none() {
                    " and the conformal bound is infinite"
                } else {
                    ""
                }
            ));
        }
        if m.estimate.pairs_excluded > 0 {
            warnings.push(format!(
                "{name}: {} pair(s) excluded: {:?}",
                m.estimate.pairs_excluded, m.excluded_by_reason
            ));
        }
    }
    if unmeasured > 0 {
        warnings.push(format!(
            "{unmeasured} pair(s) without a measured TTFT on both candidates were not used"
        ));
    }
    warnings
}

/// Computes `margins.json` and writes it atomically. Returns the file's content. `phase` is
/// told each phase as it starts (`Some(name)`) and when the computation is done (`None`), for a
/// progress display.
pub fn write_margins(
    opts: &MarginOptions,
    phase: &mut dyn FnMut(Option<&'static str>),
) -> Result<MarginsFile, MarginError> {
    if !(opts.level > 0.0 && opts.level < 1.0) {
        return Err(MarginError::Level(opts.level));
    }
    sy_rundir::check_output_path(&opts.out, "--out")?;
    phase(Some("loading records"));
    let Inputs {
        fit,
        splits,
        records,
        input_files,
    } = load_inputs(opts)?;
    phase(Some("pairing probes"));
    let condition_splits = records.condition_splits(&splits);
    let in_split: Vec<ProbePair> = records
        .pairs()
        .filter(|p| condition_splits[p.condition() as usize] == Some(Split::Uncertainty))
        .collect();
    phase(Some("computing margins"));
    let (blind, cache, unmeasured) = compute_margins(&fit, &in_split, opts.level);
    phase(None);

    let mut file = MarginsFile {
        schema_version: MARGINS_SCHEMA_VERSION,
        tool_versions: BTreeMap::from([(
            "sy-margin".to_string(),
            // Every sy crate has the workspace's version.
            env!("CARGO_PKG_VERSION").to_string(),
        )]),
        input_files,
        split_seed: splits.seed,
        split: Split::Uncertainty.as_str().to_string(),
        level: opts.level,
        pairs_in_split: in_split.len() as u64,
        pairs_unmeasured: unmeasured,
        // Set below, from `blind` and `cache`.
        delta_blind_ms: f64::NAN,
        delta_cache_ms: f64::NAN,
        blind,
        cache,
        warnings: Vec::new(),
    };
    file.warnings = margin_warnings(&file);
    for w in &file.warnings {
        tracing::warn!("{w}");
    }
    let deltas = Margins::try_from_fn(|estimator| {
        let m = &file.estimator(estimator).estimate;
        m.delta_ms.ok_or(MarginError::NoUsablePair {
            estimator: estimator.as_str(),
            pairs: in_split.len(),
            unmeasured,
            excluded: m.pairs_excluded,
        })
    })?;
    (file.delta_blind_ms, file.delta_cache_ms) = (deltas.blind, deltas.cache);
    sy_rundir::atomic_write_json(&opts.out, &file)?;
    records.save_cache();
    Ok(file)
}
