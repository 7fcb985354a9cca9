//! Records on disk: the crash-safe JSONL, resume bookkeeping and the Parquet copy.
//!
//! `records.jsonl` gets the two records of a unit appended together and flushed (and synced)
//! right after the unit ends, so a crash loses at most the unit in flight and can tear only the
//! last line. On `--resume` the file is read back (a torn last line is ignored and cut off), the
//! *completed* units are those with both roles recorded and neither cancelled, and any record of
//! an incomplete unit (one side written before a crash, or a cancelled unit) is moved to
//! `attempts.jsonl` so the unit can be run again without leaving a duplicate. `attempts.jsonl`
//! also receives the records of attempts that were retried: failures are never dropped.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use sy_records::Model;
use sy_rundir::Artifact;

use sy_records::jsonl::{self, Appender};
use sy_records::{ErrorClass, Record, Status};

/// Errors of the record files; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error(transparent)]
    Jsonl(#[from] jsonl::JsonlError),
    /// The kept records could not be written back.
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        source: sy_rundir::RunError,
    },
    #[error("{path}: cannot serialise a record: {source}")]
    Serialise {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The run directory's records are not this run's (bad input).
    #[error(
        "{path}: line {line}: field `run_id` is {found:?}, not the run being resumed \
         ({run_id:?}, manifest.json): records of another run cannot be continued; choose another \
         --run-dir"
    )]
    Foreign {
        path: PathBuf,
        line: usize,
        found: String,
        run_id: String,
    },
}

impl ResultsError {
    /// Whether the error is the input's fault (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            ResultsError::Jsonl(e) => e.is_bad_input(),
            ResultsError::Foreign { .. } => true,
            ResultsError::Write { source, .. } => {
                matches!(source, sy_rundir::RunError::Link { .. })
            }
            ResultsError::Serialise { .. } => false,
        }
    }
}

/// What a previous session left.
#[derive(Debug, Default)]
pub struct ResumeState {
    /// (condition id, repeat) units already complete.
    pub done: HashSet<(String, u32)>,
    /// Records kept in `records.jsonl`.
    pub kept: usize,
    /// Records moved to `attempts.jsonl` (incomplete or cancelled units).
    pub moved: usize,
    pub torn_tail: bool,
    /// Byte length of the valid prefix of `records.jsonl`.
    pub valid_len: Option<u64>,
}

/// Whether a unit's records make it complete: both roles, neither cancelled.
fn complete_units(records: &[Record]) -> HashSet<(String, u32)> {
    let mut roles: BTreeMap<(String, u32), (bool, bool, bool)> = BTreeMap::new();
    for r in records {
        let e = roles
            .entry((r.condition_id.clone(), r.repeat))
            .or_insert((false, false, false));
        match r.role {
            Model::Efficient => e.0 = true,
            Model::Capable => e.1 = true,
        }
        if r.status == Status::Error && r.error_class == Some(ErrorClass::Cancelled) {
            e.2 = true;
        }
    }
    roles
        .into_iter()
        .filter(|(_, (a, b, c))| *a && *b && !*c)
        .map(|(k, _)| k)
        .collect()
}

/// Reads `records.jsonl` in `dir` and prepares it for appending.
/// Every record must be of run `run_id` (the manifest's): records of another run are refused
/// before anything is moved or rewritten.
pub fn prepare_resume(dir: &Path, run_id: Option<&str>) -> Result<ResumeState, ResultsError> {
    let path = dir.join(Artifact::Records.file_name());
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(ResumeState::default());
    }
    sy_rundir::check_output_target(&path).map_err(jsonl::JsonlError::from)?;
    let read = jsonl::read::<Record>(&path)?;
    if let Some(run_id) = run_id
        && let Some((line, r)) = read
            .records
            .iter()
            .enumerate()
            .find(|(_, r)| r.run_id != run_id)
    {
        return Err(ResultsError::Foreign {
            path,
            line: line + 1,
            found: sy_rundir::escape_control(&r.run_id),
            run_id: run_id.to_string(),
        });
    }
    let done = complete_units(&read.records);
    let (keep, moved): (Vec<Record>, Vec<Record>) = read
        .records
        .into_iter()
        .partition(|r| done.contains(&(r.condition_id.clone(), r.repeat)));
    if moved.is_empty() {
        return Ok(ResumeState {
            done,
            kept: keep.len(),
            moved: 0,
            torn_tail: read.torn_tail,
            valid_len: Some(read.valid_len),
        });
    }
    // Keep the superseded records (append to attempts.jsonl first, then rewrite records).
    {
        let mut attempts =
            Appender::open(&dir.join(Artifact::Attempts.file_name()), None, usize::MAX)?;
        for r in &moved {
            attempts.append(r)?;
        }
        attempts.flush()?;
    }
    let mut bytes = Vec::new();
    for r in &keep {
        let line = serde_json::to_vec(r).map_err(|source| ResultsError::Serialise {
            path: path.clone(),
            source,
        })?;
        bytes.extend_from_slice(&line);
        bytes.push(b'\n');
    }
    sy_cli::atomic_write(&path, &bytes).map_err(|source| ResultsError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(ResumeState {
        done,
        kept: keep.len(),
        moved: moved.len(),
        torn_tail: read.torn_tail,
        valid_len: None,
    })
}

