//! The selection pipeline: search r/p on the fit split, evaluate the five variants on the
//! selection split, choose one threshold rule and one estimator, freeze the bundle.

use std::collections::BTreeMap;
use std::path::PathBuf;
use sy_rundir::Artifact;

use sy_calibration::inputs::{self, FitEstimators};
use sy_calibration::margins::MarginsFile;
use sy_records::Split;
use sy_selector::{
    Bundle, GuardLimits, InputFile, Margins, Provenance, RuleParams, Thresholds, TtftGround,
    Variant,
};

pub use crate::choice::Choice;
use crate::choice::{ChoiceError, choose_on_probes};
pub use crate::error::SelectError;
use crate::evaluate::{AllPairs, Detail, EvalPair, Replay, SelectedTtfts};
use crate::search_view::SearchView;
use crate::stability::{SeedRuns, Stability, StabilitySettings, run_seeds};
use crate::uncertainty::{
    Comparisons, Headline, Uncertainty, coefficient_intervals, headline, selection_adjusted,
    uncertainty,
};
use sy_calibration::fitting::ConditionSumsTable;
/// `selection.json`'s document, its read and its version: the run directory's.
pub use sy_rundir::artifact::selection::{
    SELECTION_SCHEMA_VERSION, SelectionFile, SelectionFileError,
};
use sy_stats::BootstrapConfig;

/// Default guard limits (the same for every variant; override with flags).
pub const DEFAULT_LIMITS: GuardLimits = GuardLimits::DEFAULT;

/// Columns of the r/p landscape kept in `selection.json`.
pub const LANDSCAPE_P_COLUMNS: usize = 40;

/// Everything `sy-select` (selection) needs.
#[derive(Debug, Clone)]
pub struct SelectOptions {
    pub records: Vec<PathBuf>,
    pub fit: PathBuf,
    pub margins: PathBuf,
    pub splits: PathBuf,
    /// selection.json.
    pub out: PathBuf,
    /// Directory for bundle.json, bundles/ (and the report).
    pub out_dir: PathBuf,
    pub limits: GuardLimits,
    /// Compare with zero margins (development check), instead of margins.json's.
    pub zero_margins: bool,
    pub skip_invalid: bool,
    /// The probe-table cache to read (`sy_rundir::Artifact::ProbeCache`), if any. sy-select never
    /// writes one: it is the last tool to read the records, and it drops them early. (Without a
    /// usable cache, a table read from Parquet records is still built in a staged cache file,
    /// which is removed when the table is dropped: see `sy_records::ProbeTable::load_cached`.)
    pub records_cache: Option<PathBuf>,
    pub show_progress: bool,
    /// Creation time for the provenance (RFC 3339); `None` = now.
    pub created_at: Option<String>,
    /// Resamples, level and seed of the bootstrap intervals.
    pub bootstrap: BootstrapConfig,
    /// Split seeds to repeat the whole calibration with (empty = no stability check).
    pub stability_seeds: Vec<u64>,
}

/// What the pipeline produced, for the caller (report, summary).
#[derive(Debug)]
pub struct SelectOutput {
    pub selection: SelectionFile,
    pub bundle: Bundle,
    pub fit: FitEstimators,
    pub margins: MarginsFile,
    /// fit.json as written by sy-fit (Q-table cells, R², coefficient intervals); `None` for a
    /// minimal fit file holding only the estimators.
    pub fit_file: Option<sy_rundir::artifact::fit::FitFile>,
    /// Selection-split pairs (for the report's plots).
    pub selection_pairs: Vec<EvalPair>,
    /// Each variant's selected TTFT of every selection-split pair, in `selection_pairs` order,
    /// as the frozen bundle's replay decided them (`SelectionFile::replay`).
    pub selected_ttfts: SelectedTtfts,
    /// The options the run was made with (for the report's reproduce commands).
    pub options: SelectOptions,
    /// The client − server TTFT gap per phase and model over every record read.
    pub gap: Vec<crate::gap::GapRow>,
    /// Failed records per model and condition over every record read.
    pub failures: crate::failures::Failures,
    /// An adaptive run's decision: the stop's statistic recomputed from the records and checked
    /// against `adaptive.json` (`None` for a fixed plan; not part of `selection.json`).
    pub adaptive:
        Option<Result<crate::adaptive::AdaptiveAnswer, crate::adaptive::AdaptiveAnswerError>>,
}

