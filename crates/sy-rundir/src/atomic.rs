//! Atomic file output: write to a temporary file beside the target, sync, then rename.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A failed file operation of the run directory.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Creating, writing, syncing or renaming a file failed (`what` says which step).
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A value could not be serialised as JSON.
    #[error("cannot serialise {}: {source}", path.display())]
    Serialise {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// An output path is an existing directory.
    #[error("{flag} {}: is a directory; expected a file path", path.display())]
    OutputIsDirectory { flag: String, path: PathBuf },
    /// An output path lies under an existing non-directory.
    #[error("{flag} {}: {} is not a directory", path.display(), parent.display())]
    ParentNotDirectory {
        flag: String,
        path: PathBuf,
        parent: PathBuf,
    },
    /// An input file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another process holds the run directory's lock ([`crate::RunLock`]).
    #[error(
        "{}: another sy tool is writing this run directory: {holder}; wait for it to finish \
         (or stop it), or choose another --run-dir",
        dir.display()
    )]
    Locked { dir: PathBuf, holder: String },
    /// An output path (or a directory between the run directory and it) is a symbolic link:
    /// writing through it would write outside the run directory.
    #[error(
        "{}: is a symbolic link; sy writes nothing through a link inside a run directory \
         (remove the link, or choose another path)",
        path.display()
    )]
    Link { path: PathBuf },
    /// A path is not the kind of file expected (a FIFO, device or socket for a file; a file
    /// for a directory).
    #[error("{}: {what}", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    /// A run directory holds another tool's run ([`crate::check_run_kind`]).
    #[error(
        "{}: holds {holds} ({} is there), not {wants}: each writes only its own run \
         directory; choose another --run-dir",
        dir.display(), file.display()
    )]
    OtherTool {
        dir: PathBuf,
        file: PathBuf,
        holds: &'static str,
        wants: &'static str,
    },
    /// An input file is larger than its reader accepts.
    #[error("{}: larger than {limit} bytes, the most this file may hold", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
}

impl RunError {
    /// Whether the error is bad input (a path the user gave that cannot be used: exit code 2)
    /// rather than a runtime failure (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            RunError::OutputIsDirectory { .. }
                | RunError::ParentNotDirectory { .. }
                | RunError::Read { .. }
                | RunError::Locked { .. }
                | RunError::Link { .. }
                | RunError::NotRegular { .. }
                | RunError::TooLarge { .. }
                | RunError::OtherTool { .. }
        )
    }
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RunError {
    let path = path.to_path_buf();
    move |source| RunError::Io { what, path, source }
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the whole new one, never a
/// partial file, and a failed write leaves no temporary file behind.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let tmp = stage(path, bytes)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error("cannot write", path)(e)
    })
}