/// The two appenders of a run.
#[derive(Debug)]
pub struct RecordSink {
    records: Appender,
    attempts: Appender,
}

impl RecordSink {
    pub fn open(dir: &Path, truncate_to: Option<u64>) -> Result<Self, ResultsError> {
        Ok(Self {
            records: Appender::open(
                &dir.join(Artifact::Records.file_name()),
                truncate_to,
                usize::MAX,
            )?,
            attempts: Appender::open(&dir.join(Artifact::Attempts.file_name()), None, usize::MAX)?,
        })
    }

    /// Appends a unit's final records and syncs them.
    pub fn unit(&mut self, records: &[Record]) -> Result<(), ResultsError> {
        for r in records {
            self.records.append(r)?;
        }
        self.records.flush()?;
        Ok(())
    }

    /// Appends the records of an attempt that is about to be retried.
    pub fn retried(&mut self, records: &[Record]) -> Result<(), ResultsError> {
        for r in records {
            self.attempts.append(r)?;
        }
        self.attempts.flush()?;
        Ok(())
    }
}

/// Reads every record of the run (for counts and the Parquet copy).
pub fn read_all(dir: &Path) -> Result<Vec<Record>, ResultsError> {
    let path = dir.join(Artifact::Records.file_name());
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(jsonl::read::<Record>(&path)?.records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::{Background, ObservedFields, Phase, RECORD_SCHEMA_VERSION};

    pub(crate) fn rec(cond: &str, repeat: u32, role: Model, class: Option<ErrorClass>) -> Record {
        Record {
            schema_version: RECORD_SCHEMA_VERSION,
            run_id: "run".into(),
            condition_id: cond.into(),
            phase: Phase::Qgrid,
            repeat,
            probe_id: format!("{cond}/r{repeat}/a1"),
            role,
            model: role.as_str().into(),
            planned_n: 10,
            planned_f: 0.0,
            background: Background::default(),
            observed: ObservedFields {
                n: Some(10),
                k: Some(0),
                r: Some(0),
                prefill_tokens_booked: None,
                prefill_capacity_tokens: None,
                p: None,
                host_overlap_tokens: None,
                disk_overlap_tokens: None,
                effective_prefill_tokens: None,
                decode_blocks: None,
                kv_capacity_blocks: None,
                pool_pending_requests: None,
                pool_pending_tokens: None,
                schedulable: None,
                worker_id: None,
                dp_rank: None,
                endpoint: None,
                routing_group: None,
                observed_at_unix_ms: None,
                query_duration_ms: None,
            },
            sent_at_unix_ms: 0.0,
            reserved_worker_id: None,
            reserved_dp_rank: None,
            advisory_worker_id: None,
            advisory_dp_rank: None,
            advisory_k: None,
            advisory_r: None,
            advisory_p: None,
            pick_differs: None,
            served_worker_id: None,
            served_dp_rank: None,
            ttft_ms: class.is_none().then_some(5.0),
            server_ttft_ms: None,
            client_server_gap_ms: None,
            e2e_ms: None,
            prompt_tokens: None,
            output_tokens: None,
            cached_tokens: None,
            status: if class.is_some() {
                Status::Error
            } else {
                Status::Ok
            },
            error_class: class,
            error_message: None,
            attempts: 1,
        }
    }

    #[test]
    fn resume_moves_incomplete_and_cancelled_units() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut sink = RecordSink::open(dir.path(), None).unwrap();
            sink.unit(&[
                rec("a", 0, Model::Efficient, None),
                rec("a", 0, Model::Capable, Some(ErrorClass::Http5xx)),
            ])
            .unwrap();
            sink.unit(&[
                rec("a", 1, Model::Efficient, Some(ErrorClass::Cancelled)),
                rec("a", 1, Model::Capable, Some(ErrorClass::Cancelled)),
            ])
            .unwrap();
            // One side only (crash between the two lines).
            sink.unit(&[rec("b", 0, Model::Efficient, None)]).unwrap();
        }
        // And a torn tail.
        let path = dir.path().join(Artifact::Records.file_name());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"schema_version\":1,");
        std::fs::write(&path, bytes).unwrap();

        let st = prepare_resume(dir.path(), None).unwrap();
        assert!(st.torn_tail);
        assert_eq!(st.kept, 2);
        assert_eq!(st.moved, 3);
        assert!(st.done.contains(&("a".to_string(), 0)));
        assert!(!st.done.contains(&("a".to_string(), 1)));
        let kept = read_all(dir.path()).unwrap();
        assert_eq!(kept.len(), 2);
        let attempts: Vec<Record> = jsonl::read(&dir.path().join(Artifact::Attempts.file_name()))
            .unwrap()
            .records;
        assert_eq!(attempts.len(), 3);
        // Idempotent.
        let again = prepare_resume(dir.path(), None).unwrap();
        assert_eq!((again.kept, again.moved), (2, 0));
    }
}
