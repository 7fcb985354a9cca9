//! Every paired probe of a run, settled once for all split seeds ([`AllPairs`]), and the rows the
//! stability seeds refit from.

use super::*;

/// Every pair of a probe table as a decision input, by pair index (`None`: a candidate without a
/// measured TTFT): built once, then read per split by the selection and by every stability seed.
///
/// Which pairs a split holds is read from two small columns (each pair's condition and whether
/// it is measured), so a split's pass touches only its own pairs' decision inputs (at 10 M
/// records the inputs are about 1 GB, and every seed takes three splits of them).
#[derive(Debug)]
pub struct AllPairs {
    pub(super) pairs: Vec<Option<EvalPair>>,
    /// The table's condition index of each pair.
    pub(super) conditions: Vec<u32>,
    /// Whether each pair is measured (`pairs[i].is_some()`).
    pub(super) measured: Vec<bool>,
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
    pub(super) fn in_split<'s, 'c>(
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
    pub(super) pairs: &'a AllPairs,
    /// Each row's pair (`u32::MAX`: none).
    pub(super) pair_of: Vec<u32>,
    pub(super) ground: &'a TtftGround,
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
            baselines: Estimator::ALL.map(baseline),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::synth::{SynthSpec, generate};
    use sy_records::{SplitFractions, SplitTable};

    #[test]
    fn a_split_is_the_pairs_of_its_conditions() {
        let records = generate(&SynthSpec {
            conditions: 40,
            repeats: 2,
            ..SynthSpec::default()
        });
        let table = ProbeTable::from_records(&records).unwrap();
        let splits = SplitTable::build(&records, 3, SplitFractions::default());
        let by_condition = table.condition_splits(&splits);
        let all = AllPairs::new(&table);
        let mut total = 0;
        for split in [Split::Fit, Split::Uncertainty, Split::Selection] {
            let (measured, unmeasured) = all.count_split(&by_condition, split);
            let mask = all.mask(&by_condition, split);
            assert_eq!(mask.iter().filter(|&&m| m).count() as u64, measured);
            let pairs = AllPairs::new(&table).into_split(&by_condition, split);
            assert_eq!(pairs.len() as u64, measured);
            total += measured + unmeasured;
        }
        assert!(total > 0 && total <= table.pair_count() as u64);
    }
}
