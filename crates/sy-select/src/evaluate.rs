//! Replaying variants over paired probes: every decision goes through `sy_selector::decide`'s
//! body, `decide_prepared` (the production code path, with each pair's log features taken once),
//! or — for the TTFT variants of a pair settled once under the parameters' ground — through
//! `sy_selector::TtftTurn::decide`, the same decision finished from what `decide` settles before
//! reading the fitted corrections (`sy-select`'s own pairs are settled under the run's limits and
//! Q tables, which every split seed shares). Stage's proposal is taken as *efficient* for every
//! pair, and the *selected TTFT* is the measured TTFT of the candidate the decision picks.
//!
//! The statistics answer the proposal's questions per variant: how often the rule could act,
//! how often it changed the choice, how often it fell back to Stage and why; mean and p90 selected
//! TTFT; regret against the per-probe oracle (the faster candidate every time) — all of it also
//! split by background generation length (`short` vs `long`), which exposes the "remaining
//! generation work" gap that R and P cannot see.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_records::{ProbePair, ProbeTable, Split};
use sy_selector::{
    CandidateFeatures, DecisionInput, Estimator, GuardLimits, Model, Observation, Reason,
    RuleParams, Thresholds, TtftGround, TtftTurn, Variant, count_guards, decide_prepared,
    thresholds_read, trigger_enabled,
};

use crate::search::{GuardPass, SearchProbe};

/// One paired probe, ready to be decided: both rule observations (packed, no heap), the
/// decision time and both measured TTFTs. [`EvalPair::input`] gives the exact
/// [`DecisionInput`] back; the packed form is half its size (~150 bytes a pair instead of
/// ~280), which is most of `sy-select`'s memory once the probe table is dropped and, at 10 M
/// records, most of the time of pairing (the first write to fresh pages).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalPair {
    efficient: PackedObservation,
    capable: PackedObservation,
    /// Both candidates' log features, taken once: every variant, bootstrap and split seed
    /// decides the pair again (48 bytes a pair; the logarithms were a tenth of the replays' time).
    features: CandidateFeatures,
    now_ms: f64,
    local_capable_in_flight: u64,
    proposal: Model,
    pub ttft_eff_ms: f64,
    pub ttft_cap_ms: f64,
    /// Background generation length of the condition (`short`, `long`), when it has one.
    pub decode_length: Option<DecodeLength>,
    /// The workload condition (a hash of run id and condition id): the unit the bootstrap
    /// resamples.
    pub condition: u64,
    /// Both TTFT variants' turns settled once (see [`SettledTtft`]), when they were.
    ttft: Option<SettledTtft>,
}

/// A pair's turns of the TTFT variants (blind, cache) settled under a [`TtftGround`]
/// (`sy_selector::TtftTurn`), with that ground's identity: every replay and margin under
/// parameters of the same ground — the run's and every split seed's, whose Q tables and limits
/// are the run's — finishes them instead of deciding the pair from its observations again.
/// 56 bytes a pair.
#[derive(Debug, Clone, PartialEq)]
struct SettledTtft {
    ground: u64,
    turns: [TtftTurn; 2],
}

impl SettledTtft {
    fn settle(ground: &TtftGround, input: &DecisionInput, f: &CandidateFeatures) -> Option<Self> {
        let turns = [Estimator::Blind, Estimator::Cache].map(|e| ground.settle(e, input, f));
        let [Some(blind), Some(cache)] = turns else {
            return None;
        };
        Some(SettledTtft {
            ground: ground.id(),
            turns: [blind, cache],
        })
    }

    fn turn(&self, estimator: Estimator) -> &TtftTurn {
        match estimator {
            Estimator::Blind => &self.turns[0],
            Estimator::Cache => &self.turns[1],
        }
    }
}

/// The rule's inputs of an [`Observation`] as values with a presence mask (56 bytes instead of
/// 112); the recorded extras are not kept (no decision reads them).
#[derive(Debug, Clone, Copy, PartialEq)]
struct PackedObservation {
    /// N, K, R, booked prefill tokens, prefill capacity, observed at.
    values: [f64; 6],
    /// Bit i: `values[i]` is present.
    present: u8,
    schedulable: Option<bool>,
}

