//! What every check shares: grouping records into cells, naming offending records, shares and
//! medians, and the result of a check.

use super::*;

pub(super) fn ok(r: &Record) -> bool {
    r.status == Status::Ok
}

pub(super) fn role_name(m: Model) -> &'static str {
    match m {
        Model::Efficient => "efficient",
        Model::Capable => "capable",
    }
}

pub(super) fn rec_name(r: &Record) -> String {
    format!("{}/{}", r.probe_id, role_name(r.role))
}

pub(super) fn offender<'a>(
    cell: String,
    detail: String,
    recs: impl IntoIterator<Item = &'a Record>,
) -> Offender {
    let all: Vec<&Record> = recs.into_iter().collect();
    Offender {
        cell,
        detail,
        records: all
            .iter()
            .take(MAX_RECORDS_NAMED)
            .map(|r| rec_name(r))
            .collect(),
        record_count: all.len(),
    }
}

pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    sy_selector::quantile_sorted(&v, 0.5)
}

pub(super) fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

pub(super) fn result(
    name: &str,
    bound: String,
    measured: String,
    offenders: Vec<Offender>,
) -> CheckResult {
    CheckResult {
        name: name.into(),
        outcome: if offenders.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        bound,
        measured,
        offenders,
    }
}

pub(super) fn skipped(name: &str, bound: String, why: &str) -> CheckResult {
    CheckResult {
        name: name.into(),
        outcome: Outcome::Skipped,
        bound,
        measured: why.into(),
        offenders: Vec::new(),
    }
}

/// Records grouped by a key, in key order.
pub(super) fn group<'a, K: Ord>(
    records: impl IntoIterator<Item = &'a Record>,
    key: impl Fn(&Record) -> K,
) -> BTreeMap<K, Vec<&'a Record>> {
    let mut m: BTreeMap<K, Vec<&Record>> = BTreeMap::new();
    for r in records {
        m.entry(key(r)).or_default().push(r);
    }
    m
}
