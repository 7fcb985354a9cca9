//! The conditions of a table: `(run_id, condition_id)` interned once, with whether each has
//! load-phase rows.

use super::*;

/// The distinct `(run, condition)`s of a table, by condition index (in order of first
/// appearance), and which have load-phase rows.
#[derive(Debug, Clone, Default)]
pub struct ConditionIndex {
    pub(super) runs: Interner,
    /// (run index, condition id) by condition index.
    pub(super) conditions: Vec<(u32, String)>,
    /// Per run index, condition id → condition index.
    pub(super) index: Vec<FxHashMap<String, u32>>,
    pub(super) is_load: Vec<bool>,
}

impl ConditionIndex {
    /// Number of distinct `(run, condition)`s.
    pub fn count(&self) -> usize {
        self.conditions.len()
    }

    /// `(run_id, condition_id)` of condition index `c` (`("", "")` past the end).
    pub fn key(&self, c: u32) -> (&str, &str) {
        match self.conditions.get(c as usize) {
            Some((run, cond)) => (self.runs.get(*run), cond.as_str()),
            None => ("", ""),
        }
    }

    /// Whether condition `c` has load-phase rows (false past the end).
    pub fn is_load(&self, c: u32) -> bool {
        self.is_load.get(c as usize).copied().unwrap_or(false)
    }

    /// The conditions that have load-phase rows, in order of first appearance.
    pub fn load_conditions(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.conditions.len())
            .filter(|&c| self.is_load[c])
            .map(|c| self.key(c as u32))
    }

    /// The split of every condition (indexed by condition index); `None` for conditions
    /// `splits` does not list (Q-grid conditions among them).
    pub fn splits(&self, splits: &SplitTable) -> Vec<Option<Split>> {
        (0..self.conditions.len())
            .map(|c| {
                let (run, cond) = self.key(c as u32);
                splits.split_of(run, cond)
            })
            .collect()
    }

    /// The index of `(run_id, condition_id)`, added when new; marked as a load-phase
    /// condition when `load`.
    pub(super) fn intern(&mut self, run_id: &str, condition_id: &str, load: bool) -> u32 {
        let run = self.runs.intern(run_id);
        if self.index.len() <= run as usize {
            self.index.resize_with(run as usize + 1, Default::default);
        }
        let map = &mut self.index[run as usize];
        let c = match map.get(condition_id) {
            Some(&c) => c,
            None => {
                let c = u32::try_from(self.conditions.len()).unwrap_or(u32::MAX);
                self.conditions.push((run, condition_id.to_string()));
                self.is_load.push(false);
                map.insert(condition_id.to_string(), c);
                c
            }
        };
        if load {
            self.mark_load(c);
        }
        c
    }

    /// (run index, condition id, has load-phase rows) by condition index (what a cache holds).
    pub(super) fn entries(&self) -> Vec<(u32, String, bool)> {
        self.conditions
            .iter()
            .zip(&self.is_load)
            .map(|((run, cond), &load)| (*run, cond.clone(), load))
            .collect()
    }

    /// The index of `runs` and [`ConditionIndex::entries`]; refuses a run index out of range or
    /// a condition listed twice.
    pub(super) fn from_entries(
        runs: Vec<String>,
        entries: Vec<(u32, String, bool)>,
    ) -> Result<Self, super::cache_error::CacheError> {
        let mut index = ConditionIndex {
            runs: Interner::from_values(runs),
            ..ConditionIndex::default()
        };
        for (run, condition, load) in entries {
            let name = index.runs.values.get(run as usize).cloned();
            let Some(name) = name else {
                return Err(super::cache_error::CacheError::RunIndex { condition, run });
            };
            let before = index.conditions.len();
            let c = index.intern(&name, &condition, load) as usize;
            if c != before || index.conditions.get(c).map(|e| e.0) != Some(run) {
                return Err(super::cache_error::CacheError::ConditionTwice {
                    condition,
                    run: name,
                });
            }
        }
        Ok(index)
    }

    pub(super) fn mark_load(&mut self, c: u32) {
        if let Some(l) = self.is_load.get_mut(c as usize) {
            *l = true;
        }
    }

    /// What [`ConditionIndex::restore`] goes back to.
    pub(super) fn mark(&self) -> ConditionMark {
        ConditionMark {
            runs: self.runs.len(),
            is_load: self.is_load.clone(),
        }
    }

    /// The index as it was at `mark`: conditions and runs added since are forgotten, and the
    /// load flags are those of then.
    pub(super) fn restore(&mut self, mark: ConditionMark) {
        let kept = mark.is_load.len().min(self.conditions.len());
        for (run, condition) in self.conditions.drain(kept..) {
            if let Some(map) = self.index.get_mut(run as usize) {
                map.remove(&condition);
            }
        }
        self.is_load = mark.is_load;
        self.runs.truncate(mark.runs);
        self.index.truncate(mark.runs);
    }
}

/// A [`ConditionIndex`] as it was (see [`ConditionIndex::mark`]).
pub(super) struct ConditionMark {
    pub(super) runs: usize,
    pub(super) is_load: Vec<bool>,
}