impl PackedObservation {
    fn pack(o: &Observation) -> PackedObservation {
        let fields = [
            o.n,
            o.k,
            o.r,
            o.prefill_tokens_booked,
            o.prefill_capacity_tokens,
            o.observed_at_ms,
        ];
        let mut values = [0.0; 6];
        let mut present = 0u8;
        for (i, f) in fields.iter().enumerate() {
            if let Some(v) = f {
                values[i] = *v;
                present |= 1 << i;
            }
        }
        PackedObservation {
            values,
            present,
            schedulable: o.schedulable,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<f64> {
        (self.present & (1 << i) != 0).then(|| self.values[i])
    }

    #[inline]
    fn unpack(&self) -> Observation {
        Observation {
            n: self.get(0),
            k: self.get(1),
            r: self.get(2),
            prefill_tokens_booked: self.get(3),
            prefill_capacity_tokens: self.get(4),
            schedulable: self.schedulable,
            observed_at_ms: self.get(5),
            recorded: None,
        }
    }
}

/// A stable key of (run id, condition id) for grouping pairs by condition.
pub fn condition_key(run_id: &str, condition_id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (run_id, condition_id).hash(&mut h);
    h.finish()
}

/// The background generation length of an equal-count short-vs-long condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeLength {
    Short,
    Long,
}

impl DecodeLength {
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeLength::Short => "short",
            DecodeLength::Long => "long",
        }
    }
}

fn measured(ttft: Option<f64>) -> Option<f64> {
    ttft.filter(|t| t.is_finite() && *t >= 0.0)
}

impl EvalPair {
    /// The pair as a decision input, or `None` when a candidate has no measured TTFT.
    ///
    /// The decision time is when the probe was sent (the runtime decides right before sending);
    /// the capable in-flight count is 0 (calibration has no local accounting).
    pub fn from_pair(pair: &ProbePair) -> Option<EvalPair> {
        EvalPair::from_pair_in(
            pair,
            condition_key(pair.run_id(), pair.condition_id()),
            None,
        )
    }

    /// [`EvalPair::from_pair`] with the pair's [`condition_key`] already computed, settled
    /// under `ground` when given ([`EvalPair::settled`]).
    fn from_pair_in(
        pair: &ProbePair,
        condition: u64,
        ground: Option<&TtftGround>,
    ) -> Option<EvalPair> {
        let (e, c) = (&pair.efficient, &pair.capable);
        if !pair.both_ok() {
            return None;
        }
        let ttft_eff_ms = measured(e.ttft_ms())?;
        let ttft_cap_ms = measured(c.ttft_ms())?;
        let decode_length = match e.decode_length() {
            Some("short") => Some(DecodeLength::Short),
            Some("long") => Some(DecodeLength::Long),
            _ => None,
        };
        let input = DecisionInput {
            proposal: Model::Efficient,
            efficient: e.rule_observation(),
            capable: c.rule_observation(),
            now_ms: e.sent_at_unix_ms(),
            local_capable_in_flight: 0,
        };
        let mut e = EvalPair::new(&input, (ttft_eff_ms, ttft_cap_ms), decode_length, condition);
        if let Some(ground) = ground {
            e.ttft = SettledTtft::settle(ground, &input, &e.features);
        }
        Some(e)
    }

    /// A pair from its decision input, the measured TTFTs (efficient, capable), the background
    /// generation length and the condition key.
    pub fn new(
        input: &DecisionInput,
        (ttft_eff_ms, ttft_cap_ms): (f64, f64),
        decode_length: Option<DecodeLength>,
        condition: u64,
    ) -> EvalPair {
        EvalPair {
            efficient: PackedObservation::pack(&input.efficient),
            capable: PackedObservation::pack(&input.capable),
            features: CandidateFeatures::of(input),
            now_ms: input.now_ms,
            local_capable_in_flight: input.local_capable_in_flight,
            proposal: input.proposal,
            ttft_eff_ms,
            ttft_cap_ms,
            decode_length,
            condition,
            ttft: None,
        }
    }