/// Refuses, as bad input (exit 2), an output path that cannot be written as a file: an existing
/// directory, or a path under an existing non-directory. Tools call it for every output before
/// reading or writing anything, so a bad `--out` never leaves other outputs rewritten.
pub fn check_output_path(path: &Path, flag: &str) -> Result<(), RunError> {
    if path.is_dir() {
        return Err(RunError::OutputIsDirectory {
            flag: flag.to_owned(),
            path: path.to_path_buf(),
        });
    }
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.as_os_str().is_empty() {
            break;
        }
        if d.exists() {
            if !d.is_dir() {
                return Err(RunError::ParentNotDirectory {
                    flag: flag.to_owned(),
                    path: path.to_path_buf(),
                    parent: d.to_path_buf(),
                });
            }
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// Writes several files as one: each is staged (a synced temporary file beside it) before any is
/// renamed into place, so a failure while staging (a full disk, a bad path) leaves every old file
/// as it was and no temporary behind.
pub fn atomic_write_all(files: &[(PathBuf, Vec<u8>)]) -> Result<(), RunError> {
    let mut staged: Vec<(PathBuf, &Path)> = Vec::with_capacity(files.len());
    let cleanup = |staged: &[(PathBuf, &Path)]| {
        for (tmp, _) in staged {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for (path, bytes) in files {
        match stage(path, bytes) {
            Ok(tmp) => staged.push((tmp, path.as_path())),
            Err(e) => {
                cleanup(&staged);
                return Err(e);
            }
        }
    }
    for (i, (tmp, path)) in staged.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp, path) {
            cleanup(&staged[i..]);
            return Err(io_error("cannot write", path)(e));
        }
    }
    Ok(())
}

/// Whether a [`stage_file`] is synced to disk before it can be renamed into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced: after a crash the path holds the old file or the whole new one.
    Synced,
    /// Not synced, for files whose reader verifies every byte (a checksummed cache): after a
    /// crash the path may hold a damaged file, which that reader refuses.
    Verified,
}

/// A file written beside its destination but not yet in place: [`Staged::commit`] renames it
/// into place; dropped uncommitted (the run failed), it is removed and the destination is left
/// as it was. Lets a large output be written while the run is still computing.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl Staged {
    /// Renames the file into place.
    pub fn commit(mut self) -> Result<(), RunError> {
        self.committed = true;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&self.tmp);
            io_error("cannot write", &self.path)(e)
        })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes a file beside `path` from what `write` puts into a buffered writer (for large files
/// better streamed than held in memory first), not yet in place: [`Staged::commit`] renames it
/// into place atomically, like [`atomic_write`].
pub fn stage_file(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<Staged, RunError> {
    let tmp = stage_with(path, durability, |file| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        write(&mut out)?;
        out.flush()
    })?;
    Ok(Staged {
        tmp,
        path: path.to_path_buf(),
        committed: false,
    })
}

/// An empty file beside `path`, open for reading and writing, not yet in place: the caller
/// writes it at will (through a writable mapping, say: a table built in the file it is cached
/// in) and [`Staged::commit`] renames it into place, as [`stage_file`]'s. Never synced, so only
/// for files whose reader verifies every byte ([`Durability::Verified`]).
pub fn stage_open(path: &Path) -> Result<(Staged, std::fs::File), RunError> {
    let mut opened = None;
    let tmp = stage_with(path, Durability::Verified, |file| {
        opened = Some(file.try_clone()?);
        Ok(())
    })?;
    let staged = Staged {
        tmp,
        path: path.to_path_buf(),
        committed: false,
    };
    match opened {
        Some(file) => Ok((staged, file)),
        None => Err(io_error("cannot write", path)(std::io::Error::other(
            "the staged file was not opened",
        ))),
    }
}

/// Writes `bytes` to a synced temporary file beside `path` and returns its path.
fn stage(path: &Path, bytes: &[u8]) -> Result<PathBuf, RunError> {
    stage_with(path, Durability::Synced, |file| file.write_all(bytes))
}

/// Writes a temporary file beside `path` with `write`, syncs it (if `Synced`) and returns its
/// path (removed again if anything fails).
fn stage_with(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<PathBuf, RunError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    crate::guard::check_output_target(path)?;
    std::fs::create_dir_all(&dir).map_err(io_error("cannot create the directory of", path))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    // Unique within the process too: two stagings of one path at once (a table built in its
    // staged cache file while another is staged) must not share, and so truncate, one file.
    static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        // A new file, never one already there (nor a link planted in its name).
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        write(&mut file)?;
        match durability {
            Durability::Synced => file.sync_all(),
            Durability::Verified => Ok(()),
        }
    })();
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            let _ = std::fs::remove_file(&tmp);
        }
        return Err(io_error("cannot write", path)(e));
    }
    Ok(tmp)
}

/// Serialises `value` as pretty JSON (with a trailing newline), for [`atomic_write_all`].
pub fn json_bytes<T: serde::Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, RunError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| RunError::Serialise {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Serialises `value` as pretty JSON (with a trailing newline) and writes it atomically.
pub fn atomic_write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), RunError> {
    atomic_write(path, &json_bytes(path, value)?)
}

/// A JSON parse error with the member it happened in: serde names the line and column but not
/// the field, so the nearest `"key":` before the error position is added (`field `key`: ...`).
pub fn json_error_with_field(text: &str, e: &serde_json::Error) -> String {
    let (line, column) = (e.line(), e.column());
    let offset: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum::<usize>()
        + column;
    let before = text.get(..offset.min(text.len())).unwrap_or("");
    let key = before.rfind("\":").and_then(|end| {
        let start = before[..end].rfind('"')?;
        Some(&before[start + 1..end])
    });
    match key {
        Some(k) if !k.is_empty() => format!("field `{k}`: {e}"),
        _ => e.to_string(),
    }
}

