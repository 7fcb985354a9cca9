//! The split table of a run's load-phase conditions (`splits.json`): built once by `sy-fit`,
//! read by the later tools, checked against the records it is used with.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{SPLITS_SCHEMA_VERSION, Split, SplitCounts, SplitFractions, assign_split};
use crate::error::{RecordsError, SplitsError};
use crate::record::{Phase, Record};

/// Counts one more condition in split `s`.
fn bump(counts: &mut SplitCounts, s: Split) {
    match s {
        Split::Fit => counts.fit += 1,
        Split::Uncertainty => counts.uncertainty += 1,
        Split::Selection => counts.selection += 1,
    }
}

/// The splits of a table's conditions under one seed, by condition index: what
/// [`SplitTable::build`] of the conditions and then [`crate::ConditionIndex::splits`] give, each
/// load-phase condition assigned by [`assign_split`] directly, without a table of names (the
/// stability check assigns one per split seed: building the named table and looking every
/// condition up in it cost 0.1 s a seed at 10 M records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSplits {
    /// The split of each condition; `None` for a condition without load-phase rows.
    pub by_condition: Vec<Option<Split>>,
    /// Conditions per split.
    pub counts: SplitCounts,
}

impl ConditionSplits {
    /// Assigns every load-phase condition of `conditions` with `seed` and `fractions`.
    pub fn assign(
        conditions: &crate::ConditionIndex,
        seed: u64,
        fractions: SplitFractions,
    ) -> ConditionSplits {
        let mut counts = SplitCounts::default();
        let by_condition = (0..conditions.count())
            .map(|c| {
                let c = u32::try_from(c).unwrap_or(u32::MAX);
                conditions.is_load(c).then(|| {
                    let (run_id, condition_id) = conditions.key(c);
                    let s = assign_split(seed, &fractions, run_id, condition_id);
                    bump(&mut counts, s);
                    s
                })
            })
            .collect();
        ConditionSplits {
            by_condition,
            counts,
        }
    }
}

/// What has load-phase conditions to split: records, or a [`crate::ProbeTable`].
pub trait LoadConditions {
    /// `(run_id, condition_id)` of the load-phase rows, in row order (repeats allowed).
    fn load_conditions(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_>;
}

impl LoadConditions for [Record] {
    fn load_conditions(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(
            self.iter()
                .filter(|r| r.phase == Phase::Load)
                .map(|r| (r.run_id.as_str(), r.condition_id.as_str())),
        )
    }
}

impl LoadConditions for Vec<Record> {
    fn load_conditions(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        self.as_slice().load_conditions()
    }
}

impl LoadConditions for crate::ProbeTable {
    fn load_conditions(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(crate::ProbeTable::load_conditions(self))
    }
}

impl LoadConditions for crate::ConditionIndex {
    fn load_conditions(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(crate::ConditionIndex::load_conditions(self))
    }
}

/// The split of every load-phase condition, as written to `splits.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitTable {
    pub schema_version: u32,
    pub seed: u64,
    pub fractions: SplitFractions,
    /// How the assignment was made (for people reading the file).
    pub method: String,
    /// Conditions per split.
    pub counts: SplitCounts,
    /// run_id → condition_id → split.
    pub conditions: BTreeMap<String, BTreeMap<String, Split>>,
}

const METHOD: &str = "sha256(\"sy-split-v1\", seed, run_id, condition_id) -> u in [0,1); fit if u < fit, uncertainty if u < fit + uncertainty, else selection";

impl SplitTable {
    /// An empty table.
    pub fn new(seed: u64, fractions: SplitFractions) -> Self {
        SplitTable {
            schema_version: SPLITS_SCHEMA_VERSION,
            seed,
            fractions,
            method: METHOD.to_string(),
            counts: SplitCounts::default(),
            conditions: BTreeMap::new(),
        }
    }

    /// The table of every load-phase condition in `records`.
    pub fn build<S: LoadConditions + ?Sized>(
        records: &S,
        seed: u64,
        fractions: SplitFractions,
    ) -> Self {
        let mut t = SplitTable::new(seed, fractions);
        t.extend(records);
        t
    }

    /// Adds the load-phase conditions of `records` that the table does not have yet (with the
    /// table's seed and fractions). Returns how many were added.
    pub fn extend<S: LoadConditions + ?Sized>(&mut self, records: &S) -> usize {
        let mut added = 0;
        for (run_id, condition_id) in records.load_conditions() {
            if self.split_of(run_id, condition_id).is_some() {
                continue;
            }
            let s = assign_split(self.seed, &self.fractions, run_id, condition_id);
            self.conditions
                .entry(run_id.to_string())
                .or_default()
                .insert(condition_id.to_string(), s);
            bump(&mut self.counts, s);
            added += 1;
        }
        added
    }