    /// The pair with its TTFT variants' turns settled under `ground` (see [`SettledTtft`]).
    pub fn settled(mut self, ground: &TtftGround) -> EvalPair {
        self.ttft = SettledTtft::settle(ground, &self.input(), &self.features);
        self
    }

    /// The predicted advantage `T_eff − T_cap` of `estimator` under the models, from the pair's
    /// settled turn when it was settled under ground `ground` ([`TtftGround::id_of`] the models
    /// with any limits: the advantage reads only the Q tables); `None` (not settled, or under
    /// another ground) when it must be predicted from the observations.
    #[inline]
    pub fn settled_advantage(
        &self,
        models: (&sy_selector::ModelEstimators, &sy_selector::ModelEstimators),
        estimator: Estimator,
        ground: u64,
    ) -> Option<Option<f64>> {
        let settled = self.ttft.as_ref().filter(|s| s.ground == ground)?;
        Some(
            settled
                .turn(estimator)
                .advantage_ms(models, estimator, &self.features),
        )
    }

    /// The decision input (the recorded extras are not kept).
    #[inline]
    pub fn input(&self) -> DecisionInput {
        DecisionInput {
            proposal: self.proposal,
            efficient: self.efficient.unpack(),
            capable: self.capable.unpack(),
            now_ms: self.now_ms,
            local_capable_in_flight: self.local_capable_in_flight,
        }
    }

    /// Both candidates' raw features (computed once, with the pair).
    pub fn features(&self) -> &CandidateFeatures {
        &self.features
    }

    /// The efficient candidate's observation.
    pub fn efficient(&self) -> Observation {
        self.efficient.unpack()
    }

    /// The capable candidate's observation.
    pub fn capable(&self) -> Observation {
        self.capable.unpack()
    }

    /// The measured TTFT of the candidate `choice`.
    pub fn selected_ttft(&self, choice: Model) -> f64 {
        match choice {
            Model::Efficient => self.ttft_eff_ms,
            Model::Capable => self.ttft_cap_ms,
        }
    }

    /// The per-probe oracle: the faster candidate.
    pub fn oracle_ttft(&self) -> f64 {
        self.ttft_eff_ms.min(self.ttft_cap_ms)
    }
}

/// Whether guard G (and the inputs it needs) holds for the threshold rule with each set of terms
/// enabled: `sy_selector::count_guards`, guard G with the count trigger reading R, P or both,
/// the pair read once. Pairs always
/// carry an efficient proposal (see [`EvalPair::from_pair`]).
#[derive(Debug)]
pub struct GuardProbe {
    limits: GuardLimits,
}

impl GuardProbe {
    /// The probe of guard G with `params`' limits.
    pub fn new(params: &RuleParams) -> GuardProbe {
        GuardProbe::with_limits(params.limits)
    }

    /// The probe of guard G with these limits.
    pub fn with_limits(limits: GuardLimits) -> GuardProbe {
        GuardProbe { limits }
    }

    /// Guard G of one pair for each set of enabled terms.
    pub fn guard(&self, input: &DecisionInput) -> GuardPass {
        count_guards(&self.limits, input)
    }

    /// The search's view of one pair.
    pub fn search_probe(&self, pair: &EvalPair) -> SearchProbe {
        let input = pair.input();
        let eff: &Observation = &input.efficient;
        SearchProbe {
            r_eff: eff.valid_r().ok(),
            p_eff: eff.valid_p().ok(),
            ttft_eff_ms: pair.ttft_eff_ms,
            ttft_cap_ms: pair.ttft_cap_ms,
            guard: self.guard(&input),
        }
    }
}

