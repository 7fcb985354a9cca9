//! The checks of one record that its types do not already guarantee, shared by the record
//! loader and the columnar probe table, and the summary of advisory picks.

use std::path::Path;

use serde::Serialize;

use crate::error::RowIssue;
use crate::record::{Record, Status};

/// `record` if it passes [`validate_record`], else the issue naming `path` and `row`.
pub(crate) fn validated(path: &Path, row: usize, record: Record) -> Result<Record, RowIssue> {
    match validate_record(&record) {
        Ok(()) => Ok(record),
        Err((field, message)) => Err(RowIssue {
            path: path.to_path_buf(),
            row,
            field: field.to_string(),
            message,
        }),
    }
}

/// The fields of one row that [`validate_fields`] checks (borrowed from a [`Record`] or from
/// the columns of a [`crate::ProbeTable`] being loaded).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckedFields<'a> {
    pub status: Status,
    pub ttft_ms: Option<f64>,
    pub n: Option<u64>,
    pub k: Option<u64>,
    pub schema_version: u32,
    pub served_worker_id: Option<u64>,
    pub reserved_worker_id: Option<u64>,
    pub served_dp_rank: Option<u32>,
    pub reserved_dp_rank: Option<u32>,
    pub run_id: &'a str,
    pub condition_id: &'a str,
    pub probe_id: &'a str,
}

impl<'a> CheckedFields<'a> {
    fn of(r: &'a Record) -> Self {
        CheckedFields {
            status: r.status,
            ttft_ms: r.ttft_ms,
            n: r.observed.n,
            k: r.observed.k,
            schema_version: r.schema_version,
            served_worker_id: r.served_worker_id,
            reserved_worker_id: r.reserved_worker_id,
            served_dp_rank: r.served_dp_rank,
            reserved_dp_rank: r.reserved_dp_rank,
            run_id: &r.run_id,
            condition_id: &r.condition_id,
            probe_id: &r.probe_id,
        }
    }
}

/// The checks of one record that its types do not already guarantee: an ok record has a finite,
/// non-negative TTFT; K ≤ N. Returns the field and the message of the first problem.
pub fn validate_record(r: &Record) -> Result<(), (&'static str, String)> {
    validate_fields(&CheckedFields::of(r))
}

/// [`validate_record`] on the fields it reads: the one definition of a row's semantic checks,
/// shared by the record loader and the columnar probe table.
pub(crate) fn validate_fields(r: &CheckedFields<'_>) -> Result<(), (&'static str, String)> {
    if r.status == Status::Ok {
        match r.ttft_ms {
            None => return Err(("ttft_ms", "missing on an ok record".to_string())),
            Some(t) if t.is_nan() => return Err(("ttft_ms", "NaN on an ok record".to_string())),
            Some(t) if !t.is_finite() => {
                return Err(("ttft_ms", format!("{t} on an ok record")));
            }
            Some(t) if t < 0.0 => {
                return Err(("ttft_ms", format!("negative ({t}) on an ok record")));
            }
            Some(_) => {}
        }
    }
    if let (Some(k), Some(n)) = (r.k, r.n)
        && k > n
    {
        return Err(("k", format!("K = {k} is greater than N = {n}")));
    }
    if r.schema_version == 0 || r.schema_version > crate::record::RECORD_SCHEMA_VERSION {
        return Err((
            "schema_version",
            format!(
                "record schema version {} is not one this tool reads (1..={})",
                r.schema_version,
                crate::record::RECORD_SCHEMA_VERSION
            ),
        ));
    }
    if r.status == Status::Ok {
        served_as_reserved(r)?;
    }
    if r.run_id.is_empty() {
        return Err(("run_id", "empty".to_string()));
    }
    if r.condition_id.is_empty() {
        return Err(("condition_id", "empty".to_string()));
    }
    if r.probe_id.is_empty() {
        return Err(("probe_id", "empty".to_string()));
    }
    Ok(())
}

/// An ok record's TTFT belongs to its observation only if the worker and rank that served are the
/// reserved ones (where both are known). The collector marks a mismatch as `served_elsewhere`;
/// an ok record that still carries one is refused.
fn served_as_reserved(r: &CheckedFields<'_>) -> Result<(), (&'static str, String)> {
    if let (Some(s), Some(b)) = (r.served_worker_id, r.reserved_worker_id)
        && s != b
    {
        return Err((
            "served_worker_id",
            format!(
                "served by worker {s} but reserved on worker {b} (status ok): the observation does not describe the measured worker"
            ),
        ));
    }
    if let (Some(s), Some(b)) = (r.served_dp_rank, r.reserved_dp_rank)
        && s != b
    {
        return Err((
            "served_dp_rank",
            format!(
                "served on rank {s} but reserved rank {b} (status ok): the observation does not describe the measured rank"
            ),
        ));
    }
    Ok(())
}

/// How the records' observations relate to the advisory pick (see `docs/formats.md`): every
/// observation describes the reserved worker and rank; `pick_differs` counts those where the
/// query-only advisory pick named another one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PickSummary {
    /// Records with a reservation and a known advisory pick.
    pub compared: usize,
    /// Of those, records whose advisory pick differs from the reservation.
    pub pick_differs: usize,
    /// Records written before the advisory pick was recorded (their observation is of the
    /// advisory pick, which may not be the worker that served).
    pub legacy: usize,
}

impl PickSummary {
    /// Counts over `records` (reserved records only).
    pub fn of(records: &[Record]) -> Self {
        let mut s = PickSummary::default();
        for r in records {
            s.count(r.reserved_worker_id.is_some(), r.pick_differs);
        }
        s
    }

    /// Counts one record: whether it has a reservation, and its `pick_differs`.
    #[inline]
    pub(crate) fn count(&mut self, reserved: bool, pick_differs: Option<bool>) {
        if !reserved {
            return;
        }
        match pick_differs {
            Some(d) => {
                self.compared += 1;
                self.pick_differs += usize::from(d);
            }
            None => self.legacy += 1,
        }
    }
}

impl std::fmt::Display for PickSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "advisory pick differed from the reservation in {} of {} records ({:.1} %); their observation is of the reserved worker and they are used as is",
            self.pick_differs,
            self.compared,
            100.0 * self.pick_differs as f64 / self.compared.max(1) as f64
        )?;
        if self.legacy > 0 {
            write!(
                f,
                "; {} records predate this check (observation of the advisory pick)",
                self.legacy
            )?;
        }
        Ok(())
    }
}
