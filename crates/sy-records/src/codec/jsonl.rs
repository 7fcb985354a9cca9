//! Crash-safe JSONL: append records as they complete, read them back after a crash.
//!
//! The writer appends one JSON object per line and flushes (and `fsync`s) in batches, so a crash
//! loses at most the unflushed batch and can tear only the last line. The reader accepts a torn
//! last line (no trailing newline, or not valid JSON) and reports it instead of failing; a bad line
//! anywhere else is an error naming the file and line, because it means real corruption.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Errors of JSONL reading and writing; each names the file (and line where there is one).
#[derive(Debug, thiserror::Error)]
pub enum JsonlError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a valid record: {source}")]
    Parse {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: could not serialise a record: {source}")]
    Serialise {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The file cannot be used (a symbolic link, a FIFO): bad input.
    #[error(transparent)]
    Run(#[from] sy_rundir::RunError),
}

impl JsonlError {
    /// Whether the error is the input's fault (a file that cannot be used as it is) rather
    /// than a failed read or write.
    pub fn is_bad_input(&self) -> bool {
        match self {
            JsonlError::Run(e) => e.is_bad_input(),
            JsonlError::Parse { .. } => true,
            JsonlError::Io { .. } | JsonlError::Serialise { .. } => false,
        }
    }
}

/// What [`read`] found.
#[derive(Debug)]
pub struct ReadOutcome<T> {
    pub records: Vec<T>,
    /// Byte length of the valid prefix of the file (everything before a torn last line).
    pub valid_len: u64,
    /// Whether a torn last line was found (and ignored).
    pub torn_tail: bool,
}

/// Reads every complete line of a JSONL file. A torn last line is ignored and reported.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<ReadOutcome<T>, JsonlError> {
    let io = |source| JsonlError::Io {
        path: path.to_path_buf(),
        source,
    };
    sy_rundir::check_input_file(path)?;
    let file = File::open(path).map_err(io)?;
    let mut reader = BufReader::new(file);
    let mut records = Vec::new();
    let mut line = String::new();
    let mut valid_len = 0u64;
    let mut line_no = 0usize;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(io)?;
        if read == 0 {
            return Ok(ReadOutcome {
                records,
                valid_len,
                torn_tail: false,
            });
        }
        line_no += 1;
        let complete = line.ends_with('\n');
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            if complete {
                valid_len += read as u64;
                continue;
            }
            return Ok(ReadOutcome {
                records,
                valid_len,
                torn_tail: true,
            });
        }
        match serde_json::from_str::<T>(text) {
            Ok(record) if complete => {
                records.push(record);
                valid_len += read as u64;
            }
            // A last line without its newline was being written when the process died.
            Ok(_) => {
                return Ok(ReadOutcome {
                    records,
                    valid_len,
                    torn_tail: true,
                });
            }
            Err(source) => {
                // Only the last line may be torn; anything else is corruption.
                let mut rest = String::new();
                let more = reader.read_line(&mut rest).map_err(io)?;
                if more == 0 {
                    return Ok(ReadOutcome {
                        records,
                        valid_len,
                        torn_tail: true,
                    });
                }
                return Err(JsonlError::Parse {
                    path: path.to_path_buf(),
                    line: line_no,
                    source,
                });
            }
        }
    }
}

/// Appends records to a JSONL file, flushing and syncing every `batch` records.
#[derive(Debug)]
pub struct Appender {
    path: PathBuf,
    out: BufWriter<File>,
    pending: usize,
    batch: usize,
    written: u64,
}

impl Appender {
    /// Opens `path` for appending. When `truncate_to` is given (the `valid_len` of a previous
    /// [`read`]), a torn tail beyond it is cut off first so the file stays line-aligned.
    pub fn open(path: &Path, truncate_to: Option<u64>, batch: usize) -> Result<Self, JsonlError> {
        let io = |source| JsonlError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Never through a link, never into a FIFO: a link in the run directory would make the
        // append (and a resume's cut of a torn tail) change a file outside it.
        let file = sy_rundir::open_append(path)?;
        if let Some(len) = truncate_to {
            let current = file.metadata().map_err(io)?.len();
            if current > len {
                file.set_len(len).map_err(io)?;
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            pending: 0,
            batch: batch.max(1),
            written: 0,
        })
    }

    /// Appends one record; flushes when the batch is full.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), JsonlError> {
        let line = serde_json::to_vec(record).map_err(|source| JsonlError::Serialise {
            path: self.path.clone(),
            source,
        })?;
        let io = |source| JsonlError::Io {
            path: self.path.clone(),
            source,
        };
        self.out.write_all(&line).map_err(io)?;
        self.out.write_all(b"\n").map_err(io)?;
        self.pending += 1;
        self.written += 1;
        if self.pending >= self.batch {
            self.flush()?;
        }
        Ok(())
    }

    /// Flushes buffered lines to the file and syncs them to disk.
    pub fn flush(&mut self) -> Result<(), JsonlError> {
        let io = |source| JsonlError::Io {
            path: self.path.clone(),
            source,
        };
        self.out.flush().map_err(io)?;
        self.out.get_ref().sync_data().map_err(io)?;
        self.pending = 0;
        Ok(())
    }

    /// Records appended through this appender.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        // Best effort: an explicit flush reports errors; drop must not panic.
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        a: u64,
    }

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        {
            let mut w = Appender::open(&path, None, 2).unwrap();
            for a in 0..5 {
                w.append(&Row { a }).unwrap();
            }
            w.flush().unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let full = bytes.len() as u64;
        bytes.extend_from_slice(b"{\"a\": 9");
        std::fs::write(&path, &bytes).unwrap();
        let got: ReadOutcome<Row> = read(&path).unwrap();
        assert_eq!(got.records.len(), 5);
        assert!(got.torn_tail);
        assert_eq!(got.valid_len, full);
        // Resuming cuts the torn tail and appends cleanly.
        {
            let mut w = Appender::open(&path, Some(got.valid_len), 1).unwrap();
            w.append(&Row { a: 5 }).unwrap();
        }
        let again: ReadOutcome<Row> = read(&path).unwrap();
        assert!(!again.torn_tail);
        assert_eq!(again.records.last(), Some(&Row { a: 5 }));
        assert_eq!(again.records.len(), 6);
    }

    #[test]
    fn complete_last_line_without_newline_is_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}").unwrap();
        let got: ReadOutcome<Row> = read(&path).unwrap();
        assert_eq!(got.records, vec![Row { a: 1 }]);
        assert!(got.torn_tail);
    }

    #[test]
    fn corruption_in_the_middle_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        std::fs::write(&path, "{\"a\":1}\nnot json\n{\"a\":2}\n").unwrap();
        let err = read::<Row>(&path).unwrap_err().to_string();
        assert!(err.contains("r.jsonl:2"), "{err}");
    }
}