/// Statistics of one variant over a set of pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantStats {
    /// Paired probes decided.
    pub probes: u64,
    /// Decisions that reached the trigger (guard G held, inputs valid, predictions usable).
    pub could_act: u64,
    /// Decisions that changed efficient to capable.
    pub changed: u64,
    /// Decisions that fell back to Stage's choice because a guard check failed or a prediction
    /// was unusable.
    pub fell_back: u64,
    /// Fallbacks by reason (`sy_selector::Reason::code`).
    pub fallback_reasons: BTreeMap<String, u64>,
    /// Decisions where the variant had nothing to evaluate (`stage`, or a disabled trigger).
    pub not_applicable: u64,
    pub could_act_rate: f64,
    pub override_rate: f64,
    pub fallback_rate: f64,
    pub mean_selected_ttft_ms: f64,
    pub p90_selected_ttft_ms: f64,
    /// Mean TTFT of the per-probe oracle over the same pairs.
    pub oracle_mean_ttft_ms: f64,
    /// `mean_selected_ttft_ms − oracle_mean_ttft_ms`.
    pub regret_ms: f64,
}

/// One variant's statistics, overall and by background generation length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReplay {
    pub variant: Variant,
    pub thresholds: Thresholds,
    /// The margin in force (TTFT variants).
    pub margin_ms: Option<f64>,
    pub all: VariantStats,
    /// `short` / `long` background generations (conditions without a length are only in `all`).
    pub by_decode_length: BTreeMap<String, VariantStats>,
}

/// The replay of several variants over the same pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// Pairs decided.
    pub pairs: u64,
    /// Pairs skipped because a candidate has no measured TTFT.
    pub pairs_unmeasured: u64,
    pub variants: Vec<VariantReplay>,
}

impl Replay {
    /// The replays `variants` of `pairs` decided pairs (`unmeasured` more skipped).
    pub fn of<P>(pairs: &[P], unmeasured: u64, variants: Vec<VariantReplay>) -> Replay {
        Replay {
            pairs: pairs.len() as u64,
            pairs_unmeasured: unmeasured,
            variants,
        }
    }

    /// The replay of one variant.
    pub fn get(&self, variant: Variant) -> Option<&VariantReplay> {
        self.variants.iter().find(|v| v.variant == variant)
    }
}

/// How much of a replay to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every statistic, overall and by background generation length.
    Full,
    /// Only what a choice between variants reads ([`crate::choice::choose`]): the counts and
    /// the mean selected TTFT, overall. The p90 is NaN and there is no breakdown by length
    /// (the stability seeds, which keep nothing else).
    Choice,
}

struct Acc {
    probes: u64,
    could_act: u64,
    changed: u64,
    fell_back: u64,
    not_applicable: u64,
    reasons: BTreeMap<&'static str, u64>,
    /// The selected TTFTs (for the p90), kept with [`Detail::Full`] only.
    selected: Option<Vec<f64>>,
    /// Their sum, added in order from −0 (as `Iterator::sum` adds).
    selected_sum: f64,
    oracle_sum: f64,
}

impl Acc {
    fn new(detail: Detail) -> Acc {
        Acc {
            probes: 0,
            could_act: 0,
            changed: 0,
            fell_back: 0,
            not_applicable: 0,
            reasons: BTreeMap::new(),
            selected: (detail == Detail::Full).then(Vec::new),
            selected_sum: -0.0,
            oracle_sum: 0.0,
        }
    }

    fn add(&mut self, reason: &Reason, changed: bool, selected: f64, oracle: f64) {
        self.probes += 1;
        match reason {
            Reason::TriggerFalse | Reason::Override => self.could_act += 1,
            Reason::StageBaseline | Reason::TriggerDisabled | Reason::CapableProposal => {
                self.not_applicable += 1
            }
            r => {
                self.fell_back += 1;
                *self.reasons.entry(r.code()).or_insert(0) += 1;
            }
        }
        if changed {
            self.changed += 1;
        }
        if let Some(values) = &mut self.selected {
            values.push(selected);
        }
        self.selected_sum += selected;
        self.oracle_sum += oracle;
    }

    fn finish(self) -> VariantStats {
        let n = self.probes.max(1) as f64;
        let mean = self.selected_sum / n;
        let p90 = self
            .selected
            .and_then(|mut v| sy_selector::quantile_unsorted(&mut v, 0.9))
            .unwrap_or(f64::NAN);
        let oracle = self.oracle_sum / n;
        let (mean, oracle) = if self.probes == 0 {
            (f64::NAN, f64::NAN)
        } else {
            (mean, oracle)
        };
        VariantStats {
            probes: self.probes,
            could_act: self.could_act,
            changed: self.changed,
            fell_back: self.fell_back,
            fallback_reasons: self
                .reasons
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            not_applicable: self.not_applicable,
            could_act_rate: self.could_act as f64 / n,
            override_rate: self.changed as f64 / n,
            fallback_rate: self.fell_back as f64 / n,
            mean_selected_ttft_ms: mean,
            p90_selected_ttft_ms: p90,
            oracle_mean_ttft_ms: oracle,
            regret_ms: mean - oracle,
        }
    }
}