/// The settings of the calibration repeated over `opts.stability_seeds` (those of this run),
/// `None` when there are no stability seeds.
fn stability_settings(opts: &SelectOptions, inputs: &Inputs) -> Option<StabilitySettings> {
    if opts.stability_seeds.is_empty() {
        return None;
    }
    let fit_file = inputs.fit_file.as_ref();
    // Seeds other than the run's own: its split is the run itself.
    let seeds: Vec<u64> = (opts.stability_seeds.iter())
        .copied()
        .filter(|&s| s != inputs.splits.seed)
        .collect();
    if seeds.is_empty() {
        return None;
    }
    Some(StabilitySettings {
        seeds,
        fractions: inputs.splits.fractions,
        folds: fit_file.map_or(sy_calibration::fitting::FitConfig::default().folds, |f| {
            f.settings.folds
        }),
        alpha_grid: fit_file.map_or_else(sy_calibration::fitting::fit::default_alpha_grid, |f| {
            f.settings.alpha_grid.clone()
        }),
        margin_level: inputs.margins_file.level,
        limits: opts.limits,
    })
}

/// What the bundle's provenance records about how sure the choice is: the headline intervals,
/// the margins' intervals and the stability counts.
fn bundle_evidence(h: &Headline, u: &Uncertainty, s: Option<&Stability>) -> serde_json::Value {
    serde_json::json!({
        "bootstrap": u.bootstrap,
        "selection_conditions": u.selection_conditions,
        "mean_change_vs_stage_ms": h.mean_change_vs_stage_ms,
        "p90_change_vs_stage_ms": h.p90_change_vs_stage_ms,
        "distinguishable_from_stage": h.distinguishable_from_stage,
        "margins_ms": u.margins,
        "coefficients": u.coefficients,
        "stability": s.map(|s| serde_json::json!({
            "seeds": s.seeds,
            "bundle_variant_counts": s.bundle_variant_counts,
            "chosen_share": s.chosen_share,
            "stable": s.stable,
        })),
    })
}

/// The provenance chain: fit.json was fitted on these records, and margins.json was computed
/// from these records, this fit.json and this splits.json (`margins.json` lists them in
/// `input_files`: the records, then fit.json, then splits.json).
fn check_chain(
    opts: &SelectOptions,
    margins: &MarginsFile,
    records: &[InputFile],
) -> Result<(), SelectError> {
    inputs::check_derived_from(
        &opts.fit,
        "input_files",
        &inputs::fit_record_inputs(&opts.fit)?,
        records,
    )?;
    let listed = &margins.input_files;
    if listed.len() < 3 {
        return Err(SelectError::MarginsInputs {
            path: opts.margins.clone(),
            listed: listed.len(),
        });
    }
    let (rec, tail) = listed.split_at(listed.len() - 2);
    for (i, (path, flag)) in [(&opts.fit, "fit"), (&opts.splits, "splits")]
        .into_iter()
        .enumerate()
    {
        let given = inputs::input_file(path)?;
        inputs::check_derived_from(
            &opts.margins,
            &format!("input_files ({flag})"),
            std::slice::from_ref(&tail[i]),
            std::slice::from_ref(&given),
        )?;
    }
    Ok(inputs::check_derived_from(
        &opts.margins,
        "input_files (records)",
        rec,
        records,
    )?)
}

/// Refuses, before anything is read, an output path that cannot be written.
fn check_outputs(opts: &SelectOptions) -> Result<(), SelectError> {
    sy_cli::check_output_path(&opts.out, "--out")?;
    for name in [Artifact::Bundle.file_name(), Artifact::Report.file_name()] {
        sy_cli::check_output_path(&opts.out_dir.join(name), "--out (directory)")?;
    }
    for v in Variant::ALL {
        let rel = format!("{}/{}.json", Artifact::Bundles.file_name(), v.as_str());
        sy_cli::check_output_path(&opts.out_dir.join(rel), "--out (directory)")?;
    }
    Ok(())
}

