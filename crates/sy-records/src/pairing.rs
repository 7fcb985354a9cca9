//! Paired probes: the efficient and the capable record of one probe, measured at the same time.

use rustc_hash::FxHashMap;

use crate::error::RecordsError;
use crate::record::{Phase, Record, Role, Status};

/// The two candidates of one load-phase probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbePair<'a> {
    pub efficient: &'a Record,
    pub capable: &'a Record,
}

impl<'a> ProbePair<'a> {
    /// Both candidates answered (status ok, so both have a TTFT).
    pub fn both_ok(&self) -> bool {
        self.efficient.status == Status::Ok && self.capable.status == Status::Ok
    }

    pub fn run_id(&self) -> &'a str {
        self.efficient.run_id.as_str()
    }

    pub fn condition_id(&self) -> &'a str {
        self.efficient.condition_id.as_str()
    }

    pub fn probe_id(&self) -> &'a str {
        self.efficient.probe_id.as_str()
    }

    pub fn repeat(&self) -> u32 {
        self.efficient.repeat
    }

    /// The record of one role.
    pub fn get(&self, role: Role) -> &'a Record {
        match role {
            Role::Efficient => self.efficient,
            Role::Capable => self.capable,
        }
    }
}

/// Indices `(efficient, capable)` into `records` of every load-phase probe, in order of first
/// appearance. Q-grid records are ignored (they feed only the Q tables).
///
/// Errors when a load-phase probe does not have exactly one efficient and one capable record
/// with the same condition and repeat. [`crate::load_records`] already checks this (naming file
/// and row), so records it returned always pair.
pub fn pair_indices(records: &[Record]) -> Result<Vec<(usize, usize)>, RecordsError> {
    let mut slot_of: FxHashMap<(&str, &str), usize> =
        FxHashMap::with_capacity_and_hasher(records.len() / 2 + 1, Default::default());
    let mut slots: Vec<[Option<usize>; 2]> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.phase != Phase::Load {
            continue;
        }
        let s = *slot_of
            .entry((r.run_id.as_str(), r.probe_id.as_str()))
            .or_insert_with(|| {
                slots.push([None, None]);
                slots.len() - 1
            });
        let (mine, other) = match r.role {
            Role::Efficient => (0, 1),
            Role::Capable => (1, 0),
        };
        let slot = &mut slots[s];
        if slot[mine].is_some() {
            return Err(RecordsError::Pairing(format!(
                "run {:?} probe {:?} has two {} records",
                r.run_id,
                r.probe_id,
                r.role.as_str()
            )));
        }
        if let Some(o) = slot[other] {
            let p = &records[o];
            if p.condition_id != r.condition_id || p.repeat != r.repeat {
                return Err(RecordsError::Pairing(format!(
                    "run {:?} probe {:?}: the efficient and capable records disagree on condition/repeat ({:?}/{} vs {:?}/{})",
                    r.run_id, r.probe_id, p.condition_id, p.repeat, r.condition_id, r.repeat
                )));
            }
        }
        slot[mine] = Some(i);
    }
    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            [Some(e), Some(c)] => out.push((e, c)),
            [Some(i), None] | [None, Some(i)] => {
                let r = &records[i];
                return Err(RecordsError::Pairing(format!(
                    "run {:?} probe {:?} (condition {:?}) has only a {} record: efficient and capable probes do not pair up",
                    r.run_id,
                    r.probe_id,
                    r.condition_id,
                    r.role.as_str()
                )));
            }
            [None, None] => {}
        }
    }
    Ok(out)
}

/// Pairs the load-phase records into probes that borrow them. Q-grid records are left out.
/// Pairs are in order of first appearance.
///
/// Borrowing rather than moving keeps memory at one copy of the records and costs one hash
/// lookup per record: at a million records, moving 700-byte records into pairs (and shrinking
/// the source as it empties) took about a second; building the views takes a tenth of that.
pub fn pair_probes(records: &[Record]) -> Result<Vec<ProbePair<'_>>, RecordsError> {
    Ok(pair_indices(records)?
        .into_iter()
        .filter_map(|(e, c)| {
            Some(ProbePair {
                efficient: records.get(e)?,
                capable: records.get(c)?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::template_record;

    fn rec(probe: &str, role: Role, cond: &str) -> Record {
        let mut r = template_record();
        r.probe_id = probe.to_string();
        r.role = role;
        r.condition_id = cond.to_string();
        r
    }

    #[test]
    fn pairs_in_order_and_drops_qgrid() {
        let mut q = rec("q1", Role::Efficient, "q");
        q.phase = Phase::Qgrid;
        let records = vec![
            rec("b", Role::Capable, "c1"),
            q,
            rec("a", Role::Efficient, "c2"),
            rec("b", Role::Efficient, "c1"),
            rec("a", Role::Capable, "c2"),
        ];
        assert_eq!(pair_indices(&records).unwrap(), vec![(3, 0), (2, 4)]);
        let pairs = pair_probes(&records).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].probe_id(), "b");
        assert_eq!(pairs[0].efficient.role, Role::Efficient);
        assert_eq!(pairs[1].capable.condition_id, "c2");
    }

    #[test]
    fn pairing_equals_pairing_by_index_on_shuffled_records() {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let mut records = crate::synth::generate(&crate::synth::SynthSpec {
            conditions: 40,
            repeats: 3,
            ..crate::synth::SynthSpec::default()
        });
        records.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(3));
        let idx = pair_indices(&records).unwrap();
        let expected: Vec<ProbePair> = idx
            .iter()
            .map(|&(e, c)| ProbePair {
                efficient: &records[e],
                capable: &records[c],
            })
            .collect();
        assert_eq!(expected.len(), 120);
        assert_eq!(pair_probes(&records).unwrap(), expected);
    }

    #[test]
    fn unpaired_duplicate_and_mismatched_are_errors() {
        let err = pair_indices(&[rec("a", Role::Efficient, "c")]).unwrap_err();
        assert!(err.to_string().contains("only a efficient record"), "{err}");
        let err = pair_indices(&[
            rec("a", Role::Efficient, "c"),
            rec("a", Role::Efficient, "c"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("two efficient"), "{err}");
        let err = pair_indices(&[rec("a", Role::Efficient, "c"), rec("a", Role::Capable, "d")])
            .unwrap_err();
        assert!(err.to_string().contains("disagree"), "{err}");
    }
}