/// Replays `variant` with `params` over `pairs`.
pub fn replay_variant<P: Borrow<EvalPair>>(
    params: &RuleParams,
    variant: Variant,
    pairs: &[P],
) -> VariantReplay {
    let mut tally = [VariantTally::new(variant, params, Detail::Full)];
    tally_pairs(&mut tally, pairs);
    let [tally] = tally;
    tally.finish()
}

/// One variant's running statistics in a replay, overall and by generation length.
struct VariantTally<'p> {
    variant: Variant,
    params: &'p RuleParams,
    by_length: bool,
    all: Acc,
    short: Acc,
    long: Acc,
    /// The identity of `params`' ground: pairs settled under it are finished from their turns.
    ground: u64,
}

impl<'p> VariantTally<'p> {
    fn new(variant: Variant, params: &'p RuleParams, detail: Detail) -> Self {
        VariantTally {
            variant,
            params,
            by_length: detail == Detail::Full,
            all: Acc::new(detail),
            short: Acc::new(detail),
            long: Acc::new(detail),
            ground: TtftGround::id_of(&params.limits, (&params.efficient, &params.capable)),
        }
    }

    /// The reason `decide` gives this TTFT variant on `pair`, from the pair's settled turn when
    /// it has one of a ground that fits the parameters; `None` when the pair must be decided
    /// from its observations.
    #[inline]
    fn settled_reason(&self, pair: &EvalPair) -> Option<Reason> {
        let estimator = self.variant.estimator()?;
        let settled = pair.ttft.as_ref().filter(|s| s.ground == self.ground)?;
        Some(
            settled
                .turn(estimator)
                .decide(self.params, estimator, &pair.features),
        )
    }

    /// Decides `pair` (`input`: its decision input, unpacked by the first tally that needs
    /// it) and adds the outcome.
    #[inline]
    fn add(&mut self, pair: &EvalPair, input: &mut Option<DecisionInput>) {
        let (reason, changed, choice) = match self.settled_reason(pair) {
            Some(reason) => {
                let choice = reason.choice(pair.proposal);
                (reason, choice != pair.proposal, choice)
            }
            None => {
                let input = input.get_or_insert_with(|| pair.input());
                let d = decide_prepared(self.params, self.variant, input, &pair.features);
                (d.reason, d.changed, d.choice)
            }
        };
        let selected = pair.selected_ttft(choice);
        let oracle = pair.oracle_ttft();
        self.all.add(&reason, changed, selected, oracle);
        let by_length = match pair.decode_length {
            Some(DecodeLength::Short) if self.by_length => Some(&mut self.short),
            Some(DecodeLength::Long) if self.by_length => Some(&mut self.long),
            _ => None,
        };
        if let Some(acc) = by_length {
            acc.add(&reason, changed, selected, oracle);
        }
    }

    /// The replay, and the selected TTFT of every pair in order (empty unless
    /// [`Detail::Full`]).
    fn finish_keeping(self) -> (VariantReplay, Vec<f64>) {
        let selected = self.all.selected.clone().unwrap_or_default();
        (self.finish(), selected)
    }

    fn finish(self) -> VariantReplay {
        let mut by = BTreeMap::new();
        for (name, acc) in [("short", self.short), ("long", self.long)] {
            if acc.probes > 0 {
                by.insert(name.to_string(), acc.finish());
            }
        }
        VariantReplay::of(self.variant, self.params, self.all.finish(), by)
    }
}

