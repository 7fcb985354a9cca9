//! Paired probes: the efficient and the capable record of one probe, measured at the same time.
//!
//! [`check_pairing`] is the one definition of how records pair up (by `(run_id, probe_id)`, one
//! efficient and one capable record with the same condition and repeat; Q-grid records are not
//! paired). It works on anything that exposes those keys by row ([`PairKeys`]): a slice of
//! [`Record`]s or the columnar [`crate::ProbeTable`].

use crate::record::Model;
use rustc_hash::FxHashMap;

use crate::error::RecordsError;
use crate::record::{Phase, Record};

/// The keys of rows that pairing reads.
pub(crate) trait PairKeys {
    fn rows(&self) -> usize;
    fn phase(&self, i: usize) -> Phase;
    fn role(&self, i: usize) -> Model;
    fn run_id(&self, i: usize) -> &str;
    fn probe_id(&self, i: usize) -> &str;
    fn condition_id(&self, i: usize) -> &str;
    fn repeat(&self, i: usize) -> u32;
}

impl PairKeys for [Record] {
    fn rows(&self) -> usize {
        self.len()
    }
    fn phase(&self, i: usize) -> Phase {
        self[i].phase
    }
    fn role(&self, i: usize) -> Model {
        self[i].role
    }
    fn run_id(&self, i: usize) -> &str {
        &self[i].run_id
    }
    fn probe_id(&self, i: usize) -> &str {
        &self[i].probe_id
    }
    fn condition_id(&self, i: usize) -> &str {
        &self[i].condition_id
    }
    fn repeat(&self, i: usize) -> u32 {
        self[i].repeat
    }
}