/// The calibration inputs, read and checked against each other.
struct Inputs {
    fit: FitEstimators,
    /// The full fit.json (Q-table cells, CV settings) when sy-fit wrote it; a minimal file with
    /// only the estimators (as tests write) is enough to select.
    fit_file: Option<sy_rundir::artifact::fit::FitFile>,
    margins_file: MarginsFile,
    splits: sy_records::SplitTable,
    /// Provenance: the records, then fit.json, margins.json and splits.json.
    input_files: Vec<InputFile>,
}

/// Reads every input and checks the provenance chain, the split coverage and the split seed.
fn load_inputs(opts: &SelectOptions) -> Result<(Inputs, sy_records::ProbeTable), SelectError> {
    let fit = inputs::read_fit(&opts.fit)?;
    let fit_file = sy_rundir::artifact::fit::FitFile::read(&opts.fit).ok();
    let margins_file = MarginsFile::read(&opts.margins)?;
    let splits = inputs::read_splits(&opts.splits)?;
    let loaded = inputs::load_records(
        &opts.records,
        opts.skip_invalid,
        opts.records_cache.as_deref(),
    )?;
    let mut input_files = loaded.input_files();
    check_chain(opts, &margins_file, &input_files)?;
    for p in [&opts.fit, &opts.margins, &opts.splits] {
        input_files.push(inputs::input_file(p)?);
    }
    splits.check_covers(&loaded, &opts.splits)?;
    if margins_file.split_seed != splits.seed {
        return Err(SelectError::SplitSeed {
            margins: opts.margins.clone(),
            margins_seed: margins_file.split_seed,
            splits: opts.splits.clone(),
            splits_seed: splits.seed,
        });
    }
    let inputs = Inputs {
        fit,
        fit_file,
        margins_file,
        splits,
        input_files,
    };
    Ok((inputs, loaded))
}

/// The measured pairs of the selection split, how many the fit split has (its search reads
/// them through the [`SearchView`]), and how many of each lacked a TTFT.
struct SplitPairs<'a> {
    fit_unmeasured: u64,
    selection: Vec<&'a EvalPair>,
    selection_unmeasured: u64,
}

fn split_pairs<'a>(
    all: &'a AllPairs,
    condition_splits: &[Option<Split>],
) -> Result<SplitPairs<'a>, SelectError> {
    let (fit, fit_unmeasured) = all.count_split(condition_splits, Split::Fit);
    let (selection, selection_unmeasured) = all.of_split(condition_splits, Split::Selection);
    if fit == 0 {
        return Err(SelectError::NoFitPairs);
    }
    if selection.is_empty() {
        return Err(SelectError::NoSelectionPairs);
    }
    Ok(SplitPairs {
        fit_unmeasured,
        selection,
        selection_unmeasured,
    })
}

/// The rule's parameters before the search: the fitted estimators, the margins (zero with
/// `--zero-margins`, with a warning) and the guard limits.
fn base_params(
    opts: &SelectOptions,
    inputs: &Inputs,
    warnings: &mut Vec<String>,
) -> Result<RuleParams, SelectError> {
    let margins = if opts.zero_margins {
        warnings.push("--zero-margins: TTFT variants compared with zero margins".to_string());
        Margins {
            blind: 0.0,
            cache: 0.0,
        }
    } else {
        Margins {
            blind: inputs.margins_file.delta_blind_ms,
            cache: inputs.margins_file.delta_cache_ms,
        }
    };
    let base = RuleParams {
        efficient: inputs.fit.efficient.clone(),
        capable: inputs.fit.capable.clone(),
        thresholds: Thresholds::default(),
        margins,
        limits: opts.limits,
    };
    base.validate().map_err(SelectError::Params)?;
    Ok(base)
}