impl VariantReplay {
    /// The replay of `variant` with `params` whose statistics are `all` and `by_decode_length`.
    fn of(
        variant: Variant,
        params: &RuleParams,
        all: VariantStats,
        by_decode_length: BTreeMap<String, VariantStats>,
    ) -> VariantReplay {
        VariantReplay {
            variant,
            thresholds: thresholds_read(variant, &params.thresholds),
            margin_ms: match variant {
                Variant::Blind => Some(params.margins.blind),
                Variant::Cache => Some(params.margins.cache),
                _ => None,
            },
            all,
            by_decode_length,
        }
    }
}

/// Replays each `(variant, params)` over `pairs`, in one pass: each pair is read and unpacked
/// once and decided by every variant (the same decisions, added in the same order, as one pass
/// per variant; at 10 M records the pairs do not fit in any cache). Returns the replays and
/// each variant's selected TTFT of every pair in pair order (empty unless [`Detail::Full`]).
///
/// A variant whose trigger cannot fire with its thresholds (`stage`, or a count variant with
/// its terms disabled: `sy_selector::trigger_enabled`) keeps Stage's proposal on every pair,
/// so every such variant has the same statistics and selected TTFTs: they are tallied once,
/// for the first of them.
pub fn replay_variants<P: Borrow<EvalPair>>(
    variants: &[(Variant, &RuleParams)],
    pairs: &[P],
    detail: Detail,
) -> (Vec<VariantReplay>, SelectedTtfts) {
    let keeps = |&(v, params): &(Variant, &RuleParams)| !trigger_enabled(v, &params.thresholds);
    let first_keeping = variants.iter().position(keeps);
    let decided: Vec<usize> = (0..variants.len())
        .filter(|&i| Some(i) == first_keeping || variants.get(i).is_some_and(|x| !keeps(x)))
        .collect();
    let mut tallies: Vec<VariantTally<'_>> = (decided.iter())
        .filter_map(|&i| variants.get(i))
        .map(|&(v, params)| VariantTally::new(v, params, detail))
        .collect();
    tally_pairs(&mut tallies, pairs);
    let mut own: Vec<Option<(VariantReplay, Vec<f64>)>> = vec![None; variants.len()];
    for (&i, tally) in decided.iter().zip(tallies) {
        if let Some(slot) = own.get_mut(i) {
            *slot = Some(tally.finish_keeping());
        }
    }
    let kept = first_keeping.and_then(|i| own.get(i).cloned().flatten());
    (variants.iter().zip(own))
        .filter_map(|(&(v, params), own)| {
            let (replay, ttfts) = match own {
                Some(decided) => decided,
                None => {
                    let (like, ttfts) = kept.clone()?;
                    let replay = VariantReplay::of(v, params, like.all, like.by_decode_length);
                    (replay, ttfts)
                }
            };
            Some((replay, (v, ttfts)))
        })
        .unzip()
}

/// Every pair, read and unpacked once, added to every tally.
fn tally_pairs<P: Borrow<EvalPair>>(tallies: &mut [VariantTally<'_>], pairs: &[P]) {
    for pair in pairs {
        let pair = pair.borrow();
        let mut input = None;
        for tally in tallies.iter_mut() {
            tally.add(pair, &mut input);
        }
    }
}

/// Replays every variant with the same parameters (pairs owned or borrowed).
pub fn replay_all<P: Borrow<EvalPair>>(
    params: &RuleParams,
    pairs: &[P],
    unmeasured: u64,
) -> Replay {
    replay_all_keeping(params, pairs, unmeasured).0
}

/// Each variant's selected TTFT of every pair, in pair order, as a replay decided it.
pub type SelectedTtfts = Vec<(Variant, Vec<f64>)>;

/// [`replay_all`], and the selected TTFTs it decided (for the bootstrap intervals, which
/// resample them).
pub fn replay_all_keeping<P: Borrow<EvalPair>>(
    params: &RuleParams,
    pairs: &[P],
    unmeasured: u64,
) -> (Replay, SelectedTtfts) {
    let variants = Variant::ALL.map(|v| (v, params));
    let (variants, selected) = replay_variants(&variants, pairs, Detail::Full);
    (Replay::of(pairs, unmeasured, variants), selected)
}

/// Decision inputs of the pairs, and how many pairs lacked a measured TTFT.
pub fn eval_pairs<'r>(pairs: impl IntoIterator<Item = ProbePair<'r>>) -> (Vec<EvalPair>, u64) {
    let mut out = Vec::new();
    let mut unmeasured = 0;
    for p in pairs {
        match EvalPair::from_pair(&p) {
            Some(e) => out.push(e),
            None => unmeasured += 1,
        }
    }
    (out, unmeasured)
}