/// A row that does not pair: its index, the field at fault and the message.
pub(crate) type PairIssue = (usize, &'static str, String);

/// The outcome of [`check_pairing`]: `(efficient, capable)` row indices of every complete
/// load-phase probe in order of first appearance, and the rows that do not pair.
pub(crate) struct Pairing {
    pub pairs: Vec<(usize, usize)>,
    pub bad: Vec<PairIssue>,
}

/// Pairs the load-phase rows of `keys`. `describe(i)` names row `i` for messages (file and row);
/// `unpaired_note(i)` adds a hint to the message of a row whose partner is missing.
pub(crate) fn check_pairing<K: PairKeys + Sync + ?Sized>(
    keys: &K,
    describe: &dyn Fn(usize) -> String,
    unpaired_note: &dyn Fn(usize) -> String,
) -> Pairing {
    if let Some(pairs) = adjacent_pairing(keys).or_else(|| sorted_pairing(keys)) {
        return Pairing {
            pairs,
            bad: Vec::new(),
        };
    }
    row_by_row_pairing(keys, describe, unpaired_note)
}

/// The pairs of rows that all pair up side by side (how `sy-collect` and the generator write
/// them): every two consecutive load rows are one efficient and one capable row of one probe,
/// condition and repeat, and no `(run_id, probe_id)` is in two pairs (each pair's key hashed,
/// the hashes sorted: half the rows [`sorted_pairing`] sorts, and no partner table). `None` at
/// the first that is not (rows apart, a problem, or two keys whose hashes collide): the sorted
/// pairing is tried next. When it answers, it answers what the row-by-row pairing would.
fn adjacent_pairing<K: PairKeys + Sync + ?Sized>(keys: &K) -> Option<Vec<(usize, usize)>> {
    use rayon::prelude::*;
    let load: Vec<usize> = (0..keys.rows())
        .into_par_iter()
        .filter(|&i| keys.phase(i) == Phase::Load)
        .collect();
    if !load.len().is_multiple_of(2) {
        return None;
    }
    let pairs: Vec<(usize, usize)> = load
        .par_chunks_exact(2)
        .map(|two| match *two {
            [a, b] => one_probe(keys, a, b),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut hashed: Vec<u64> = pairs.par_iter().map(|&(e, _)| key_hash(keys, e)).collect();
    hashed.par_sort_unstable();
    if hashed.par_windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    Some(pairs)
}

/// `(efficient, capable)` when rows `a` and `b` are one efficient and one capable row of one
/// probe, condition and repeat.
fn one_probe<K: PairKeys + ?Sized>(keys: &K, a: usize, b: usize) -> Option<(usize, usize)> {
    let same_probe = keys.run_id(a) == keys.run_id(b)
        && keys.probe_id(a) == keys.probe_id(b)
        && keys.condition_id(a) == keys.condition_id(b)
        && keys.repeat(a) == keys.repeat(b);
    match (keys.role(a), keys.role(b)) {
        (Model::Efficient, Model::Capable) if same_probe => Some((a, b)),
        (Model::Capable, Model::Efficient) if same_probe => Some((b, a)),
        _ => None,
    }
}

/// The hash of row `i`'s `(run_id, probe_id)`, the key no two probes share.
fn key_hash<K: PairKeys + ?Sized>(keys: &K, i: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    (keys.run_id(i), keys.probe_id(i)).hash(&mut h);
    h.finish()
}

/// The pairs of rows that all pair up, found by sorting instead of a map: each load row's
/// `(run_id, probe_id)` hashed, the hashes sorted, every hash held by exactly two rows, and the
/// two rows of each checked, in row order, to be one efficient and one capable row of the same
/// probe, condition and repeat. `None` at the first that is not (a problem, or two probes whose
/// hashes collide): the row-by-row pairing then finds the pairs or names the problem. When it
/// answers, it answers what the row-by-row pairing would (pairs in order of first appearance):
/// 0.19 → 0.095 s on a million rows, measured side by side.
fn sorted_pairing<K: PairKeys + Sync + ?Sized>(keys: &K) -> Option<Vec<(usize, usize)>> {
    use rayon::prelude::*;
    u32::try_from(keys.rows()).ok()?;
    // Hashed and sorted on every core: the order of `hashed` is that of a sequential pass.
    let mut hashed: Vec<(u64, u32)> = (0..keys.rows())
        .into_par_iter()
        .filter(|&i| keys.phase(i) == Phase::Load)
        .map(|i| (key_hash(keys, i), i as u32))
        .collect();
    hashed.par_sort_unstable();
    // Every hash exactly twice: each row's partner is the other row of its hash.
    const NONE: u32 = u32::MAX;
    let mut partner = vec![NONE; keys.rows()];
    let mut runs = hashed.chunk_by(|x, y| x.0 == y.0);
    if !runs.all(|run| match run {
        [(_, a), (_, b)] => {
            partner[*a as usize] = *b;
            partner[*b as usize] = *a;
            true
        }
        _ => false,
    }) {
        return None;
    }
    // Then, in row order (side-by-side rows stay side by side in memory): the two rows of every
    // hash are one efficient and one capable row of one probe, condition and repeat.
    let mut pairs = Vec::with_capacity(hashed.len() / 2);
    for (a, &b) in partner.iter().enumerate() {
        let b = b as usize;
        if b == NONE as usize || b < a {
            continue;
        }
        pairs.push(one_probe(keys, a, b)?);
    }
    Some(pairs)
}

/// [`check_pairing`] row by row, with the first problem of every row that does not pair.
fn row_by_row_pairing<K: PairKeys + ?Sized>(
    keys: &K,
    describe: &dyn Fn(usize) -> String,
    unpaired_note: &dyn Fn(usize) -> String,
) -> Pairing {
    let n = keys.rows();
    let mut slot_of: FxHashMap<(&str, &str), usize> =
        FxHashMap::with_capacity_and_hasher(n / 2 + 1, Default::default());
    let mut slots: Vec<[Option<usize>; 2]> = Vec::with_capacity(n / 2 + 1);
    let mut bad: Vec<PairIssue> = Vec::new();
    for i in 0..n {
        if keys.phase(i) != Phase::Load {
            continue;
        }
        let s = *slot_of
            .entry((keys.run_id(i), keys.probe_id(i)))
            .or_insert_with(|| {
                slots.push([None, None]);
                slots.len() - 1
            });
        let role = keys.role(i);
        let (mine, other) = match role {
            Model::Efficient => (0, 1),
            Model::Capable => (1, 0),
        };
        if let Some(prev) = slots[s][mine] {
            let msg = format!(
                "probe {:?} has two {} records (the other one is {})",
                keys.probe_id(i),
                role.as_str(),
                describe(prev)
            );
            bad.push((i, "role", msg));
            continue;
        }
        if let Some(o) = slots[s][other]
            && let Some(issue) = mismatch(keys, i, o, describe)
        {
            bad.push(issue);
            continue;
        }
        slots[s][mine] = Some(i);
    }
    let mut pairs = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            [Some(e), Some(c)] => pairs.push((e, c)),
            [Some(i), None] | [None, Some(i)] => {
                let missing = match keys.role(i) {
                    Model::Efficient => "capable",
                    Model::Capable => "efficient",
                };
                let msg = format!(
                    "load-phase probe {:?} of condition {:?} has no {missing} record: efficient and capable probes do not pair up{}",
                    keys.probe_id(i),
                    keys.condition_id(i),
                    unpaired_note(i)
                );
                bad.push((i, "probe_id", msg));
            }
            [None, None] => {}
        }
    }
    Pairing { pairs, bad }
}

/// The issue of row `i` whose partner `o` has another condition or repeat.
fn mismatch<K: PairKeys + ?Sized>(
    keys: &K,
    i: usize,
    o: usize,
    describe: &dyn Fn(usize) -> String,
) -> Option<PairIssue> {
    let partner_role = keys.role(o).as_str();
    if keys.condition_id(o) != keys.condition_id(i) {
        let msg = format!(
            "probe {:?} has condition {:?} but its {partner_role} record ({}) has {:?}",
            keys.probe_id(i),
            keys.condition_id(i),
            describe(o),
            keys.condition_id(o)
        );
        return Some((i, "condition_id", msg));
    }
    if keys.repeat(o) != keys.repeat(i) {
        let msg = format!(
            "probe {:?} has repeat {} but its {partner_role} record ({}) has repeat {}",
            keys.probe_id(i),
            keys.repeat(i),
            describe(o),
            keys.repeat(o)
        );
        return Some((i, "repeat", msg));
    }
    None
}

/// Indices `(efficient, capable)` into `records` of every load-phase probe, in order of first
/// appearance. Q-grid records are ignored (they feed only the Q tables).
///
/// Errors when a load-phase probe does not have exactly one efficient and one capable record
/// with the same condition and repeat (the first problem found).
pub fn pair_indices(records: &[Record]) -> Result<Vec<(usize, usize)>, RecordsError> {
    let describe = |i: usize| format!("record {}", i + 1);
    let outcome = check_pairing(records, &describe, &|_| String::new());
    // The first problem found: a duplicate or mismatch as it is met, else an unpaired probe.
    match outcome.bad.into_iter().next() {
        Some((i, _, problem)) => Err(RecordsError::Pairing {
            run: records[i].run_id.clone(),
            problem,
        }),
        None => Ok(outcome.pairs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::template_record;

    fn rec(probe: &str, role: Model, cond: &str) -> Record {
        let mut r = template_record();
        r.probe_id = probe.to_string();
        r.role = role;
        r.condition_id = cond.to_string();
        r
    }

    #[test]
    fn pairs_in_order_and_drops_qgrid() {
        let mut q = rec("q1", Model::Efficient, "q");
        q.phase = Phase::Qgrid;
        let records = vec![
            rec("b", Model::Capable, "c1"),
            q,
            rec("a", Model::Efficient, "c2"),
            rec("b", Model::Efficient, "c1"),
            rec("a", Model::Capable, "c2"),
        ];
        assert_eq!(pair_indices(&records).unwrap(), vec![(3, 0), (2, 4)]);
    }

    #[test]
    fn unpaired_duplicate_and_mismatched_are_errors() {
        let err = pair_indices(&[rec("a", Model::Efficient, "c")]).unwrap_err();
        assert!(err.to_string().contains("has no capable record"), "{err}");
        let err = pair_indices(&[
            rec("a", Model::Efficient, "c"),
            rec("a", Model::Efficient, "c"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("two efficient"), "{err}");
        let err = pair_indices(&[
            rec("a", Model::Efficient, "c"),
            rec("a", Model::Capable, "d"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("has condition"), "{err}");
    }

    /// Side-by-side records pair; what follows them is still checked against them (a third
    /// record of the probe is a duplicate), and the pairs keep first-seen order.
    #[test]
    fn adjacent_records_pair_and_later_duplicates_are_found() {
        let records = vec![
            rec("a", Model::Capable, "c"),
            rec("a", Model::Efficient, "c"),
            rec("b", Model::Efficient, "c"),
            rec("b", Model::Capable, "c"),
        ];
        assert_eq!(pair_indices(&records).unwrap(), vec![(1, 0), (2, 3)]);
        let mut more = records.clone();
        more.push(rec("a", Model::Capable, "c"));
        let err = pair_indices(&more).unwrap_err();
        assert!(err.to_string().contains("two capable"), "{err}");
        // A pair after an earlier record of the same probe is not paired past it.
        let err = pair_indices(&[
            rec("a", Model::Efficient, "c"),
            rec("a", Model::Efficient, "c"),
            rec("a", Model::Capable, "c"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("two efficient"), "{err}");
    }

    proptest::proptest! {
        /// The sorted pairing answers exactly when every load row pairs up, and then with the
        /// row-by-row pairing's pairs (in the same order); the side-by-side pairing answers
        /// only then too.
        #[test]
        fn sorted_pairing_is_the_row_by_row_one(
            rows in proptest::collection::vec(
                (0u8..6, proptest::bool::ANY, 0u8..2, 0u8..2, proptest::bool::weighted(0.9)),
                0..40,
            ),
            shuffle_seed in proptest::prelude::any::<u64>(),
            shuffle in proptest::bool::weighted(0.7),
        ) {
            use rand::{SeedableRng, seq::SliceRandom};
            // Mostly complete probes (both roles), then some edits and a shuffle.
            let mut records: Vec<Record> = Vec::new();
            for (probe, both, cond, repeat, load) in &rows {
                let mut r = rec(&format!("p{probe}"), Model::Efficient, &format!("c{cond}"));
                r.repeat = u32::from(*repeat);
                if !load {
                    r.phase = Phase::Qgrid;
                }
                if *both {
                    let mut c = r.clone();
                    c.role = Model::Capable;
                    records.push(c);
                }
                records.push(r);
            }
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(shuffle_seed);
            if shuffle {
                records.shuffle(&mut rng);
            }
            let none = |_: usize| String::new();
            let exact = row_by_row_pairing(records.as_slice(), &none, &none);
            match sorted_pairing(records.as_slice()) {
                Some(pairs) => {
                    proptest::prop_assert!(exact.bad.is_empty());
                    proptest::prop_assert_eq!(&pairs, &exact.pairs);
                }
                None => proptest::prop_assert!(!exact.bad.is_empty()),
            }
            // The side-by-side pairing answers only what the row-by-row one would, and does
            // answer unshuffled complete probes.
            match adjacent_pairing(records.as_slice()) {
                Some(pairs) => {
                    proptest::prop_assert!(exact.bad.is_empty());
                    proptest::prop_assert_eq!(pairs, exact.pairs);
                }
                None => proptest::prop_assert!(!exact.bad.is_empty() || shuffle),
            }
        }
    }
}
