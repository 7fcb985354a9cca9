//! The r/p search's view of every measured pair, made once per run: each pair's search probe
//! (guard G with the run's limits, which no split seed changes) with its R and P ranked and in
//! order of its R, grouped by the pair's condition. The run's own search on its fit split and
//! every split seed's search read it through a mask of the split's conditions
//! ([`SearchInput::subset`]): a filter of the same probes, so no split ranks its probes again.
//! The search sums exact integer units, so a subset gives the numbers of its own probes.

use sy_records::Split;
use sy_selector::GuardLimits;

use crate::evaluate::{AllPairs, GuardProbe};
use crate::search::{Mask, SearchError, SearchInput};

/// Every measured pair's search probe, ranked once and grouped by condition.
#[derive(Debug)]
pub struct SearchView {
    input: Result<SearchInput, SearchError>,
}

impl SearchView {
    /// The search probes of every measured pair of `pairs` with guard G's `limits`.
    pub fn new(pairs: &AllPairs, limits: GuardLimits) -> SearchView {
        let (conditions, probes) = pairs.search_probes(&GuardProbe::with_limits(limits));
        SearchView {
            input: SearchInput::grouped(&probes, |i| conditions[i]),
        }
    }

    /// The ranked probes, and which of them are the measured pairs of the conditions in
    /// `split` (by condition index: [`SearchInput::subset`]).
    pub fn of_split(
        &self,
        condition_splits: &[Option<Split>],
        split: Split,
    ) -> Result<(&SearchInput, Mask), SearchError> {
        let all = self.input.as_ref().map_err(Clone::clone)?;
        let keep = Mask::from_fn(condition_splits.len(), |c| {
            condition_splits[c] == Some(split)
        });
        Ok((all, keep))
    }
}