fn provenance(
    opts: &SelectOptions,
    inputs: &Inputs,
    headline: &Headline,
    uncertainty: &Uncertainty,
    stability: Option<&Stability>,
) -> Provenance {
    let version = env!("CARGO_PKG_VERSION").to_string();
    let mut tool_versions = BTreeMap::from([
        ("sy-select".to_string(), version.clone()),
        ("sy-selector".to_string(), version),
    ]);
    tool_versions.extend(inputs.margins_file.tool_versions.clone());
    Provenance {
        tool_versions,
        input_files: inputs.input_files.clone(),
        split_seed: inputs.splits.seed,
        created_at: opts
            .created_at
            .clone()
            .unwrap_or_else(sy_rundir::now_rfc3339),
        uncertainty: Some(bundle_evidence(headline, uncertainty, stability)),
    }
}

/// The frozen bundles: `bundle.json` (the chosen variant) and one per variant in `bundles/`,
/// staged as outputs, with their content hashes by relative path.
struct Frozen {
    bundle: Bundle,
    outputs: Vec<(PathBuf, Vec<u8>)>,
    hashes: BTreeMap<String, String>,
}

fn freeze_bundles(
    opts: &SelectOptions,
    params: &RuleParams,
    provenance: &Provenance,
    chosen: Variant,
) -> Result<Frozen, SelectError> {
    let freeze = |variant: Variant| {
        Bundle::freeze(variant, params.clone(), provenance.clone()).map_err(SelectError::Freeze)
    };
    let bundle_bytes = |b: &Bundle| -> Result<Vec<u8>, SelectError> {
        let mut text = b.to_json_pretty().map_err(SelectError::SerialiseBundle)?;
        text.push('\n');
        Ok(text.into_bytes())
    };
    let bundle = freeze(chosen)?;
    let mut outputs = Vec::new();
    let mut hashes = BTreeMap::new();
    for v in Variant::ALL {
        let b = freeze(v)?;
        let rel = format!("{}/{}.json", Artifact::Bundles.file_name(), v.as_str());
        outputs.push((opts.out_dir.join(&rel), bundle_bytes(&b)?));
        hashes.insert(rel, b.content_hash.clone());
    }
    outputs.push((
        opts.out_dir.join(Artifact::Bundle.file_name()),
        bundle_bytes(&bundle)?,
    ));
    hashes.insert(
        Artifact::Bundle.file_name().to_string(),
        bundle.content_hash.clone(),
    );
    Ok(Frozen {
        bundle,
        outputs,
        hashes,
    })
}

/// This run's calibration on its own split: the search, the choice, the frozen parameters'
/// replay and their bootstrap intervals.
struct Calibrated<'a> {
    pairs: SplitPairs<'a>,
    choices: crate::choice::Choices,
    replay: Replay,
    /// What `replay` selected (see [`SelectOutput::selected_ttfts`]).
    selected: SelectedTtfts,
    uncertainty: Uncertainty,
    warnings: Vec<String>,
}

impl Calibrated<'_> {
    /// (bundle variant, threshold rule, estimator).
    fn chosen(&self) -> (Variant, Variant, Variant) {
        (
            self.choices.bundle_choice.variant,
            self.choices.threshold_rule.variant,
            self.choices.estimator.variant,
        )
    }
}