    /// The split of a condition, if the table has it.
    #[inline]
    pub fn split_of(&self, run_id: &str, condition_id: &str) -> Option<Split> {
        self.conditions.get(run_id)?.get(condition_id).copied()
    }

    /// The split of a record's condition; `None` for Q-grid records and unknown conditions.
    #[inline]
    pub fn split_of_record(&self, r: &Record) -> Option<Split> {
        if r.phase != Phase::Load {
            return None;
        }
        self.split_of(&r.run_id, &r.condition_id)
    }

    /// Number of conditions in the table.
    pub fn len(&self) -> usize {
        self.conditions.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Errors naming the first load-phase condition of `records` that the table lacks.
    pub fn check_covers<S: LoadConditions + ?Sized>(
        &self,
        records: &S,
        table_path: &Path,
    ) -> Result<(), RecordsError> {
        let missing = records
            .load_conditions()
            .find(|(run, c)| self.split_of(run, c).is_none());
        match missing {
            None => Ok(()),
            Some((run, condition)) => Err(SplitsError::NotInTable {
                path: table_path.to_path_buf(),
                run: run.to_string(),
                condition: condition.to_string(),
            }
            .into()),
        }
    }

    /// Reads and checks `splits.json`.
    pub fn read(path: &Path) -> Result<SplitTable, RecordsError> {
        let t: SplitTable = sy_rundir::read_artifact(sy_rundir::Artifact::Splits, path)
            .map_err(SplitsError::Artifact)?;
        let f = t.fractions;
        SplitFractions::new(f.fit, f.uncertainty, f.selection).map_err(|source| {
            SplitsError::Fractions {
                path: path.to_path_buf(),
                source,
            }
        })?;
        let mut counts = SplitCounts::default();
        for conds in t.conditions.values() {
            for s in conds.values() {
                bump(&mut counts, *s);
            }
        }
        if counts != t.counts {
            return Err(SplitsError::Counts {
                path: path.to_path_buf(),
                listed: t.counts,
                found: counts,
            }
            .into());
        }
        Ok(t)
    }

    /// Writes the table as pretty JSON, atomically.
    pub fn write(&self, path: &Path) -> Result<(), RecordsError> {
        sy_rundir::atomic_write_json(path, self).map_err(|e| RecordsError::Write {
            path: path.to_path_buf(),
            source: e.into(),
        })
    }

    /// Reuses the table at `path` when it exists (checking that an explicitly requested seed or
    /// fractions agree with it, and adding conditions it lacks by the same hash), else builds one
    /// from `records` with `seed` (default 0) and `fractions` (default 60/20/20).
    ///
    /// Returns the table and whether it was read from `path`. Nothing is written.
    pub fn load_or_build<S: LoadConditions + ?Sized>(
        path: &Path,
        records: &S,
        seed: Option<u64>,
        fractions: Option<SplitFractions>,
    ) -> Result<(SplitTable, bool), RecordsError> {
        if path.is_file() {
            let mut t = SplitTable::read(path)?;
            if let Some(s) = seed
                && s != t.seed
            {
                return Err(SplitsError::Seed {
                    path: path.to_path_buf(),
                    made: t.seed,
                    given: s,
                }
                .into());
            }
            if let Some(f) = fractions
                && f != t.fractions
            {
                return Err(SplitsError::OtherFractions {
                    path: path.to_path_buf(),
                    made: t.fractions,
                    given: f,
                }
                .into());
            }
            t.extend(records);
            Ok((t, true))
        } else {
            Ok((
                SplitTable::build(records, seed.unwrap_or(0), fractions.unwrap_or_default()),
                false,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::template_record;

    #[test]
    fn fractions_parse_and_validate() {
        assert_eq!(
            "0.6,0.2,0.2".parse::<SplitFractions>().unwrap(),
            SplitFractions::default()
        );
        assert_eq!(
            "60/20/20".parse::<SplitFractions>().unwrap(),
            SplitFractions::default()
        );
        assert!(
            "0.5,0.2,0.2"
                .parse::<SplitFractions>()
                .unwrap_err()
                .to_string()
                .contains("sum to 1")
        );
        assert!("0.5,0.5".parse::<SplitFractions>().is_err());
        assert!("1.2,-0.2,0".parse::<SplitFractions>().is_err());
        assert!("0,0.5,0.5".parse::<SplitFractions>().is_err());
    }

    #[test]
    fn assignment_is_deterministic_and_near_the_fractions() {
        let f = SplitFractions::default();
        let mut counts = SplitCounts::default();
        for i in 0..10_000 {
            let c = format!("c{i}");
            let s = assign_split(7, &f, "run", &c);
            assert_eq!(s, assign_split(7, &f, "run", &c));
            bump(&mut counts, s);
        }
        assert!((5_700..6_300).contains(&counts.fit), "{counts:?}");
        assert!((1_800..2_200).contains(&counts.uncertainty), "{counts:?}");
        // Another seed moves conditions.
        let moved = (0..1000)
            .filter(|i| {
                let c = format!("c{i}");
                assign_split(7, &f, "run", &c) != assign_split(8, &f, "run", &c)
            })
            .count();
        assert!(moved > 300, "{moved}");
        // The run id namespaces the condition id.
        let differ = (0..1000)
            .filter(|i| {
                let c = format!("c{i}");
                assign_split(7, &f, "a", &c) != assign_split(7, &f, "b", &c)
            })
            .count();
        assert!(differ > 300, "{differ}");
    }

    #[test]
    fn table_groups_every_repeat_and_role_and_skips_qgrid() {
        let mut records = Vec::new();
        for c in 0..50 {
            for rep in 0..3 {
                for role in [crate::Model::Efficient, crate::Model::Capable] {
                    let mut r = template_record();
                    r.condition_id = format!("c{c}");
                    r.repeat = rep;
                    r.role = role;
                    records.push(r);
                }
            }
        }
        let mut q = template_record();
        q.phase = Phase::Qgrid;
        q.condition_id = "q".into();
        records.push(q.clone());
        let t = SplitTable::build(&records, 3, SplitFractions::default());
        assert_eq!(t.len(), 50);
        assert_eq!(t.split_of_record(&q), None);
        for r in &records[..300] {
            assert_eq!(
                t.split_of_record(r),
                Some(assign_split(
                    3,
                    &SplitFractions::default(),
                    &r.run_id,
                    &r.condition_id
                ))
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(sy_rundir::Artifact::Splits.file_name());
        t.write(&path).unwrap();
        let back = SplitTable::read(&path).unwrap();
        assert_eq!(back, t);
        // Reuse: same table; a conflicting seed is refused; new conditions are added.
        let (again, reused) = SplitTable::load_or_build(&path, &records, None, None).unwrap();
        assert!(reused);
        assert_eq!(again, t);
        let err = SplitTable::load_or_build(&path, &records, Some(4), None).unwrap_err();
        assert!(err.to_string().contains("seed 3"), "{err}");
        let mut extra = template_record();
        extra.condition_id = "new".into();
        let (grown, _) = SplitTable::load_or_build(&path, &[extra][..], Some(3), None).unwrap();
        assert_eq!(grown.len(), 51);
        let mut zzz = template_record();
        zzz.condition_id = "zzz".into();
        let err = t.check_covers(&[zzz][..], &path);
        assert!(err.unwrap_err().to_string().contains("zzz"));
    }

    /// Splits assigned by condition index are the split table's, condition for condition, with
    /// the same counts (two runs, a condition with Q-grid rows only, several seeds).
    #[test]
    fn splits_by_index_are_the_tables() {
        let mut records = Vec::new();
        for (run, conditions) in [("run-b", 40), ("run-a", 30)] {
            for c in 0..conditions {
                for role in [crate::Model::Efficient, crate::Model::Capable] {
                    let mut r = template_record();
                    r.run_id = run.into();
                    r.condition_id = format!("c{c}");
                    r.probe_id = format!("{run}-c{c}");
                    r.role = role;
                    records.push(r);
                }
            }
        }
        let mut q = template_record();
        q.phase = Phase::Qgrid;
        q.condition_id = "q".into();
        records.push(q);
        let table = crate::ProbeTable::from_records(&records).unwrap();
        let conditions = table.conditions();
        for seed in [0, 1, 7, 12345] {
            let fractions = SplitFractions::default();
            let named = SplitTable::build(&records, seed, fractions);
            let by_index = ConditionSplits::assign(conditions, seed, fractions);
            assert_eq!(
                by_index.by_condition,
                conditions.splits(&named),
                "seed {seed}"
            );
            assert_eq!(by_index.counts, named.counts, "seed {seed}");
            assert_eq!(by_index.by_condition.iter().flatten().count(), 70);
        }
    }
}
