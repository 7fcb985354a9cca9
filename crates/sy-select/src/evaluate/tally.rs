//! The statistics of one variant over the pairs: what it could act on, changed, fell back on and
//! why, its selected TTFTs and regret ([`VariantStats`], [`Replay`], the run directory's types).

use super::*;

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

pub(super) struct Acc {
    pub(super) probes: u64,
    pub(super) could_act: u64,
    pub(super) changed: u64,
    pub(super) fell_back: u64,
    pub(super) not_applicable: u64,
    pub(super) reasons: BTreeMap<&'static str, u64>,
    /// The selected TTFTs (for the p90), kept with [`Detail::Full`] only.
    pub(super) selected: Option<Vec<f64>>,
    /// Their sum, added in order from −0 (as `Iterator::sum` adds).
    pub(super) selected_sum: f64,
    pub(super) oracle_sum: f64,
}

impl Acc {
    pub(super) fn new(detail: Detail) -> Acc {
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

    pub(super) fn add(&mut self, reason: &Reason, changed: bool, selected: f64, oracle: f64) {
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

    pub(super) fn finish(self) -> VariantStats {
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

/// One variant's running statistics in a replay, overall and by generation length.
pub(super) struct VariantTally<'p> {
    pub(super) variant: Variant,
    pub(super) params: &'p RuleParams,
    pub(super) by_length: bool,
    pub(super) all: Acc,
    pub(super) short: Acc,
    pub(super) long: Acc,
    /// The identity of `params`' ground: pairs settled under it are finished from their turns.
    pub(super) ground: u64,
}

impl<'p> VariantTally<'p> {
    pub(super) fn new(variant: Variant, params: &'p RuleParams, detail: Detail) -> Self {
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
    pub(super) fn settled_reason(&self, pair: &EvalPair) -> Option<Reason> {
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
    pub(super) fn add(&mut self, pair: &EvalPair, input: &mut Option<DecisionInput>) {
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
    pub(super) fn finish_keeping(self) -> (VariantReplay, Vec<f64>) {
        let selected = self.all.selected.clone().unwrap_or_default();
        (self.finish(), selected)
    }

    pub(super) fn finish(self) -> VariantReplay {
        let mut by = BTreeMap::new();
        for (name, acc) in [("short", self.short), ("long", self.long)] {
            if acc.probes > 0 {
                by.insert(name.to_string(), acc.finish());
            }
        }
        variant_replay(self.variant, self.params, self.all.finish(), by)
    }
}

/// The replay of `variant` with `params` whose statistics are `all` and `by_decode_length`.
pub(super) fn variant_replay(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accumulator_counts_what_each_decision_did() {
        let mut acc = Acc::new(Detail::Full);
        acc.add(&Reason::Override, true, 100.0, 100.0);
        acc.add(&Reason::TriggerFalse, false, 300.0, 200.0);
        acc.add(&Reason::StageBaseline, false, 200.0, 200.0);
        acc.add(&Reason::NotSchedulable, false, 400.0, 300.0);
        let s = acc.finish();
        assert_eq!((s.probes, s.could_act, s.changed), (4, 2, 1));
        assert_eq!((s.fell_back, s.not_applicable), (1, 1));
        assert_eq!(s.fallback_reasons.values().sum::<u64>(), 1);
        assert_eq!(s.mean_selected_ttft_ms, 250.0);
        assert_eq!(s.oracle_mean_ttft_ms, 200.0);
        assert_eq!(s.regret_ms, 50.0);
        assert!((s.override_rate - 0.25).abs() < 1e-12);
        assert!(s.p90_selected_ttft_ms > 300.0 && s.p90_selected_ttft_ms <= 400.0);
    }

    #[test]
    fn without_full_detail_there_is_no_p90() {
        let mut acc = Acc::new(Detail::Choice);
        acc.add(&Reason::Override, true, 100.0, 100.0);
        assert!(acc.finish().p90_selected_ttft_ms.is_nan());
    }
}