fn calibrate<'a>(
    opts: &SelectOptions,
    inputs: &Inputs,
    (all, view, condition_splits): (&'a AllPairs, &SearchView, &[Option<Split>]),
    phases: &mut sy_cli::Phases,
) -> Result<Calibrated<'a>, SelectError> {
    let pairs = split_pairs(all, condition_splits)?;
    let mut warnings = Vec::new();
    let base = base_params(opts, inputs, &mut warnings)?;
    // The r/p search on the fit split, the variants on the selection split, the choice.
    phases.start("searching r and p, evaluating variants");
    let (probes, fit_keep) = view
        .of_split(condition_splits, Split::Fit)
        .map_err(ChoiceError::Search)?;
    let mut choices = choose_on_probes(
        &base,
        &probes.subset(&fit_keep),
        &pairs.selection,
        pairs.selection_unmeasured,
        LANDSCAPE_P_COLUMNS,
        Detail::Full,
    )?;
    // The headline's interval adjusted for the choice among the candidates, from what each
    // candidate selected (taken by the frozen replay below).
    let adjusted = selection_adjusted(
        &choices.candidate_selected,
        &pairs.selection,
        choices.bundle_choice.variant,
        &opts.bootstrap,
    );
    let (replay, selected) = choices.frozen_replay(&pairs.selection, pairs.selection_unmeasured);
    phases.start("bootstrapping intervals");
    let mut uncertainty = uncertainty(
        &selected,
        &pairs.selection,
        &inputs.margins_file,
        &opts.bootstrap,
    );
    uncertainty.coefficients = coefficient_intervals(inputs.fit_file.as_ref());
    uncertainty.selection_adjusted = Some(adjusted);
    Ok(Calibrated {
        pairs,
        choices,
        replay,
        selected,
        uncertainty,
        warnings,
    })
}

/// [`calibrate`], with the calibration over every split seed (which does not depend on this
/// run's choice) on threads of its own meanwhile.
fn calibrate_with_seeds<'a>(
    opts: &SelectOptions,
    inputs: &Inputs,
    (all, view, condition_splits): (&'a AllPairs, &SearchView, &[Option<Split>]),
    seeds: Option<(&ConditionSumsTable, &StabilitySettings)>,
    phases: &mut sy_cli::Phases,
) -> Result<(Calibrated<'a>, Option<Stability>), SelectError> {
    std::thread::scope(|scope| {
        let running = seeds.map(|(sums, settings)| {
            (
                settings,
                scope.spawn(move || run_seeds(sums, (all, view), settings)),
            )
        });
        // On an error the scope still waits for the seeds: their threads borrow the pairs.
        let calibrated = calibrate(opts, inputs, (all, view, condition_splits), phases)?;
        if running.is_some() {
            phases.start("finishing the calibration over split seeds");
        }
        let stability = running.map(|(settings, handle)| {
            let runs = handle
                .join()
                .unwrap_or_else(|_| SeedRuns::panicked(settings));
            runs.summarise(settings, calibrated.chosen().0)
        });
        Ok((calibrated, stability))
    })
}

/// The ground every pair's TTFT turns are settled under (`sy_selector::TtftGround`): the run's
/// limits and the fit's Q tables, which every split seed's fit shares (they are built from the
/// Q-grid records, not from a split).
fn ttft_ground(opts: &SelectOptions, inputs: &Inputs) -> TtftGround {
    let (e, c) = (&inputs.fit.efficient.q, &inputs.fit.capable.q);
    TtftGround::new(opts.limits, e.clone(), c.clone())
}

