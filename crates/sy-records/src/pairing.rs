//! Paired probes: the efficient and the capable record of one probe, measured at the same time.

use std::collections::HashMap;

use crate::error::RecordsError;
use crate::record::{Phase, Record, Role, Status};

/// The two candidates of one load-phase probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbePair {
    pub efficient: Record,
    pub capable: Record,
}

impl ProbePair {
    /// Both candidates answered (status ok, so both have a TTFT).
    pub fn both_ok(&self) -> bool {
        self.efficient.status == Status::Ok && self.capable.status == Status::Ok
    }

    pub fn run_id(&self) -> &str {
        &self.efficient.run_id
    }

    pub fn condition_id(&self) -> &str {
        &self.efficient.condition_id
    }

    pub fn probe_id(&self) -> &str {
        &self.efficient.probe_id
    }

    pub fn repeat(&self) -> u32 {
        self.efficient.repeat
    }

    /// The record of one role.
    pub fn get(&self, role: Role) -> &Record {
        match role {
            Role::Efficient => &self.efficient,
            Role::Capable => &self.capable,
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
    let mut slot_of: HashMap<(&str, &str), usize> = HashMap::new();
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

/// Pairs the load-phase records into probes, moving them (no copies). Q-grid records are dropped.
/// Pairs are in order of first appearance.
///
/// Memory stays at about one copy of the records: the records are permuted in place into
/// `[e0, c0, e1, c1, …]`, then moved pair by pair from the end of the input (which is shrunk as it
/// empties) into the output.
pub fn pair_probes(mut records: Vec<Record>) -> Result<Vec<ProbePair>, RecordsError> {
    let idx = pair_indices(&records)?;
    let pairs = idx.len();
    // Target position of every record: 2i / 2i + 1 for pair i; unpaired (Q-grid) records go last.
    let mut target = vec![usize::MAX; records.len()];
    for (i, &(e, c)) in idx.iter().enumerate() {
        target[e] = 2 * i;
        target[c] = 2 * i + 1;
    }
    let mut next_free = 2 * pairs;
    for t in target.iter_mut() {
        if *t == usize::MAX {
            *t = next_free;
            next_free += 1;
        }
    }
    drop(idx);
    // Apply the permutation in place by following cycles.
    for start in 0..records.len() {
        while target[start] != start {
            let t = target[start];
            records.swap(start, t);
            target.swap(start, t);
        }
    }
    drop(target);
    records.truncate(2 * pairs);
    records.shrink_to_fit();
    let mut out = Vec::with_capacity(pairs);
    let shrink_every = (pairs / 8).max(4096);
    let mut since_shrink = 0;
    while let (Some(capable), Some(efficient)) = (records.pop(), records.pop()) {
        out.push(ProbePair { efficient, capable });
        since_shrink += 1;
        if since_shrink >= shrink_every {
            records.shrink_to_fit();
            since_shrink = 0;
        }
    }
    out.reverse();
    Ok(out)
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
        let pairs = pair_probes(records).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].probe_id(), "b");
        assert_eq!(pairs[0].efficient.role, Role::Efficient);
        assert_eq!(pairs[1].capable.condition_id, "c2");
    }

    #[test]
    fn in_place_pairing_equals_pairing_by_index_on_shuffled_records() {
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
                efficient: records[e].clone(),
                capable: records[c].clone(),
            })
            .collect();
        assert_eq!(expected.len(), 120);
        assert_eq!(pair_probes(records).unwrap(), expected);
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