/// SHA-256 of a file's bytes, as lowercase hex (for provenance). The file is read in 1 MiB
/// pieces, never whole: the tools hash their records while the probe table is in memory, and a
/// whole 10 M-record file read at once would add its size (~240 MB) to their peak.
pub fn file_sha256(path: &Path) -> Result<String, RunError> {
    let read_error = |source| RunError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(e)),
        }
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_staged_file_is_in_place_only_once_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.cache");
        std::fs::write(&path, b"old").unwrap();
        let write = |out: &mut dyn Write| out.write_all(b"new");
        let staged = stage_file(&path, Durability::Verified, write).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(names(dir.path()).len(), 2, "the staged file beside it");
        drop(staged);
        assert_eq!(names(dir.path()), ["big.cache"], "dropped: removed");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        stage_file(&path, Durability::Synced, write)
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(names(dir.path()), ["big.cache"]);
    }

    #[test]
    fn an_opened_staged_file_is_written_in_place_of_the_old_only_once_committed() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.cache");
        std::fs::write(&path, b"old").unwrap();
        let (staged, file) = stage_open(&path).unwrap();
        file.write_all_at(b"new", 0).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(names(dir.path()).len(), 2, "the staged file beside it");
        drop(staged);
        assert_eq!(names(dir.path()), ["big.cache"], "dropped: removed");
        let (staged, file) = stage_open(&path).unwrap();
        file.write_all_at(b"newer", 0).unwrap();
        let mut back = [0; 3];
        file.read_exact_at(&mut back, 2).unwrap();
        assert_eq!(&back, b"wer", "open for reading too");
        // A second staging of the same path meanwhile gets a file of its own.
        let (other, other_file) = stage_open(&path).unwrap();
        other_file.write_all_at(b"x", 0).unwrap();
        let mut back = [0; 5];
        file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"newer", "not truncated by the second staging");
        drop(other);
        staged.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"newer");
        assert_eq!(names(dir.path()), ["big.cache"]);
    }

    #[test]
    fn writes_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("x.json");
        atomic_write_json(&path, &serde_json::json!({"a": 1})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\n  \"a\": 1\n}\n");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn failed_write_reports_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: rename fails.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("f"), b"x").unwrap();
        let err = atomic_write(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("taken"), "{err}");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1);
    }

    #[test]
    fn write_all_is_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        std::fs::write(&a, b"old").unwrap();
        // The second file's parent is a file: staging fails, `a` keeps its old bytes.
        let blocker = dir.path().join("blocker");
        std::fs::write(&blocker, b"x").unwrap();
        let files = vec![
            (a.clone(), b"new".to_vec()),
            (blocker.join("b.json"), b"b".to_vec()),
        ];
        assert!(atomic_write_all(&files).is_err());
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        let files = vec![
            (a.clone(), b"new".to_vec()),
            (dir.path().join("c"), b"c".to_vec()),
        ];
        atomic_write_all(&files).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"new");
    }

    #[test]
    fn output_paths_that_cannot_be_files_are_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_output_path(dir.path(), "--out").unwrap_err();
        assert!(matches!(err, RunError::OutputIsDirectory { .. }));
        assert!(err.is_bad_input());
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let err = check_output_path(&file.join("x.json"), "--out").unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
        check_output_path(&dir.path().join("new/sub/x.json"), "--out").unwrap();
    }

    #[test]
    fn json_errors_name_the_member() {
        let text = "{\n  \"a\": 1,\n  \"level\": \"high\"\n}";
        let e = serde_json::from_str::<std::collections::BTreeMap<String, f64>>(text).unwrap_err();
        let m = json_error_with_field(text, &e);
        assert!(m.starts_with("field `level`: invalid type"), "{m}");
    }

    #[test]
    fn sha256_of_known_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("abc");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            file_sha256(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn sha256_of_a_file_read_in_pieces_is_that_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        // Three pieces and a bit: 1 MiB boundaries inside the file.
        let bytes: Vec<u8> = (0..(3 << 20) + 12_345)
            .map(|i: u32| (i % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            file_sha256(&path).unwrap(),
            hex::encode(Sha256::digest(&bytes))
        );
        let missing = file_sha256(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }
}