/// Every pair of a probe table as a decision input, by pair index (`None`: a candidate without a
/// measured TTFT): built once, then read per split by the selection and by every stability seed.
///
/// Which pairs a split holds is read from two small columns (each pair's condition and whether
/// it is measured), so a split's pass touches only its own pairs' decision inputs (at 10 M
/// records the inputs are about 1 GB, and every seed takes three splits of them).
#[derive(Debug)]
pub struct AllPairs {
    pairs: Vec<Option<EvalPair>>,
    /// The table's condition index of each pair.
    conditions: Vec<u32>,
    /// Whether each pair is measured (`pairs[i].is_some()`).
    measured: Vec<bool>,
}

impl AllPairs {
    /// The decision inputs of every pair of `records`, in pair order (on every core: unpacking
    /// a pair and taking its features' logarithms is most of the work).
    pub fn new(records: &ProbeTable) -> AllPairs {
        AllPairs::settled(records, None)
    }

    /// [`AllPairs::new`], each pair's TTFT variants' turns settled under `ground` when given
    /// ([`EvalPair::settled`]).
    pub fn settled(records: &ProbeTable, ground: Option<&TtftGround>) -> AllPairs {
        use rayon::prelude::*;
        let keys: Vec<u64> = (0..records.condition_count())
            .map(|c| {
                let (run, condition) = records.condition_key(c as u32);
                condition_key(run, condition)
            })
            .collect();
        // Indexed (a pair per index, none left out), so both vectors are filled in place.
        let (pairs, conditions): (Vec<Option<EvalPair>>, Vec<u32>) = (0..records.pair_count())
            .into_par_iter()
            .map(|i| {
                // Always a pair: `i < pair_count`.
                let Some(p) = records.pair(i) else {
                    return (None, u32::MAX);
                };
                let c = p.condition();
                let key = keys.get(c as usize).copied().unwrap_or_default();
                (EvalPair::from_pair_in(&p, key, ground), c)
            })
            .unzip();
        let measured = pairs.iter().map(Option::is_some).collect();
        AllPairs {
            pairs,
            conditions,
            measured,
        }
    }

    /// Each pair's index and condition, whether that condition is in `split` and whether the
    /// pair is measured (read from the small columns only).
    fn in_split<'s, 'c>(
        &'s self,
        condition_splits: &'c [Option<Split>],
        split: Split,
    ) -> impl Iterator<Item = (usize, u32, bool, bool)> + Clone + use<'s, 'c> {
        let of = self.conditions.iter().zip(&self.measured).enumerate();
        of.map(move |(i, (&c, &measured))| {
            let inside = condition_splits.get(c as usize).copied().flatten() == Some(split);
            (i, c, inside, measured)
        })
    }

