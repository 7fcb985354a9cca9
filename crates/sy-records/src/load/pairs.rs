//! The check across rows: every load-phase probe pairs up (see
//! [`crate::pairing::check_pairing`]); the issues name the file and row of each offender.

use std::path::PathBuf;

use super::loaded::{FileSummary, LoadOptions, LoadedRecords, RowOrigin};
use crate::error::{RecordsError, RowIssue};
use crate::pairing::{PairIssue, PairKeys, check_pairing};
use crate::record::Phase;

/// Checks that every load-phase probe pairs up (see [`crate::pairing::check_pairing`]): without
/// `skip_invalid` the first offending row (in file/row order) is the error; with it, the
/// offending records and their partners are dropped and reported.
pub(super) fn check_pairs(
    out: &mut LoadedRecords,
    options: &LoadOptions,
) -> Result<(), RecordsError> {
    let describe = |i: usize| describe(out, i);
    let torn = |i: usize| torn_note(&out.origins, &out.files, i);
    let mut bad = check_pairing(out.records.as_slice(), &describe, &torn).bad;
    if bad.is_empty() {
        return Ok(());
    }
    sort_by_origin(&mut bad, &out.origins);
    let issue = |b: &PairIssue| pair_row_issue(&out.origins, &out.files, b);
    if !options.skip_invalid {
        return Err(RecordsError::Row(issue(&bad[0])));
    }
    let mut issues: Vec<RowIssue> = bad.iter().map(issue).collect();
    let drop = drop_mask(out.records.as_slice(), &bad, |i| {
        issues.push(partner_issue(
            &out.origins,
            &out.files,
            i,
            &out.records[i].probe_id,
        ));
    });
    out.skipped.extend(issues);
    let mut keep = drop.iter().map(|d| !d);
    out.records.retain(|_| keep.next().unwrap_or(true));
    let mut keep = drop.iter().map(|d| !d);
    out.origins.retain(|_| keep.next().unwrap_or(true));
    Ok(())
}

/// Sorts pairing issues into file/row order.
pub(crate) fn sort_by_origin(bad: &mut [PairIssue], origins: &[RowOrigin]) {
    bad.sort_by_key(|(i, _, _)| origins.get(*i).map(|o| (o.file, o.row)));
}

/// The [`RowIssue`] of a pairing issue.
pub(crate) fn pair_row_issue(
    origins: &[RowOrigin],
    files: &[FileSummary],
    (i, field, message): &PairIssue,
) -> RowIssue {
    let (path, row) = origin_of(origins, files, *i);
    RowIssue {
        path,
        row,
        field: (*field).to_string(),
        message: message.clone(),
    }
}

/// The issue of a valid record dropped because its partner is invalid.
pub(crate) fn partner_issue(
    origins: &[RowOrigin],
    files: &[FileSummary],
    i: usize,
    probe_id: &str,
) -> RowIssue {
    let (path, row) = origin_of(origins, files, i);
    RowIssue {
        path,
        row,
        field: "probe_id".to_string(),
        message: format!("partner of an invalid record of probe {probe_id:?}"),
    }
}

/// Rows to drop with `skip_invalid`: the offending ones and every load-phase row of the same
/// probe (a probe is usable only as a pair); `partner(i)` is called for each partner dropped.
pub(crate) fn drop_mask<K: PairKeys + ?Sized>(
    keys: &K,
    bad: &[PairIssue],
    mut partner: impl FnMut(usize),
) -> Vec<bool> {
    let mut drop = vec![false; keys.rows()];
    let mut bad_probes: std::collections::HashSet<(&str, &str)> = Default::default();
    for b in bad {
        bad_probes.insert((keys.run_id(b.0), keys.probe_id(b.0)));
        drop[b.0] = true;
    }
    for (i, d) in drop.iter_mut().enumerate() {
        if keys.phase(i) == Phase::Load
            && !*d
            && bad_probes.contains(&(keys.run_id(i), keys.probe_id(i)))
        {
            *d = true;
            partner(i);
        }
    }
    drop
}

/// The file and row of row `i`.
fn origin_of(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> (PathBuf, usize) {
    origins
        .get(i)
        .and_then(|o| Some((files.get(o.file as usize)?.path.clone(), o.row as usize)))
        .unwrap_or_default()
}

/// The hint for a row whose partner is missing when its file ends in a torn line.
pub(crate) fn torn_note(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> String {
    origins
        .get(i)
        .and_then(|o| files.get(o.file as usize))
        .filter(|f| f.torn_tail)
        .map(|f| {
            format!(
                " (the last line of {} is torn — a crash while appending — and was ignored: it \
                 may have been this partner)",
                f.path.display()
            )
        })
        .unwrap_or_default()
}

/// Row `i` as "FILE row N", for messages.
pub(crate) fn describe_origin(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> String {
    match origins
        .get(i)
        .and_then(|o| Some((files.get(o.file as usize)?, o.row)))
    {
        Some((f, row)) => format!("{} row {row}", f.path.display()),
        None => format!("record {i}"),
    }
}

fn describe(out: &LoadedRecords, i: usize) -> String {
    describe_origin(&out.origins, &out.files, i)
}