/// A scoped thread's result; its panic goes on in this thread.
fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs the selection pipeline and writes selection.json, bundle.json and bundles/*.json (all
/// or none), after checking every output path and the provenance chain of its inputs.
pub fn run(opts: &SelectOptions) -> Result<SelectOutput, SelectError> {
    check_outputs(opts)?;
    let mut phases = sy_cli::Phases::new(opts.show_progress);
    phases.start("loading inputs");
    let (inputs, records) = load_inputs(opts)?;
    phases.start(
        "pairing probes, settling their TTFT turns, summing conditions for the stability seeds",
    );
    let settings = stability_settings(opts, &inputs);
    // The conditions' splits and the client-server gaps on threads of their own while the
    // probes are paired; then the seeds' per-condition sums, each paired row's features and Q
    // baselines taken from its settled pair.
    let (all, (seed_inputs, condition_splits, (gap, failures))) = std::thread::scope(|scope| {
        let splits = scope.spawn(|| records.condition_splits(&inputs.splits));
        let gap = scope.spawn(|| {
            (
                crate::gap::gap_rows(&records),
                crate::failures::failures(&records),
            )
        });
        // Settled only for the seeds: each decides every pair again, the run's own replays
        // decide a pair once.
        let ground = settings.as_ref().map(|_| ttft_ground(opts, &inputs));
        let all = AllPairs::settled(&records, ground.as_ref());
        let sums = ground.as_ref().map(|g| {
            let known = all.known_rows(&records, g);
            ConditionSumsTable::with_known_rows(&records, Some(&known))
        });
        (all, (sums, joined(splits), joined(gap)))
    });
    // Everything after this reads the pairs, the conditions and the sums: ~190 bytes a record
    // freed before the search, the bootstraps and the seeds.
    drop(records);
    phases.start("ranking the search's view of the pairs");
    // The search's view of every pair, for the run's search and every seed's (on both cores:
    // nothing else runs meanwhile), made once the records are gone: ~110 bytes a pair at its
    // peak.
    let view = SearchView::new(&all, opts.limits);
    let (calibrated, stability) = calibrate_with_seeds(
        opts,
        &inputs,
        (&all, &view, &condition_splits),
        seed_inputs.as_ref().zip(settings.as_ref()),
        &mut phases,
    )?;
    let chosen = calibrated.chosen();
    let Calibrated {
        pairs,
        choices,
        replay,
        selected,
        uncertainty,
        mut warnings,
    } = calibrated;
    let params = &choices.params;
    let compared = Comparisons {
        variants: uncertainty
            .selection_adjusted
            .as_ref()
            .map_or(0, |a| a.compared.len() as u64),
        threshold_rules: 2,
        estimators: 2,
        thresholds_searched: choices.search_count.rules_evaluated
            + choices.search_count_prefill.rules_evaluated,
    };
    let headline = headline(chosen, &uncertainty, stability.as_ref(), compared);

    phases.start("freezing the bundle");
    let provenance = provenance(opts, &inputs, &headline, &uncertainty, stability.as_ref());
    let Frozen {
        bundle,
        mut outputs,
        hashes,
    } = freeze_bundles(opts, params, &provenance, chosen.0)?;
    let (fit_unmeasured, sel_unmeasured) = (pairs.fit_unmeasured, pairs.selection_unmeasured);
    drop(pairs);
    if fit_unmeasured + sel_unmeasured > 0 {
        warnings.push(format!(
            "{fit_unmeasured} fit-split and {sel_unmeasured} selection-split pair(s) without a measured TTFT on both candidates were not used"
        ));
    }
    warnings.extend(
        inputs
            .margins_file
            .warnings
            .iter()
            .map(|w| format!("margins: {w}")),
    );
    warnings.extend(headline.caveats.iter().cloned());
    let selection = SelectionFile {
        schema_version: SELECTION_SCHEMA_VERSION,
        tool_versions: provenance.tool_versions.clone(),
        input_files: inputs.input_files,
        split_seed: inputs.splits.seed,
        limits: opts.limits,
        margins: choices.params.margins,
        search_pairs: choices.search_count.probes,
        search_pairs_unmeasured: fit_unmeasured,
        search_count: choices.search_count,
        search_count_prefill: choices.search_count_prefill,
        landscape: choices.landscape,
        candidates: choices.candidates,
        threshold_rule: choices.threshold_rule,
        estimator: choices.estimator,
        bundle_variant: chosen.0,
        thresholds: choices.thresholds,
        replay,
        bundles: hashes,
        headline,
        uncertainty,
        stability,
        warnings,
    };
    // Every output is staged and written together with selection.json: all or none.
    outputs.push((opts.out.clone(), sy_cli::json_bytes(&opts.out, &selection)?));
    sy_cli::atomic_write_all(&outputs)?;
    phases.finish();
    Ok(SelectOutput {
        selection,
        bundle,
        fit: inputs.fit,
        margins: inputs.margins_file,
        fit_file: inputs.fit_file,
        selection_pairs: all.into_split(&condition_splits, Split::Selection),
        selected_ttfts: selected,
        options: opts.clone(),
        gap,
        failures,
        // An adaptive run's decision: the stop's statistic recomputed (`None`: a fixed plan).
        adaptive: crate::adaptive::adaptive_answer(&opts.records),
    })
}