    /// The measured pairs of the conditions in `split`, each with its table condition index.
    pub fn indexed_in_split<'s>(
        &'s self,
        condition_splits: &'s [Option<Split>],
        split: Split,
    ) -> impl Iterator<Item = (u32, &'s EvalPair)> + Clone + use<'s> {
        let chosen = self.in_split(condition_splits, split);
        chosen.filter_map(move |(i, c, inside, measured)| {
            let pair = self.pairs.get(i).filter(|_| inside && measured)?;
            Some((c, pair.as_ref()?))
        })
    }

    /// The measured pairs of the conditions in `split` and how many lacked a TTFT (what
    /// [`eval_pairs`] gives for them).
    pub fn of_split(
        &self,
        condition_splits: &[Option<Split>],
        split: Split,
    ) -> (Vec<&EvalPair>, u64) {
        let mut out = Vec::new();
        let mut unmeasured = 0;
        for (i, _, inside, measured) in self.in_split(condition_splits, split) {
            match (inside, measured) {
                (true, true) => out.extend(self.pairs.get(i).and_then(Option::as_ref)),
                (true, false) => unmeasured += 1,
                (false, _) => {}
            }
        }
        (out, unmeasured)
    }

    /// How many pairs of the conditions in `split` are measured, and how many are not.
    pub fn count_split(&self, condition_splits: &[Option<Split>], split: Split) -> (u64, u64) {
        let (mut measured, mut unmeasured) = (0, 0);
        for (_, _, inside, is_measured) in self.in_split(condition_splits, split) {
            match (inside, is_measured) {
                (true, true) => measured += 1,
                (true, false) => unmeasured += 1,
                (false, _) => {}
            }
        }
        (measured, unmeasured)
    }

    /// Whether each pair is measured and in `split`, in pair order.
    pub fn mask(&self, condition_splits: &[Option<Split>], split: Split) -> Vec<bool> {
        self.in_split(condition_splits, split)
            .map(|(_, _, inside, measured)| inside && measured)
            .collect()
    }

    /// The measured pairs of `split`, owned (the table is consumed).
    pub fn into_split(self, condition_splits: &[Option<Split>], split: Split) -> Vec<EvalPair> {
        let mask = self.mask(condition_splits, split);
        self.pairs
            .into_iter()
            .zip(mask)
            .filter_map(|(p, keep)| if keep { p } else { None })
            .collect()
    }

    /// The load rows of `records` (the table these pairs were made from) as
    /// [`sy_calibration::fitting::KnownRows`]: each row of a measured pair settled under
    /// `ground` gives its raw features and Q baselines from the pair.
    pub fn known_rows<'a>(
        &'a self,
        records: &ProbeTable,
        ground: &'a TtftGround,
    ) -> SettledRows<'a> {
        let mut pair_of = vec![u32::MAX; records.len()];
        for (i, p) in records.pairs().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            for row in [p.efficient.index(), p.capable.index()] {
                if let Some(slot) = pair_of.get_mut(row) {
                    *slot = i;
                }
            }
        }
        SettledRows {
            pairs: self,
            pair_of,
            ground,
        }
    }

    /// Each measured pair's search view with `guard`, in pair order, and the condition index of
    /// each (both vectors sized once: growing them cost more than filling them; the probes
    /// on every core).
    pub fn search_probes(&self, guard: &GuardProbe) -> (Vec<u32>, Vec<SearchProbe>) {
        use rayon::prelude::*;
        let measured: Vec<(u32, &EvalPair)> = (self.pairs.iter().zip(&self.conditions))
            .filter_map(|(p, &c)| Some((c, p.as_ref()?)))
            .collect();
        let mut probes = Vec::with_capacity(measured.len());
        (measured.par_iter())
            .map(|(_, p)| guard.search_probe(p))
            .collect_into_vec(&mut probes);
        (measured.into_iter().map(|(c, _)| c).collect(), probes)
    }
}

/// The load rows of a table whose pairs were settled ([`AllPairs::known_rows`]).
#[derive(Debug)]
pub struct SettledRows<'a> {
    pairs: &'a AllPairs,
    /// Each row's pair (`u32::MAX`: none).
    pair_of: Vec<u32>,
    ground: &'a TtftGround,
}

impl sy_calibration::fitting::KnownRows for SettledRows<'_> {
    fn q_tables(&self) -> (&sy_selector::QTable, &sy_selector::QTable) {
        self.ground.q_tables()
    }

    fn row(&self, role: Model, row: usize) -> Option<sy_calibration::fitting::KnownRow> {
        let p = *self.pair_of.get(row)?;
        let pair = self.pairs.pairs.get(p as usize)?.as_ref()?;
        let settled = pair
            .ttft
            .as_ref()
            .filter(|s| s.ground == self.ground.id())?;
        let raw = match role {
            Model::Efficient => pair.features.efficient,
            Model::Capable => pair.features.capable,
        };
        let baseline = |e| settled.turn(e).baseline(role);
        Some(sy_calibration::fitting::KnownRow {
            raw: raw.get(),
            baselines: [baseline(Estimator::Blind), baseline(Estimator::Cache)],
        })
    }
}
